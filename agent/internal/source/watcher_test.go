package source

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/lakeside/lakeside/store"
)

// TestRewriteAfterAnAskedCopyIsAskedFor records reasons to copy a table's
// rows one after another, as a re-created table's copy is asked for and a
// rewrite (a column added with a volatile default) follows it: each reason
// is asked for once, whether the state file records the earlier request as
// asked before the next reason or after it.
func TestRewriteAfterAnAskedCopyIsAskedFor(t *testing.T) {
	h := newWriterHarness(t, false, nil)
	const table, oid = "public.t", 11
	if err := h.db.Update(func(w *store.Writer) error {
		return w.PutTableIdentity(&store.TableIdentity{Table: table, Generations: []store.TableGeneration{{OID: 10, Generation: 1}}})
	}); err != nil {
		t.Fatal(err)
	}
	var asked []string
	s := &Source{log: slog.New(h.log), writer: h.w, cfg: Config{Backfill: func(_ context.Context, tbl string, o uint32, reason string) error {
		if tbl != table || o != oid {
			t.Errorf("asked for the copy of %s (OID %d)", tbl, o)
		}
		asked = append(asked, reason)
		return nil
	}}}
	w := &watcher{s: s, asked: map[string]uint64{}}
	send := func(op writeOp) {
		t.Helper()
		if err := h.w.send(op); err != nil {
			t.Fatal(err)
		}
		if err := h.w.sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	current := func() store.TableGeneration {
		t.Helper()
		var id *store.TableIdentity
		if err := h.db.View(func(r *store.Reader) (err error) { id, err = r.TableIdentity(table); return err }); err != nil {
			t.Fatal(err)
		}
		return id.Current()
	}
	watch := func(want ...string) {
		t.Helper()
		var ids []*store.TableIdentity
		if err := h.db.View(func(r *store.Reader) (err error) { ids, err = r.TableIdentities(); return err }); err != nil {
			t.Fatal(err)
		}
		asked = nil
		if err := w.backfills(context.Background(), ids); err != nil {
			t.Fatal(err)
		}
		if err := h.w.sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(asked, want) {
			t.Fatalf("asked for copies %q, want %q", asked, want)
		}
	}

	send(writeOp{kind: opNewGeneration, gen: &newGeneration{table: table, oid: oid, since: 100, backfill: ReasonRecreated}})
	watch(ReasonRecreated)
	// The state file records the copy as asked for; then, before the
	// watcher looks again, the rewrite.
	send(writeOp{kind: opNewGeneration, gen: &newGeneration{table: table, oid: oid, backfill: ReasonRewritten}})
	watch(ReasonRewritten)
	if g := current(); g.Backfill != "" || g.BackfillRequest != 2 {
		t.Fatalf("after the rewrite's copy was asked for, the generation is %+v", g)
	}
	// Another rewrite comes before the state file records the copy of
	// the last one as asked: it stays due.
	send(writeOp{kind: opNewGeneration, gen: &newGeneration{table: table, oid: oid, backfill: ReasonRewritten}})
	send(writeOp{kind: opBackfillAsked, gen: &newGeneration{table: table, oid: oid, request: 2}})
	if g := current(); g.Backfill != ReasonRewritten || g.BackfillRequest != 3 {
		t.Fatalf("a request recorded after the one asked for was cleared: %+v", g)
	}
	watch(ReasonRewritten)
	watch()
}
