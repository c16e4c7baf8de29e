package applier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

var errCrash = errors.New("simulated crash")

// queuedChanges returns the (end LSN, seq) of every change still queued
// after the applied position, per table name.
func (h *harness) queuedChanges() map[string]map[string]string {
	h.t.Helper()
	out := map[string]map[string]string{}
	err := h.db.View(func(r *store.Reader) error {
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		applied, err := r.Applied()
		if err != nil {
			return err
		}
		txns, err := r.ReadTxns(applied, 0)
		if err != nil {
			return err
		}
		for _, t := range txns {
			for i, c := range t.Changes {
				name := rels[c.Relation].Name
				if out[name] == nil {
					out[name] = map[string]string{}
				}
				out[name][fmt.Sprint(int64(t.EndLSN), "/", i+1)] = c.Op.String()
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// changelogKeys returns the (lsn, seq) -> op of a changelog, failing on
// duplicates.
func (h *harness) changelogKeys(table string) map[string]string {
	h.t.Helper()
	rows := h.checkChangelog(table, nil)
	st := h.snapshot("public." + table + "_changes").Schema()
	_, lsn := st.Field(colLSN)
	_, seq := st.Field(colSeq)
	_, op := st.Field(colOp)
	out := map[string]string{}
	for _, r := range rows {
		out[fmt.Sprint(r[lsn], "/", r[seq])] = r[op].(string)
	}
	return out
}

func TestExactlyOnceAcrossCrashes(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t, `
		CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text);
		CREATE TABLE other (id int4 PRIMARY KEY, s text);
		INSERT INTO items SELECT g, g, 'snap' FROM generate_series(1, 500) g;`, "items", "other")
	want := map[string]map[string]string{}
	record := func() {
		h.caughtUp()
		for tb, m := range h.queuedChanges() {
			if want[tb] == nil {
				want[tb] = map[string]string{}
			}
			for k, v := range m {
				want[tb][k] = v
			}
		}
	}
	points := []struct {
		point, table string
	}{
		{"data-written", "public.items_changes"},
		{"data-written", "public.items"},
		{"after-commit", "public.items_changes"}, // between the two tables of one source table
		{"after-commit", "public.items"},         // between two source tables
		{"before-commit", "public.other_changes"},
		{"before-checkpoint", "public.items"},
		{"before-applied", ""},
	}
	next := int64(10000)
	for i, p := range points {
		// Some work in several transactions, for both tables.
		h.exec(
			fmt.Sprintf(`INSERT INTO items SELECT g, g, 'round %d' FROM generate_series(%d, %d) g`, i, next, next+199),
			fmt.Sprintf(`UPDATE items SET v = v + 1, note = 'u%d' WHERE id %% 5 = %d`, i, i%5),
			fmt.Sprintf(`DELETE FROM items WHERE id %% 13 = %d`, i),
			fmt.Sprintf(`INSERT INTO other VALUES (%d, 'x') ON CONFLICT (id) DO UPDATE SET s = other.s || 'y'`, i%3),
		)
		next += 1000
		record()
		a := h.applier(func(c *Config) { c.CheckpointInterval, c.FixedCheckpoints = 2, true; c.TargetFileRows = 300 })
		a.failpoint.set(func(point, table string) error {
			if point == p.point && (p.table == "" || table == p.table) {
				panic(errCrash)
			}
			return nil
		})
		crashed := func() (crashed bool) {
			defer func() {
				if r := recover(); r != nil {
					if r != errCrash {
						panic(r)
					}
					crashed = true
				}
			}()
			if err := a.applyAll(context.Background()); err != nil {
				t.Fatalf("%s: %v", p.point, err)
			}
			return false
		}()
		if !crashed {
			t.Fatalf("failpoint %s/%s was not reached", p.point, p.table)
		}
		if p.point == "before-checkpoint" {
			// A torn checkpoint temp file, as a crash mid-checkpoint leaves.
			os.WriteFile(filepath.Join(h.tablesDir, "public.items", "_delta_log", ".00000000000000000002.checkpoint.parquet.x.tmp"), []byte("PAR1"), 0o644)
		}
		// A fresh applier on the same state resumes.
		h.apply(h.applier(func(c *Config) { c.CheckpointInterval, c.FixedCheckpoints = 2, true; c.TargetFileRows = 300 }))
		h.checkMirror("items")
		h.checkMirror("other")
		for tb, w := range want {
			got := h.changelogKeys(tb)
			if len(got) != len(w) {
				t.Errorf("after crash at %s/%s: changelog of %s holds %d changes, want %d", p.point, p.table, tb, len(got), len(w))
			}
			for k, op := range w {
				if got[k] != op {
					t.Errorf("after crash at %s/%s: changelog of %s: %s is %q, want %q", p.point, p.table, tb, k, got[k], op)
					break
				}
			}
		}
	}
	// Checkpoints were written and the tables read through them.
	if _, err := os.Stat(filepath.Join(h.tablesDir, "public.items", "_delta_log", delta.LastCheckpointName)); err != nil {
		t.Errorf("no checkpoint: %v", err)
	}
}

func TestRetriesAfterAnErrorAndRunsUntilCancelled(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t, `CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`, "items")
	a := h.applier()
	a.cfg.FlushInterval = 10 * 1e6
	failures := 0
	a.failpoint.set(func(point, table string) error {
		if point == "after-commit" && table == "public.items_changes" && failures == 0 {
			failures++
			return errCrash
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	h.exec(`INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 100) g`, `UPDATE items SET v = 0 WHERE id < 50`)
	cp := h.caughtUp()
	a.Notify()
	deadline := 200
	for a.Applied() < cp && deadline > 0 {
		sleepMillis(50)
		deadline--
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if failures != 1 {
		t.Fatalf("failpoint hit %d times", failures)
	}
	if a.Applied() < cp {
		t.Fatalf("applied %s, want %s", a.Applied(), cp)
	}
	h.checkMirror("items")
	h.checkChangelog("items", nil)
	if n := len(h.changelogKeys("items")); n != 149 {
		t.Errorf("changelog holds %d changes, want 149", n)
	}
}
