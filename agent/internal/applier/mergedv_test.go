package applier

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// mergeModel is what the orders mirror should hold: for each id the
// generation of ordersValues its other columns have.
type mergeModel map[int64]int64

// changeTxn builds the transactions of a random workload on the orders
// table and keeps the model in step.
type changeTxn struct {
	rel   *store.Relation
	model mergeModel
	rng   *rand.Rand
	xid   uint32
	lsn   store.LSN
	gen   int64
	next  int64 // the next id inserted
}

func (c *changeTxn) values(id, gen int64) []store.Value {
	v := ordersValues(gen)
	v[0] = store.Value{Kind: store.KindInt64, Int: id}
	return v
}

// txn returns a transaction of n random changes: mostly updates of random
// ids, some deletes, inserts of new ids and key changes. It returns the
// number of rows the changes leave written (updated, inserted or moved).
func (c *changeTxn) txn(n int) (*store.Txn, int) {
	c.xid++
	c.lsn += 0x1000
	t := &store.Txn{TxnHeader: store.TxnHeader{Xid: c.xid, CommitLSN: c.lsn, EndLSN: c.lsn + 1,
		CommitTime: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(c.xid) * time.Second)}}
	written := map[int64]bool{}
	for range n {
		ids := make([]int64, 0, len(c.model))
		for id := range c.model {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id := ids[c.rng.IntN(len(ids))]
		c.gen++
		switch r := c.rng.IntN(10); {
		case r < 6:
			t.Changes = append(t.Changes, store.Change{Op: store.OpUpdate, Relation: c.rel.Key,
				Old: c.values(id, c.model[id]), New: c.values(id, c.gen)})
			c.model[id] = c.gen
			written[id] = true
		case r < 8:
			t.Changes = append(t.Changes, store.Change{Op: store.OpDelete, Relation: c.rel.Key, Old: c.values(id, c.model[id])})
			delete(c.model, id)
			delete(written, id)
		case r < 9:
			t.Changes = append(t.Changes, store.Change{Op: store.OpInsert, Relation: c.rel.Key, New: c.values(c.next, c.gen)})
			c.model[c.next] = c.gen
			written[c.next] = true
			c.next++
		default:
			// A key change: the row moves to a new id.
			t.Changes = append(t.Changes, store.Change{Op: store.OpUpdate, Relation: c.rel.Key,
				Old: c.values(id, c.model[id]), New: c.values(c.next, c.gen)})
			delete(c.model, id)
			delete(written, id)
			c.model[c.next] = c.gen
			written[c.next] = true
			c.next++
		}
	}
	return t, len(written)
}

// checkModel compares the mirror at path with the model, row by row.
func checkModel(t *testing.T, path string, model mergeModel) {
	t.Helper()
	rows := readTable(t, path, "id")
	var got, want []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%d:%v", r.get("id"), r.get("label")))
	}
	ids := make([]int64, 0, len(model))
	for id := range model {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		want = append(want, fmt.Sprintf("%d:%s", id, ordersValues(model[id])[1].Bytes))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("mirror holds %d rows, want %d; first difference: %s", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%s != %s", a[i], b[i])
		}
	}
	return "the end of the shorter"
}

// TestMergeWithDeletionVectors applies random changes to a mirror of
// several files with deletion vectors, a flush at a time, and checks after
// each that the mirror holds the model's rows, that no data file was
// rewritten (each removed file comes back with a wider deletion vector, or
// goes when no row of it is left) and that the new data files hold only
// the rows the flush wrote.
func TestMergeWithDeletionVectors(t *testing.T) {
	ctx := context.Background()
	rel := ordersRelation()
	c := &changeTxn{rel: rel, model: mergeModel{}, rng: rand.New(rand.NewPCG(1, 2)), lsn: 0x10000}
	first := &store.Txn{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}}
	for id := int64(1); id <= 2000; id++ {
		first.Changes = append(first.Changes, store.Change{Op: store.OpInsert, Relation: rel.Key, New: c.values(id, id)})
		c.model[id] = id
	}
	c.gen, c.next = 2000, 2001
	db, dir := openQueued(t, rel, first)
	tablesDir := filepath.Join(dir, "tables")
	path := filepath.Join(tablesDir, "public.orders")
	cfg := Config{TablesDir: tablesDir, DeletionVectors: true, TargetFileRows: 500, Compaction: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a := New(cfg, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	checkModel(t, path, c.model)
	if s := latestSnapshot(t, path); !delta.DeletionVectorsEnabled(s.Protocol(), s.Metadata()) || len(s.Files()) != 4 {
		t.Fatalf("mirror has %d files, deletion vectors %v", len(s.Files()), delta.DeletionVectorsEnabled(s.Protocol(), s.Metadata()))
	}
	withVectors := 0
	for round := range 30 {
		before := latestSnapshot(t, path)
		txn, written := c.txn(1 + round%25)
		if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txn, 0) }); err != nil {
			t.Fatal(err)
		}
		if err := a.applyAll(ctx); err != nil {
			t.Fatal(err)
		}
		checkModel(t, path, c.model)
		after := latestSnapshot(t, path)
		tbl, err := delta.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		acts, err := tbl.ReadCommit(ctx, after.Version())
		if err != nil {
			t.Fatal(err)
		}
		old := map[string]bool{}
		for _, f := range before.Files() {
			old[f.Path] = true
		}
		added := map[string]*delta.Add{}
		var newRows int64
		for _, act := range acts {
			if add, ok := act.(*delta.Add); ok {
				added[add.Path] = add
				if !old[add.Path] {
					st, err := delta.ParseStats(add.Stats)
					if err != nil {
						t.Fatal(err)
					}
					newRows += st.NumRecords
				}
			}
		}
		for _, act := range acts {
			rm, ok := act.(*delta.Remove)
			if !ok {
				continue
			}
			if add := added[rm.Path]; add != nil {
				withVectors++
				if add.DeletionVector == nil || rm.DeletionVector != nil && add.DeletionVector.Cardinality <= rm.DeletionVector.Cardinality {
					t.Fatalf("round %d: %s comes back with deletion vector %+v after %+v", round, rm.Path, add.DeletionVector, rm.DeletionVector)
				}
			}
		}
		if newRows != int64(written) {
			t.Fatalf("round %d: the flush wrote %d rows into new files; it changed %d", round, newRows, written)
		}
	}
	if withVectors == 0 {
		t.Fatal("no flush deleted rows with a deletion vector")
	}
}

