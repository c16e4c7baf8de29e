package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/store"
)

// lockedBuffer is a log sink safe for the applier's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// optimizeVersions returns the versions of the table at path whose
// commitInfo says OPTIMIZE, checked as deltatest.OptimizeVersions does.
func optimizeVersions(t *testing.T, path string) []int64 {
	t.Helper()
	tbl, err := delta.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return deltatest.OptimizeVersions(t, tbl, nil)
}

// checkSameRowsAround checks that each version of vs reads the same rows
// as the version before it, and returns how many it compared.
func checkSameRowsAround(t *testing.T, path string, vs []int64) {
	t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	read := func(v int64) []string {
		s, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := s.ReadRows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = fmt.Sprint(r)
		}
		return sortedStrings(out)
	}
	for _, v := range vs {
		before, after := read(v-1), read(v)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("%s: version %d (OPTIMIZE) reads %d rows, version %d %d, or other rows", path, v, len(after), v-1, len(before))
		}
	}
}

// sortedStrings sorts s in place and returns it.
func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// checkKeyRanges checks that the mirror's files cover disjoint key
// ranges, each file's within its tags, as the applier's index needs.
func checkKeyRanges(t *testing.T, path string) {
	t.Helper()
	s := latestSnapshot(t, path)
	type rng struct{ min, max []byte }
	var rs []rng
	for _, f := range s.Files() {
		minKey, err1 := hex.DecodeString(f.Tags[tagMinKey])
		maxKey, err2 := hex.DecodeString(f.Tags[tagMaxKey])
		if err1 != nil || err2 != nil || len(minKey) == 0 || bytes.Compare(minKey, maxKey) > 0 {
			t.Errorf("%s: file %s has key range tags %v", path, f.Path, f.Tags)
		}
		rs = append(rs, rng{minKey, maxKey})
	}
	for i := range rs {
		for j := range rs {
			if i != j && bytes.Compare(rs[i].min, rs[j].max) <= 0 && bytes.Compare(rs[j].min, rs[i].max) <= 0 {
				t.Errorf("%s: key ranges of two files overlap", path)
				return
			}
		}
	}
}

