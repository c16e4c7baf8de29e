package applier

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestStressCrashesWhileAppending appends transactions of mixed sizes to
// two tables while appliers crash at random points, read ahead and flush
// in small full batches, and checks that the mirrors end with every row
// and the changelogs with every change once.
func TestStressCrashesWhileAppending(t *testing.T) {
	requireFailpoints(t)
	rels, q, tablesDir := newStress(t, 3000)
	rng := q.rng
	want := [2]int64{}
	insert := func() store.Change {
		ti := rng.IntN(2)
		want[ti]++
		return store.Change{Op: store.OpInsert, Relation: rels[ti].Key, New: ordersValues(want[ti])}
	}
	appendTxns := func(n int) { q.append(n, insert) }
	crashRounds(t, q.db, tablesDir, rng, 25, func() { appendTxns(20 + rng.IntN(200)) }, func() { appendTxns(rng.IntN(20)) })
	for i, name := range []string{"public.orders", "public.returns"} {
		rows := readTable(t, filepath.Join(tablesDir, name), "id")
		if int64(len(rows)) != want[i] {
			t.Errorf("mirror %s holds %d rows, want %d", name, len(rows), want[i])
		}
		for j, r := range rows {
			if r.get("id") != int64(j+1) {
				t.Errorf("mirror %s row %d has id %v", name, j, r.get("id"))
				break
			}
		}
		if n := len(readTable(t, filepath.Join(tablesDir, name+"_changes"), "_lsn", "_seq")); int64(n) != want[i] {
			t.Errorf("changelog %s holds %d changes, want %d", name, n, want[i])
		}
	}
}

// TestStressCrashesWhileChanging is TestStressCrashesWhileAppending with
// updates and deletes of earlier rows too, so that flushes rewrite
// existing mirror files: the mirrors must end holding exactly the live
// rows, each with its last quantity, and the changelogs every change once.
func TestStressCrashesWhileChanging(t *testing.T) {
	requireFailpoints(t)
	rels, q, tablesDir := newStress(t, 2000)
	rng := q.rng
	models := [2]*stressModel{newStressModel(rels[0], rng, 1), newStressModel(rels[1], rng, 1)}
	appendTxns := func(n int) {
		q.append(n, func() store.Change {
			m := models[rng.IntN(2)]
			if p := rng.IntN(10); p < 3 {
				return m.changeOld(p < 2)
			}
			return m.insert()
		})
	}
	crashRounds(t, q.db, tablesDir, rng, 15, func() { appendTxns(20 + rng.IntN(150)) }, func() { appendTxns(rng.IntN(20)) })
	for i, name := range []string{"public.orders", "public.returns"} {
		models[i].check(t, tablesDir, name)
	}
}

// TestStressCrashesWhileLoadingRanges is TestStressCrashesWhileChanging
// with the inserts of each table interleaving sequences of keys in ranges
// of their own, new ones above every key each round, as writers that each
// load a range: 3 ranges for orders, which the mirror's appender writes as
// runs, 6 for returns, more than it takes; one round in three updates and
// deletes earlier rows too.
func TestStressCrashesWhileLoadingRanges(t *testing.T) {
	requireFailpoints(t)
	rels, q, tablesDir := newStress(t, 2000)
	rng := q.rng
	models := [2]*stressModel{newStressModel(rels[0], rng, 3), newStressModel(rels[1], rng, 6)}
	// One round in three changes earlier rows too; the others only load.
	appendTxns := func(n int, changing bool) {
		q.append(n, func() store.Change {
			m := models[rng.IntN(2)]
			if p := rng.IntN(10); changing && p < 2 {
				return m.changeOld(p < 1)
			}
			return m.insert()
		})
	}
	queue := func() {
		for _, m := range models {
			m.newRanges()
		}
		appendTxns(60+rng.IntN(60), rng.IntN(3) == 0)
	}
	crashRounds(t, q.db, tablesDir, rng, 10, queue, func() { appendTxns(rng.IntN(20), false) })
	for i, name := range []string{"public.orders", "public.returns"} {
		models[i].check(t, tablesDir, name)
	}
}

// stressModel is what a source table of a stress test holds: its live rows
// (id → qty), their ids in a slice to pick from, the next id of each of
// its key ranges, and the count of changes.
type stressModel struct {
	rel     *store.Relation
	rng     *rand.Rand
	qty     map[int64]int64
	ids     []int64
	next    []int64
	changes int64
}

// newStressModel returns the model of an empty table whose inserts take
// their keys from ranges ranges of a million keys each (see newRanges).
func newStressModel(rel *store.Relation, rng *rand.Rand, ranges int) *stressModel {
	m := &stressModel{rel: rel, rng: rng, qty: map[int64]int64{}, next: make([]int64, ranges)}
	m.newRanges()
	return m
}

// newRanges starts the key ranges of the next inserts above every key so
// far.
func (m *stressModel) newRanges() {
	base := (slices.Max(m.next)/1_000_000_000 + 1) * 1_000_000_000
	for r := range m.next {
		m.next[r] = base + int64(r)*1_000_000
	}
}

func (m *stressModel) row(id, qty int64) []store.Value {
	vals := ordersValues(id)
	vals[5] = store.Value{Kind: store.KindInt32, Int: qty}
	return vals
}

