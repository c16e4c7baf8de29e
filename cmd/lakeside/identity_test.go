package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
)

// waitCaptured waits until the running agent's status says the table is
// captured in the given generation.
func waitCaptured(t *testing.T, e *e2e, d *daemon, table string, generation uint64) agent.CapturedStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			t.Fatalf("agent exited; log:\n%s", d.log())
		default:
		}
		if st, err := agent.AskStatus(context.Background(), e.stateDir); err == nil {
			for _, c := range st.Captured {
				if c.Table == table && c.Generation == generation {
					return c
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s was not captured in generation %d within 90s; log:\n%s", table, generation, d.log())
	return agent.CapturedStatus{}
}

// TestTableIdentityAcrossRenameAndRecreate runs the agent while a captured
// table is renamed, and then dropped and created again: the changes go on
// into the same Delta tables; the agent starts again cleanly with the old
// name in source.tables and with the new one, and makes no new Delta
// tables; the re-created table is captured within a few seconds with no
// restart, after a truncate in the changelog, and the other table's
// changes flow throughout.
func TestTableIdentityAcrossRenameAndRecreate(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.stock", "public.other"})
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`, `CREATE TABLE other (id int PRIMARY KEY)`,
		`INSERT INTO stock SELECT g, g FROM generate_series(1, 10) g`)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.exec(`ALTER TABLE stock RENAME TO goods`, `INSERT INTO goods VALUES (11, 11)`, `INSERT INTO other VALUES (1)`)
	e.waitApplied(d)
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM goods`, "id", "qty")
	e.stop(d)

	// The old name in source.tables.
	d = e.start()
	waitState(t, e, d, "streaming")
	e.exec(`UPDATE goods SET qty = 0 WHERE id = 1`)
	e.waitApplied(d)
	e.stop(d)
	if !strings.Contains(d.log(), "another name in PostgreSQL now") {
		t.Errorf("the agent started with the old name did not say the table was renamed; log:\n%s", d.log())
	}

	// The new name in source.tables.
	e.setSourceKey("tables", "[public.goods, public.other]")
	d = e.start()
	waitState(t, e, d, "streaming")
	e.exec(`DELETE FROM goods WHERE id = 2`)
	e.waitApplied(d)
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM goods`, "id", "qty")
	entries, err := os.ReadDir(filepath.Join(e.stateDir, "tables"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, de := range entries {
		if !strings.HasPrefix(de.Name(), ".") {
			dirs = append(dirs, de.Name())
		}
	}
	if want := []string{"public.other", "public.other_changes", "public.stock", "public.stock_changes"}; !slices.Equal(dirs, want) {
		t.Fatalf("Delta tables %v, want %v", dirs, want)
	}

	// Dropped and created again while the agent runs.
	e.exec(`DROP TABLE goods`, `CREATE TABLE goods (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO other VALUES (2)`)
	c := waitCaptured(t, e, d, "public.stock", 2)
	if !strings.HasPrefix(c.Event, "re-created") || c.PostgresName != "public.goods" {
		t.Errorf("status of the re-created table: %+v", c)
	}
	e.exec(`INSERT INTO goods VALUES (100, 1), (101, 2)`, `INSERT INTO other VALUES (3)`)
	e.waitApplied(d)
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM goods`, "id", "qty")
	e.compareMirror(t, "public.other", `SELECT id FROM other`, "id")
	out, _, code := e.lakeside("status", "--config", e.configPath)
	if code != 0 || !strings.Contains(out, "CAPTURED AS") || !strings.Contains(out, "re-created at") {
		t.Errorf("lakeside status does not say the table was re-created: exit %d\n%s", code, out)
	}
	t.Logf("lakeside status:\n%s", out)
	e.stop(d)
	if !strings.Contains(d.log(), "dropped and created again") {
		t.Errorf("the log does not say the table was re-created:\n%s", d.log())
	}

	// The changelog: the old table's changes, one truncate, the new
	// table's inserts.
	var truncateLSN int64
	var oldLSNs, newLSNs []int64
	for _, r := range e.deltaRows("public.stock_changes") {
		lsn := r["_lsn"].(int64)
		switch {
		case r["_op"] == "truncate":
			if truncateLSN != 0 {
				t.Fatalf("two truncates in the changelog")
			}
			truncateLSN = lsn
		case r["id"].(int32) >= 100:
			newLSNs = append(newLSNs, lsn)
		default:
			oldLSNs = append(oldLSNs, lsn)
		}
	}
	if truncateLSN == 0 || len(oldLSNs) != 13 || len(newLSNs) != 2 {
		t.Fatalf("changelog: truncate at %d, %d changes of the old table, %d of the new; want one truncate, 13 and 2", truncateLSN, len(oldLSNs), len(newLSNs))
	}
	if slices.Max(oldLSNs) >= truncateLSN || slices.Min(newLSNs) <= truncateLSN {
		t.Fatalf("changelog: truncate at %d, the old table's last change at %d, the new one's first at %d",
			truncateLSN, slices.Max(oldLSNs), slices.Min(newLSNs))
	}
}