// TestCompactionRacesTheApplier runs the applier on a short flush
// interval while transactions of inserts, updates and deletes keep
// arriving and compactions of both tables run back to back on their own
// goroutine, for many rounds: the applier never fails a commit (the
// compactions' commits are made between its flushes and its view of the
// tables follows them), every OPTIMIZE version reads the rows of the
// version before it, the mirrors' files keep disjoint key ranges, and the
// tables end with exactly the live rows and every change once.
func TestCompactionRacesTheApplier(t *testing.T) {
	rels, q, tablesDir := newStress(t, 40)
	rng := q.rng
	models := [2]*stressModel{newStressModel(rels[0], rng, 1), newStressModel(rels[1], rng, 1)}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := New(Config{TablesDir: tablesDir, FlushInterval: 10 * time.Millisecond, PollInterval: 2 * time.Millisecond,
		TargetFileRows: 400, CheckpointInterval: 7, FixedCheckpoints: true, Logger: log}, q.db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan error, 1)
	go func() { applied <- a.Run(ctx) }()

	stop := make(chan struct{})
	var committed, dropped int
	compacted := make(chan error, 1)
	go func() {
		opts := CompactOptions{TablesDir: tablesDir, TargetFileSize: 4 << 20, TargetFileRows: 400, MinFiles: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for {
			select {
			case <-stop:
				compacted <- nil
				return
			default:
			}
			rep, err := Compact(ctx, opts, a)
			if err != nil {
				compacted <- err
				return
			}
			for _, tc := range rep.Tables {
				committed += len(tc.Versions)
				dropped += tc.Dropped
			}
		}
	}()
	rounds := 150
	if testing.Short() {
		rounds = 40
	}
	for range rounds {
		q.append(1+rng.IntN(4), func() store.Change {
			m := models[rng.IntN(2)]
			if p := rng.IntN(10); p < 3 {
				return m.changeOld(p < 2)
			}
			return m.insert()
		})
		a.Notify()
		time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
	}
	for deadline := time.Now().Add(time.Minute); a.Applied() <= q.lsn; {
		if time.Now().After(deadline) {
			t.Fatalf("applied %s, queued up to %s", a.Applied(), q.lsn+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("the applier warned or failed while compactions ran:\n%s", s)
	}
	t.Logf("%d compaction commits, %d bins dropped for a concurrent flush", committed, dropped)
	if committed == 0 {
		t.Fatal("no compaction committed")
	}
	for i, name := range []string{"public.orders", "public.returns"} {
		models[i].check(t, tablesDir, name)
		checkKeyRanges(t, filepath.Join(tablesDir, name))
		for _, table := range []string{name, name + store.ChangelogSuffix} {
			path := filepath.Join(tablesDir, table)
			checkSameRowsAround(t, path, optimizeVersions(t, path))
		}
	}
}

// TestQuietInsertsWriteNewFilesThatCompactionMerges applies one insert
// above every key per flush, as a quiet insert-only table does: with
// Config.Compaction no flush removes (rewrites) a mirror file, the small
// files are then merged into one by a compaction, and the rows stay.
func TestQuietInsertsWriteNewFilesThatCompactionMerges(t *testing.T) {
	rels := []*store.Relation{ordersRelation()}
	db, dir := openRelations(t, rels...)
	tablesDir := filepath.Join(dir, "tables")
	q := &randomQueue{t: t, db: db}
	ctx := context.Background()
	a := New(Config{TablesDir: tablesDir, Compaction: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	const flushes = 12
	for i := range int64(flushes) {
		at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		err := db.Update(func(w *store.Writer) error {
			q.lsn = max(q.lsn, 0x1000) + 0x100
			return w.AppendTxn(&store.Txn{TxnHeader: store.TxnHeader{Xid: uint32(q.lsn), CommitLSN: q.lsn, EndLSN: q.lsn + 1, CommitTime: at},
				Changes: []store.Change{{Op: store.OpInsert, Relation: rels[0].Key, New: ordersValues(i + 1)}}}, 0)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.applyAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(tablesDir, "public.orders")
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, act := range acts {
			if r, ok := act.(*delta.Remove); ok {
				t.Errorf("version %d rewrites %s for an insert above every key", v, r.Path)
			}
		}
	}
	if n := latestSnapshot(t, path).NumFiles(); n != flushes {
		t.Fatalf("%d mirror files after %d flushes, want one each", n, flushes)
	}
	rep, err := Compact(ctx, CompactOptions{TablesDir: tablesDir, TargetFileSize: 1 << 20, TargetFileRows: a.cfg.TargetFileRows}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range rep.Tables {
		if tc.FilesAfter != 1 || tc.FilesBefore != flushes {
			t.Errorf("%s: %d files before, %d after; want %d and 1", tc.Name, tc.FilesBefore, tc.FilesAfter, flushes)
		}
	}
	checkKeyRanges(t, path)
	rows := readTable(t, path, "id")
	if len(rows) != flushes {
		t.Fatalf("%d rows after compaction, want %d", len(rows), flushes)
	}
	for i, r := range rows {
		if r.get("id") != int64(i+1) {
			t.Fatalf("row %d has id %v", i, r.get("id"))
		}
	}
	checkSameRowsAround(t, path, optimizeVersions(t, path))
}

// TestCompactorHoldsATableBeingCopied runs background compaction while
// one source table is held (Hold, as while it is copied): the other's
// small files are merged, the held table's are not until it is let go.
func TestCompactorHoldsATableBeingCopied(t *testing.T) {
	rels, q, tablesDir := newStress(t, 40)
	models := [2]*stressModel{newStressModel(rels[0], q.rng, 1), newStressModel(rels[1], q.rng, 1)}
	var c *Compactor
	var held, all atomic.Bool
	held.Store(true)
	a := New(Config{TablesDir: tablesDir, FlushInterval: 10 * time.Millisecond, PollInterval: 2 * time.Millisecond,
		TargetFileRows: 400, Compaction: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Committed: notifyFunc(func() { c.Notify() })}, q.db)
	c = NewCompactor(CompactorConfig{
		Options: CompactOptions{TargetFileSize: 4 << 20, MinFiles: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		// Passes come from the applier's commits only.
		Interval: time.Hour,
		Hold: func(table string) bool {
			return all.Load() || held.Load() && (table == "public.orders" || table == "public.orders"+store.ChangelogSuffix)
		},
	}, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied, compacted := make(chan error, 1), make(chan error, 1)
	go func() { applied <- a.Run(ctx) }()
	go func() { compacted <- c.Run(ctx) }()
	flushes := func(n int) {
		for range n {
			for _, m := range models {
				q.append(1, m.insert)
			}
			a.Notify()
			for deadline := time.Now().Add(time.Minute); a.Applied() <= q.lsn; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("applied %s, queued up to %s", a.Applied(), q.lsn+1)
				}
			}
		}
	}
	optimized := func(table string) int { return len(optimizeVersions(t, filepath.Join(tablesDir, table))) }
	waitOptimized := func(table string) {
		for deadline := time.Now().Add(time.Minute); optimized(table) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not compacted", table)
			}
		}
	}
	flushes(12)
	waitOptimized("public.returns")
	waitOptimized("public.returns" + store.ChangelogSuffix)
	for _, table := range []string{"public.orders", "public.orders" + store.ChangelogSuffix} {
		if n := optimized(table); n != 0 {
			t.Fatalf("%s, held, was compacted (%d OPTIMIZE versions)", table, n)
		}
	}
	held.Store(false)
	flushes(1)
	waitOptimized("public.orders")
	waitOptimized("public.orders" + store.ChangelogSuffix)

	// A table held while a pass compacts it: the bins written are
	// committed, the others left.
	all.Store(true)
	flushes(16)
	table := "public.returns" + store.ChangelogSuffix
	opts := CompactOptions{TablesDir: tablesDir, Tables: []string{table}, TargetFileSize: 16 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dry := opts
	dry.DryRun = true
	plan, err := Compact(ctx, dry, a)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Tables[0].Bins < 2 {
		t.Fatalf("%d bins planned, want 2 or more", plan.Tables[0].Bins)
	}
	tbl, err := delta.Open(ctx, filepath.Join(tablesDir, table))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := snap.PlanOptimize(optimizeOptions(opts, tbl, KindChangelog))
	if err != nil {
		t.Fatal(err)
	}
	// Asked at the listing, before each file read, after each bin
	// written: held from the first file of the second bin.
	calls, free := 0, 1+len(first.Bins[0].Files)+1
	opts.Skip = func(string) bool {
		calls++
		return calls > free
	}
	rep, err := Compact(ctx, opts, a)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Tables[0].Bins; got != 1 {
		t.Fatalf("%d bins compacted of %d, want the one written before the table was held", got, plan.Tables[0].Bins)
	}
	cancel()
	for _, ch := range []chan error{applied, compacted} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	models[0].check(t, tablesDir, "public.orders")
	models[1].check(t, tablesDir, "public.returns")
}