// insert inserts the next key of a random range.
func (m *stressModel) insert() store.Change {
	m.changes++
	r := m.rng.IntN(len(m.next))
	m.next[r]++
	id := m.next[r]
	m.ids = append(m.ids, id)
	m.qty[id] = id % 1000
	return store.Change{Op: store.OpInsert, Relation: m.rel.Key, New: m.row(id, id%1000)}
}

// changeOld updates (or, unless update, deletes) a random live row; with
// none, it inserts.
func (m *stressModel) changeOld(update bool) store.Change {
	if len(m.ids) == 0 {
		return m.insert()
	}
	m.changes++
	i := m.rng.IntN(len(m.ids))
	id := m.ids[i]
	if update {
		m.qty[id] = m.rng.Int64N(1000)
		return store.Change{Op: store.OpUpdate, Relation: m.rel.Key, New: m.row(id, m.qty[id])}
	}
	m.ids[i] = m.ids[len(m.ids)-1]
	m.ids = m.ids[:len(m.ids)-1]
	delete(m.qty, id)
	old := make([]store.Value, len(m.rel.Columns))
	old[0] = store.Value{Kind: store.KindInt64, Int: id}
	return store.Change{Op: store.OpDelete, Relation: m.rel.Key, Old: old, OldIsKey: true}
}

// check checks that the mirror holds exactly the live rows, each with its
// last quantity, and the changelog every change once.
func (m *stressModel) check(t *testing.T, tablesDir, name string) {
	t.Helper()
	rows := readTable(t, filepath.Join(tablesDir, name), "id")
	if len(rows) != len(m.qty) {
		t.Errorf("mirror %s holds %d rows, want %d", name, len(rows), len(m.qty))
	}
	seen := map[int64]bool{}
	for _, r := range rows {
		id := r.get("id").(int64)
		want, live := m.qty[id]
		switch {
		case !live:
			t.Errorf("mirror %s holds row %d, which was deleted or never inserted", name, id)
		case seen[id]:
			t.Errorf("mirror %s holds row %d twice", name, id)
		case int64(r.get("qty").(int32)) != want:
			t.Errorf("mirror %s row %d has qty %v, want %d", name, id, r.get("qty"), want)
		}
		seen[id] = true
	}
	if n := len(readTable(t, filepath.Join(tablesDir, name+"_changes"), "_lsn", "_seq")); int64(n) != m.changes {
		t.Errorf("changelog %s holds %d changes, want %d", name, n, m.changes)
	}
}

// crashRounds runs rounds of appliers that crash at random points, each
// after queue adds transactions, reading ahead half the time (and then
// queueing more with meanwhile), and flushing in small full batches into
// small files; then it lets a last applier apply everything. The short
// tests (go test -short) run a fifth of the rounds.
func crashRounds(t *testing.T, db *store.DB, tablesDir string, rng *rand.Rand, rounds int, queue, meanwhile func()) {
	t.Helper()
	if testing.Short() {
		rounds = max(1, rounds/5)
	}
	ctx := context.Background()
	points := []string{"data-written", "before-commit", "after-commit", "before-checkpoint", "before-applied"}
	for range rounds {
		queue()
		a := New(Config{TablesDir: tablesDir, FlushChanges: 500 + rng.IntN(3000), TargetFileRows: 700, MergeMemoryKeys: 300,
			CheckpointInterval: 3, FixedCheckpoints: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
		if err := a.start(ctx); err != nil {
			t.Fatal(err)
		}
		crashAt := rng.IntN(12)
		calls := 0
		a.failpoint.set(func(point, table string) error {
			if slices.Contains(points, point) {
				calls++
				if calls == crashAt {
					return errCrash
				}
			}
			return nil
		})
		// Read ahead what is queued, then apply all of it.
		if upTo, _, _, err := a.nextBatch(); err == nil && upTo != 0 && rng.IntN(2) == 0 {
			a.readAhead(ctx, upTo)
			meanwhile()
		}
		if err := a.applyAll(ctx); err != nil && !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
	}
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
}

// newStress sets up a stress test on two scheduler threads: the orders and
// returns tables' schema versions, a state file with them, a queue of
// random transactions (big ones of big changes) with a logged seed, and
// the tables directory.
func newStress(t *testing.T, big int) ([]*store.Relation, *randomQueue, string) {
	prev := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	rels := []*store.Relation{ordersRelation(), returnsRelation()}
	db, dir := openRelations(t, rels...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	q := &randomQueue{t: t, db: db, rng: rand.New(rand.NewPCG(seed, 2)), big: big}
	return rels, q, filepath.Join(dir, "tables")
}

// randomQueue appends transactions of random sizes to a queue: mostly 1 to
// 10 changes, one in twenty big.
type randomQueue struct {
	t   *testing.T
	db  *store.DB
	rng *rand.Rand
	big int
	lsn store.LSN
}

// append queues n transactions whose changes change makes.
func (q *randomQueue) append(n int, change func() store.Change) {
	q.t.Helper()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	err := q.db.Update(func(w *store.Writer) error {
		for range n {
			q.lsn = max(q.lsn, 0x1000) + 0x100
			l := q.lsn
			txn := &store.Txn{TxnHeader: store.TxnHeader{Xid: uint32(l), CommitLSN: l, EndLSN: l + 1, CommitTime: at.Add(time.Duration(l))}}
			size := 1 + q.rng.IntN(10)
			if q.rng.IntN(20) == 0 {
				size = q.big
			}
			for range size {
				txn.Changes = append(txn.Changes, change())
			}
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		q.t.Fatal(err)
	}
}
