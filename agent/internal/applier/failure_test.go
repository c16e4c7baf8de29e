package applier

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAllNullRowUnderReplicaIdentityFull deletes a row of nulls from a
// REPLICA IDENTITY FULL table, then inserts into another table. The
// delete's old row, all nulls at the end of its queued chunk, once failed
// to decode, and no table advanced again.
func TestAllNullRowUnderReplicaIdentityFull(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE f (a int, b text); ALTER TABLE f REPLICA IDENTITY FULL; INSERT INTO f VALUES (NULL, NULL), (1, 'one');
		CREATE TABLE g (id int PRIMARY KEY);`, "f", "g")
	a := h.applier()
	h.apply(a)
	h.exec(`DELETE FROM f WHERE a IS NULL`, `INSERT INTO g VALUES (1)`)
	h.apply(a)
	h.checkMirror("f")
	h.checkMirror("g")
	h.checkChangelog("f", []string{"snapshot", "snapshot", "delete"})
	h.checkChangelog("g", []string{"insert"})
	if f := a.Failures(); len(f) != 0 {
		t.Fatalf("failures: %+v", f)
	}
	// The changelogs' partition directories are not hidden.
	for _, tb := range []string{"public.f_changes", "public.g_changes"} {
		for _, add := range h.snapshot(tb).Files() {
			if dir := path.Dir(add.Path); strings.HasPrefix(dir, "_") || strings.HasPrefix(dir, ".") || !strings.HasPrefix(dir, "commit_date=") {
				t.Errorf("%s: data file %s is not in a visible commit_date= directory", tb, add.Path)
			}
		}
	}
}

// TestFailingTableDoesNotHoldUpOthers makes one table's Delta tables
// impossible to create (a file where its mirror's directory goes): the
// other table goes on committing, the failing table's changes stay queued
// across flushes and a restart, it is reported with its error and since
// when, and once the obstacle is gone its retry applies them, each once.
func TestFailingTableDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, `
		CREATE TABLE f (id int PRIMARY KEY, v text); INSERT INTO f SELECT g, 'snap' FROM generate_series(1, 50) g;
		CREATE TABLE g (id int PRIMARY KEY, v text); INSERT INTO g SELECT g, 'snap' FROM generate_series(1, 50) g;`, "f", "g")
	obstacle := filepath.Join(h.tablesDir, "public.f")
	if err := os.MkdirAll(h.tablesDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obstacle, []byte("in the way"), 0o640); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	newApplier := func() *Applier {
		a := h.applier()
		a.now = func() time.Time { return clock }
		return a
	}
	applyFailing := func(a *Applier, queued int) {
		t.Helper()
		h.caughtUp()
		// A flush that tries f fails it; one that holds it back (not
		// due for a retry) does not.
		err := a.applyAll(ctx)
		var failed tableErrors
		if err != nil && (!errors.As(err, &failed) || len(failed) != 1 || failed["public.f"] == nil) {
			t.Fatalf("applyAll: %v, want public.f failing", err)
		}
		fs := a.Failures()
		if len(fs) != 1 || fs[0].Table != "public.f" || !strings.Contains(fs[0].Err.Error(), "public.f") || !fs[0].Since.Equal(clock) {
			t.Fatalf("failures %+v, want public.f failing since %s", fs, clock)
		}
		h.checkMirror("g")
		h.checkChangelog("g", nil)
		// f's changes are all still queued: nothing of it was trimmed.
		if n := len(h.queuedChanges()["f"]); n != queued {
			t.Fatalf("%d changes of f queued, want %d", n, queued)
		}
	}

	a := newApplier()
	applyFailing(a, 50)
	// More changes to both, flushed while f is behind and not due.
	h.exec(`INSERT INTO f SELECT g, 'new' FROM generate_series(51, 80) g`, `UPDATE g SET v = 'upd' WHERE id <= 10`,
		`DELETE FROM g WHERE id > 45`, `INSERT INTO g VALUES (100, 'late')`)
	applyFailing(a, 80)
	// A restart reads every table again from the applied position: g
	// passes over what it holds, f fails again.
	a = newApplier()
	applyFailing(a, 80)

	if err := os.Remove(obstacle); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(time.Hour) // the retry is due
	h.exec(`UPDATE f SET v = 'after' WHERE id % 7 = 0`, `DELETE FROM f WHERE id % 11 = 0`, `INSERT INTO g VALUES (101, 'x')`)
	h.apply(a)
	if fs := a.Failures(); len(fs) != 0 {
		t.Fatalf("failures after the obstacle went: %+v", fs)
	}
	for _, tb := range []string{"f", "g"} {
		h.checkMirror(tb)
		h.checkChangelog(tb, nil)
	}
	ops := map[string]int{}
	for _, op := range h.changelogKeys("f") {
		ops[op]++
	}
	var updated, deleted int
	if err := h.conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE i % 7 = 0), count(*) FILTER (WHERE i % 11 = 0)
		FROM generate_series(1, 80) i`).Scan(&updated, &deleted); err != nil {
		t.Fatal(err)
	}
	if ops["snapshot"] != 50 || ops["insert"] != 30 || ops["update"] != updated || ops["delete"] != deleted {
		t.Fatalf("f's changelog holds %v, want 50 rows of the snapshot, 30 inserts, %d updates and %d deletes", ops, updated, deleted)
	}
	if q := h.queuedChanges(); len(q) != 0 {
		t.Fatalf("the queue still holds changes after every table applied them: %v", q)
	}
}
