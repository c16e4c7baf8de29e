package main

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
)

// TestCrashLoopIsBroken kills the agent with SIGKILL three times in a row
// while it applies one transaction (a 64 MiB value), as the OOM killer
// would: the fourth start quarantines the transaction. Its table fails
// where an operator looks (status, /readyz) with the way out, its change
// stays queued, and the other table goes on. `lakeside resync` then
// releases the table, and its mirror equals PostgreSQL.
func TestCrashLoopIsBroken(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash loop test skipped in -short mode")
	}
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.big", "public.other"}, "http:\n  listen: "+addr+"\n")
	e.exec(`CREATE TABLE big (id int PRIMARY KEY, v text)`, `INSERT INTO big VALUES (1, 'a'), (2, 'b')`,
		`CREATE TABLE other (id int PRIMARY KEY, v text)`)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)
	e.exec(`UPDATE big SET v = repeat('y', 64 << 20) WHERE id = 1`)
	record := filepath.Join(e.stateDir, agent.CrashRecordName)
	var held []byte
	for run := 1; run <= 3; run++ {
		held = waitApplying(t, record, held, d)
		e.sigkill(d, run)
		t.Logf("killed run %d holding %s", run, held)
		d = e.start()
	}

	var st *agent.Status
	for deadline := time.Now().Add(60 * time.Second); ; {
		st = e.status()
		if len(st.ApplyFailures) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no table failing 60 s after the third kill: %+v; log:\n%s", st, d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if f := st.ApplyFailures; len(f) != 1 || f[0].Table != "public.big" || !strings.Contains(f[0].Error, "quarantined") ||
		!strings.Contains(f[0].Error, "lakeside resync public.big") {
		t.Fatalf("apply failures %+v, want public.big quarantined", f)
	}
	if log := d.log(); !strings.Contains(log, "transaction quarantined") {
		t.Fatalf("the quarantine is not logged; log:\n%s", log)
	}
	e.exec(`INSERT INTO other SELECT g, 'x' FROM generate_series(1, 50) g`)
	for deadline := time.Now().Add(60 * time.Second); len(e.tableRowsIfAny("public.other")) != 50; {
		if time.Now().After(deadline) {
			t.Fatalf("the other table did not go on; log:\n%s", d.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "public.big") {
		t.Fatalf("/readyz while quarantined: %d %s", resp.StatusCode, body)
	}
	if got := bigValues(t, e); got[1] == pgBigValues(t, e)[1] {
		t.Fatal("the quarantined change reached the mirror")
	}

	out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.big")
	if code != 0 || !strings.Contains(out, "quarantined transaction no longer holds public.big back") {
		t.Fatalf("resync exited %d: %s%s", code, out, errOut)
	}
	e.waitApplied(d)
	for deadline := time.Now().Add(90 * time.Second); len(e.status().ApplyFailures) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("public.big still failing after its resync: %+v; log:\n%s", e.status().ApplyFailures, d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.waitApplied(d)
	if got, want := bigValues(t, e), pgBigValues(t, e); !maps.Equal(got, want) {
		t.Fatalf("mirror of public.big after its resync: %v, PostgreSQL: %v", got, want)
	}
	e.compareMirror(t, "public.other", `SELECT id, v FROM other`, "id", "v")
	e.stop(d)
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("a clean stop left the crash record: %v", err)
	}
}

// waitApplying waits until the crash record says that the applier holds
// part of the queue, in a record other than last (which the run before
// left), and returns it.
func waitApplying(t *testing.T, record string, last []byte, d *daemon) []byte {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		select {
		case <-d.exited:
			t.Fatalf("agent exited; log:\n%s", d.log())
		default:
		}
		var rec struct {
			Applying json.RawMessage `json:"applying"`
		}
		data, err := os.ReadFile(record)
		if err == nil && string(data) != string(last) && json.Unmarshal(data, &rec) == nil && rec.Applying != nil {
			return data
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the applier never held the transaction; log:\n%s", d.log())
	return nil
}

// bigValues returns the md5 of each value of the mirror of public.big,
// by id.
func bigValues(t *testing.T, e *e2e) map[int32]string {
	t.Helper()
	got := map[int32]string{}
	if err := e.scanDelta("public.big", func(r map[string]any) {
		got[r["id"].(int32)] = fmt.Sprintf("%x", md5.Sum([]byte(r["v"].(string))))
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// pgBigValues returns the md5 of each value of public.big, by id.
func pgBigValues(t *testing.T, e *e2e) map[int32]string {
	t.Helper()
	want := map[int32]string{}
	rows, err := e.conn.Query(context.Background(), `SELECT id, md5(v) FROM big`)
	if err != nil {
		t.Fatal(err)
	}
	var id int32
	var sum string
	if _, err := pgx.ForEachRow(rows, []any{&id, &sum}, func() error { want[id] = sum; return nil }); err != nil {
		t.Fatal(err)
	}
	return want
}
