package source

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/store"
)

// TestTrackerJudgesAChunk feeds a tracker the changes of committed,
// running and aborted (sub)transactions and checks which copied rows each
// rule leaves to the stream's changes.
func TestTrackerJudgesAChunk(t *testing.T) {
	rel := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 1}, Columns: []store.Column{
		{Name: "id", TypeOID: pgtype.Int8OID, Key: true}, {Name: "v", TypeOID: pgtype.TextOID}}}
	rels := map[uint32]*relationDecoder{7: {rel: rel}}
	row := func(id int64, unchanged bool) []store.Value {
		v := store.Value{Kind: store.KindString, Bytes: []byte("x")}
		if unchanged {
			v = store.Value{Kind: store.KindUnchanged}
		}
		return []store.Value{{Kind: store.KindInt64, Int: id}, v}
	}
	key := func(id int64) string {
		tr := newTracker(7, []string{"id"})
		k, _ := tr.key(row(id, false), []int{0})
		return k
	}
	upd := func(id int64) *store.Change {
		return &store.Change{Op: store.OpUpdate, Relation: rel.Key, New: row(id, false)}
	}
	snap, _ := backfill.ParseSnapshot("100:110:105")
	const low, high = 1000, 2000

	tr := newTracker(7, []string{"id"})
	tr.note(rels, 101, 101, upd(1)) // visible, committed before low: in the copy
	tr.commit(101, 500)
	tr.note(rels, 105, 105, upd(2)) // committed before low, not seen by the copy
	tr.commit(105, 600)
	tr.note(rels, 103, 103, upd(3)) // seen by the copy, committed after low
	tr.commit(103, 1500)
	tr.note(rels, 120, 120, upd(4)) // after the copy's snapshot
	tr.note(rels, 120, 121, upd(5)) // in a subtransaction that aborts
	tr.abort(120, 121)
	tr.commit(120, 1600)
	tr.note(rels, 130, 130, upd(6)) // still running at the high watermark
	v := tr.judge(snap, low, 0, 0)
	if v.redo != "" || v.restart != "" {
		t.Fatalf("verdict %+v", v)
	}
	for id, want := range map[int64]bool{1: false, 2: true, 3: true, 4: true, 5: false, 6: false} {
		if v.replaced[key(id)] != want {
			t.Errorf("row %d replaced %v, want %v", id, v.replaced[key(id)], want)
		}
	}
	// The transactions every later copy sees are forgotten; the one the
	// copy did not see stays for the next chunk.
	if len(tr.committed) != 2 || tr.committed[0].xid != 105 || tr.committed[1].xid != 120 {
		t.Errorf("kept %d committed transactions", len(tr.committed))
	}

	// Rows whose keys are not known, or left out TOAST values, are copied again.
	for name, prepare := range map[string]func(tr *tracker){
		"truncate": func(tr *tracker) { tr.note(rels, 120, 120, &store.Change{Op: store.OpTruncate, Relation: rel.Key}) },
		"toast": func(tr *tracker) {
			tr.note(rels, 120, 120, &store.Change{Op: store.OpUpdate, Relation: rel.Key, New: row(1, true)})
		},
		"too many keys": func(tr *tracker) {
			for id := range int64(maxTrackedKeys + 1) {
				tr.note(rels, 120, 120, upd(id))
			}
		},
	} {
		tr := newTracker(7, []string{"id"})
		prepare(tr)
		tr.commit(120, 1500)
		if v := tr.judge(snap, low, 0, 0); v.redo == "" {
			t.Errorf("%s: the chunk is not copied again", name)
		}
		if n := tr.committed[0].n; tr.keys != n {
			t.Errorf("%s: %d keys counted, the transaction kept holds %d", name, tr.keys, n)
		}
	}
	// A truncating chunk cannot leave to the stream a change the
	// truncate removed.
	tr = newTracker(7, []string{"id"})
	tr.note(rels, 105, 105, upd(2))
	tr.commit(105, 600)
	if v := tr.judge(snap, low, low, low); v.redo == "" {
		t.Error("a change before the truncate, not seen by the copy, does not make it copy again")
	}
	// Without a key, any change after the copy began starts it over.
	tr = newTracker(7, nil)
	tr.note(rels, 101, 101, upd(1))
	tr.commit(101, 500)
	if v := tr.judge(snap, low, low, low); v.restart != "" {
		t.Errorf("a change the copy sees, before it began: %+v", v)
	}
	tr.note(rels, 102, 102, upd(1))
	tr.commit(102, 1500)
	if v := tr.judge(snap, low, low, low); v.restart == "" {
		t.Error("a change after the copy began does not start it over")
	}
	// Past maxTrackedKeys transactions, the rest are one of unknown keys.
	tr = newTracker(7, []string{"id"})
	for i := range uint32(maxTrackedKeys + 10) {
		tr.note(rels, 50+i, 50+i, upd(1))
		tr.commit(50+i, 500)
	}
	if len(tr.committed) != maxTrackedKeys || !tr.over {
		t.Fatalf("%d transactions kept, folded %v", len(tr.committed), tr.over)
	}
	late, _ := backfill.ParseSnapshot("100000:100001:")
	if v := tr.judge(late, low, 0, 0); v.redo != "" || tr.over || len(tr.committed) != 0 || tr.keys != 0 {
		t.Errorf("a snapshot that sees every one of them: verdict %+v, folded %v, %d kept, %d keys", v, tr.over, len(tr.committed), tr.keys)
	}
}