// TestLayoutsReadTheSameRows applies the same random changes, a flush at a
// time, to a mirror merged with deletion vectors and to one merged
// copy-on-write, keyed, with soft delete and as a multiset (a table
// without a key), and checks that every version of the two reads the same
// rows.
func TestLayoutsReadTheSameRows(t *testing.T) {
	for _, variant := range []string{"keyed", "soft delete", "multiset"} {
		t.Run(variant, func(t *testing.T) {
			soft := variant == "soft delete"
			ctx := context.Background()
			rel := ordersRelation()
			if variant == "multiset" {
				rel.ReplicaIdentity = 'f'
				rel.Columns[0].Key = false
			}
			c := &changeTxn{rel: rel, model: mergeModel{}, rng: rand.New(rand.NewPCG(3, 4)), lsn: 0x10000}
			first := &store.Txn{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}}
			for id := int64(1); id <= 1000; id++ {
				first.Changes = append(first.Changes, store.Change{Op: store.OpInsert, Relation: rel.Key, New: c.values(id, id)})
				c.model[id] = id
			}
			c.gen, c.next = 1000, 1001
			type layout struct {
				db   *store.DB
				a    *Applier
				path string
			}
			var layouts []*layout
			for _, dv := range []bool{true, false} {
				db, dir := openQueued(t, rel, first)
				tablesDir := filepath.Join(dir, "tables")
				a := New(Config{TablesDir: tablesDir, DeletionVectors: dv, SoftDelete: soft, TargetFileRows: 300,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
				if err := a.start(ctx); err != nil {
					t.Fatal(err)
				}
				layouts = append(layouts, &layout{db: db, a: a, path: filepath.Join(tablesDir, "public.orders")})
			}
			for _, l := range layouts {
				if err := l.a.applyAll(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 20 {
				txn, _ := c.txn(1 + round%15)
				for _, l := range layouts {
					if err := l.db.Update(func(w *store.Writer) error { return w.AppendTxn(txn, 0) }); err != nil {
						t.Fatal(err)
					}
					if err := l.a.applyAll(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !soft {
				checkModel(t, layouts[0].path, c.model)
			}
			dvTbl, cowTbl := openTable(t, layouts[0].path), openTable(t, layouts[1].path)
			latest, err := cowTbl.LatestVersion(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v, err := dvTbl.LatestVersion(ctx); err != nil || v != latest {
				t.Fatalf("versions: %d with deletion vectors, %d copy-on-write (%v)", v, latest, err)
			}
			snap, err := dvTbl.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(snap.Files(), func(f *delta.Add) bool { return f.DeletionVector != nil }) {
				t.Fatal("no file of the mirror has a deletion vector")
			}
			for v := int64(0); v <= latest; v++ {
				got, want := versionRowsOf(t, dvTbl, v), versionRowsOf(t, cowTbl, v)
				if !slices.Equal(got, want) {
					t.Fatalf("version %d: %d rows with deletion vectors, %d copy-on-write; first difference: %s", v, len(got), len(want), firstDiff(got, want))
				}
			}
		})
	}
}

func openTable(t *testing.T, path string) *delta.Table {
	t.Helper()
	tbl, err := delta.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// versionRowsOf returns the rows of a version of tbl, each printed, sorted.
func versionRowsOf(t *testing.T, tbl *delta.Table, v int64) []string {
	t.Helper()
	snap, err := tbl.SnapshotAt(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r)
	}
	slices.Sort(out)
	return out
}
