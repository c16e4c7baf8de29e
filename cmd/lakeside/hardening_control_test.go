package main

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
)

// TestControlSocketHardening starts the agent with umask 000 and checks its
// control socket: the socket has mode 0600 all the same, and a vacuum
// request whose dry_run cannot be read is refused with 400 and deletes
// nothing, while a dry run lists and a vacuum deletes the same old orphan
// file. A request following a resync that cannot be read is refused.
func TestControlSocketHardening(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.items"})
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)`,
		`INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	d := e.startWithUmask0()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)

	sock := filepath.Join(e.stateDir, agent.SocketName)
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket %s has mode %v under umask 000, want 0600 (srw-------)", sock, fi.Mode())
	}

	// A file no version references, older than the retention: a vacuum
	// deletes it, a dry run only lists it.
	orphan := filepath.Join(e.stateDir, "tables", "public.items", "orphan.parquet")
	writeFile(t, orphan, "not referenced by any version\n")
	old := time.Now().AddDate(0, 0, -30)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		_, err := os.Lstat(orphan)
		return err == nil
	}

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	defer client.CloseIdleConnections()
	post := func(query string) (int, string) {
		t.Helper()
		resp, err := client.Post("http://lakeside/vacuum?"+query, "", nil)
		if err != nil {
			t.Fatalf("POST /vacuum?%s: %v", query, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}

	for _, query := range []string{"dry_run=maybe", "dry_run=", "dry_run=1", "dry_run=TRUE", "dry_run=true&dry_run=false",
		"dryrun=true", "dry_run=%zz", "dry_run=true;x"} {
		code, body := post(query)
		if code != http.StatusBadRequest || !strings.Contains(body, "vacuum query") {
			t.Errorf("POST /vacuum?%s: %d %q, want 400 with the reason", query, code, body)
		}
		if !exists() {
			t.Fatalf("POST /vacuum?%s deleted %s", query, orphan)
		}
	}

	code, body := post("dry_run=true")
	var rep agent.VacuumReport
	if code != http.StatusOK {
		t.Fatalf("POST /vacuum?dry_run=true: %d %q", code, body)
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("POST /vacuum?dry_run=true: %q: %v", body, err)
	}
	if !rep.DryRun || !strings.Contains(body, `"orphan.parquet"`) || !exists() {
		t.Fatalf("dry run did not list %s without deleting it: %s", orphan, body)
	}

	code, body = post("dry_run=false")
	if code != http.StatusOK || exists() {
		t.Fatalf("POST /vacuum?dry_run=false: %d %q; orphan left: %v", code, body, exists())
	}

	// Following a resync: a query that cannot be read is refused; a copy
	// never asked for is answered as none once the wait is over.
	for _, query := range []string{"", "table=public.items", "table=public.items&since=2026-12-03T10:00:00Z",
		"table=public.items&since=yesterday&wait=1s", "table=public.items&since=2026-12-03T10:00:00Z&wait=-1s",
		"table=public.items&since=2026-12-03T10:00:00Z&wait=forever", "table=public.items&since=2026-12-03T10:00:00Z&wait=1s&x=1",
		"table=public.items&table=public.other&since=2026-12-03T10:00:00Z&wait=1s"} {
		resp, err := client.Get("http://lakeside/resync?" + query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "follow resync") {
			t.Errorf("GET /resync?%s: %d %q, want 400 with the reason", query, resp.StatusCode, body)
		}
	}
	p, err := agent.FollowResync(context.Background(), e.stateDir, &agent.ResyncReply{Table: "public.items", Since: time.Now()}, 200*time.Millisecond)
	if err != nil || p.Backfill != nil {
		t.Fatalf("following a resync never asked for: %+v, %v; want no copy", p, err)
	}
	e.stop(d)
}

// startWithUmask0 is start with the agent's umask set to 000, so that any
// file mode the agent does not set explicitly shows in the test.
func (e *e2e) startWithUmask0() *daemon {
	e.t.Helper()
	cmd := exec.Command("sh", "-c", `umask 000; exec "$0" "$@"`, os.Args[0], "run", "--config", e.configPath)
	cmd.Env = append(os.Environ(), "LAKESIDE_TEST_MAIN=1")
	return e.startCommand(cmd)
}
