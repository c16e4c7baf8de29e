package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
)

// TestApplyFailingIsVisible runs the agent with one table whose Delta
// tables cannot be created (a file where its mirror's directory goes). The
// other table keeps committing, and the failure shows at once everywhere
// an operator looks: `lakeside status` (state "apply failing", the error
// and since when), /readyz (503), /metrics, the service manager's STATUS=
// line and an ERROR log line. Once the obstacle is gone the table applies
// its queued changes by itself and the mirror equals PostgreSQL.
func TestApplyFailingIsVisible(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.f", "public.g"}, "http:\n  listen: "+addr+"\n")
	e.exec(`CREATE TABLE f (id int PRIMARY KEY, v text)`, `INSERT INTO f SELECT g, 'snap' FROM generate_series(1, 20) g`,
		`CREATE TABLE g (id int PRIMARY KEY, v text)`)
	obstacle := filepath.Join(e.stateDir, "tables", "public.f")
	if err := os.MkdirAll(filepath.Dir(obstacle), 0o750); err != nil {
		t.Fatal(err)
	}
	writeFile(t, obstacle, "in the way")
	n := listenNotify(t)
	d := e.start("NOTIFY_SOCKET=" + n.path)
	waitState(t, e, d, "streaming")
	e.exec(`INSERT INTO f VALUES (21, 'streamed')`, `INSERT INTO g SELECT g, 'x' FROM generate_series(1, 30) g`)

	var st *agent.Status
	deadline := time.Now().Add(60 * time.Second)
	for {
		st = e.status()
		if st.ApplyState == agent.ApplyFailing && len(e.tableRowsIfAny("public.g")) == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no apply failure with g applied in 60 s: status %+v; log:\n%s", st, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(st.ApplyFailures) != 1 || st.ApplyFailures[0].Table != "public.f" || !strings.Contains(st.ApplyFailures[0].Error, "not a directory") ||
		st.ApplyFailures[0].Since.IsZero() {
		t.Fatalf("apply failures %+v, want public.f failing", st.ApplyFailures)
	}
	out, _, code := e.lakeside("status", "--config", e.configPath)
	for _, want := range []string{"capture streaming, apply failing", "apply failing:", "public.f since "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status does not say %q: exit %d\n%s", want, code, out)
		}
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "apply failing: public.f") {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "\nlakeside_apply_failing 1\n") ||
		!strings.Contains(body, `lakeside_apply_table_failing_since_timestamp_seconds{table="public.f"}`) {
		t.Fatalf("/metrics lacks the failure:\n%s", grepLines(body, "lakeside_apply"))
	}
	statusLine := ""
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !strings.Contains(statusLine, "apply failing"); {
		statusLine = n.next(time.Until(deadline))
	}
	if !strings.Contains(statusLine, "STATUS=apply failing: public.f since ") {
		t.Fatalf("no STATUS= line saying the apply fails; last message %q", statusLine)
	}
	if log := d.log(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "table cannot be applied") {
		t.Fatalf("no ERROR line for the failing table; log:\n%s", log)
	}

	if err := os.Remove(obstacle); err != nil {
		t.Fatal(err)
	}
	e.exec(`UPDATE f SET v = 'later' WHERE id <= 5`)
	e.waitApplied(d)
	if st := e.status(); st.ApplyState != "applying" || len(st.ApplyFailures) != 0 {
		t.Fatalf("after the obstacle went: apply state %q, failures %+v", st.ApplyState, st.ApplyFailures)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d %s", code, body)
	}
	e.compareMirror(t, "public.f", `SELECT id, v FROM f`, "id", "v")
	e.compareMirror(t, "public.g", `SELECT id, v FROM g`, "id", "v")
	out, _, _ = e.lakeside("status", "--config", e.configPath, "--json")
	var js map[string]any
	if err := json.Unmarshal([]byte(out), &js); err != nil || js["apply_state"] != "applying" {
		t.Fatalf("status --json after recovery: %v\n%s", err, out)
	}
	e.stop(d)
}

// tableRowsIfAny reads a local Delta table's rows, or nothing when it is
// not created yet: no directory, or one whose first commit is not written
// yet (the agent makes _delta_log before it).
func (e *e2e) tableRowsIfAny(table string) []map[string]any {
	e.t.Helper()
	rows, err := e.readDelta(table)
	if notATableYet(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// grepLines returns the lines of text that contain substr.
func grepLines(text, substr string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
