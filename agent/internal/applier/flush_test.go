package applier

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestFlushWritesEveryTableBeforeCommitting checks that a flush writes the
// data files of all the Delta tables it touches before it commits the
// first of them (writeData), that the commits still come one table after
// the other in their fixed order, and that value problems found by two
// mirrors merging at the same time are each counted (run it with -race).
func TestFlushWritesEveryTableBeforeCommitting(t *testing.T) {
	requireFailpoints(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	orders, returns := ordersRelation(), returnsRelation()
	db, dir := openRelations(t, orders, returns)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	txn := &store.Txn{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: at}}
	for _, rel := range []*store.Relation{orders, returns} {
		for id := int64(1); id <= 20; id++ {
			txn.Changes = append(txn.Changes, store.Change{Op: store.OpInsert, Relation: rel.Key, New: ordersValues(id)})
		}
		// An update of a row neither the mirror nor the flush holds, its
		// label an unchanged TOAST value: written as null, with a warning.
		update := ordersValues(500)
		update[1] = store.Value{Kind: store.KindUnchanged}
		txn.Changes = append(txn.Changes, store.Change{Op: store.OpUpdate, Relation: rel.Key, New: update})
	}
	if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txn, 0) }); err != nil {
		t.Fatal(err)
	}

	var logged bytes.Buffer
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(&logged, nil))}, db)
	if err := a.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var commits []string
	var filesAtFirstCommit map[string]int
	a.failpoint.set(func(point, table string) error {
		if point != "before-commit" {
			return nil
		}
		if filesAtFirstCommit == nil {
			filesAtFirstCommit = dataFiles(t, tablesDir)
		}
		commits = append(commits, table)
		return nil
	})
	if err := a.applyAll(context.Background()); err != nil {
		t.Fatal(err)
	}

	tables := []string{"public.orders_changes", "public.orders", "public.returns_changes", "public.returns"}
	if strings.Join(commits, " ") != strings.Join(tables, " ") {
		t.Errorf("commits in the order %v, want %v", commits, tables)
	}
	for _, tb := range tables {
		if filesAtFirstCommit[tb] == 0 {
			t.Errorf("%s had no data file written when the first table committed", tb)
		}
	}
	for _, tb := range []string{"public.orders", "public.returns"} {
		want := `problem="` + tb + `: unchanged TOAST value without an existing row; written as null" count=1`
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %s; log:\n%s", want, logged.String())
		}
	}
}

// dataFiles counts the Parquet data files under each table of tablesDir.
func dataFiles(t *testing.T, tablesDir string) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := filepath.WalkDir(tablesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".parquet" || strings.Contains(path, "_delta_log") {
			return err
		}
		rel, err := filepath.Rel(tablesDir, path)
		if err != nil {
			return err
		}
		out[strings.Split(rel, string(filepath.Separator))[0]]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFullBatchLeavesTrimmingToTheNextFlush checks that a flush followed at
// once by another (its batch was full) leaves its own transactions in the
// queue for that flush to trim, and that the last flush trims everything
// applied.
func TestFullBatchLeavesTrimmingToTheNextFlush(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue() // 50 changes, then 2 and 2
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, FlushChanges: 50, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	var applied []store.LSN
	var queuedAfter []int64
	a.cfg.Committed = notifyFunc(func() {
		applied = append(applied, appliedPosition(t, db))
		queuedAfter = append(queuedAfter, queuedTxns(t, db))
	})
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	// The first batch is the first transaction, full; the second the rest.
	if want := []store.LSN{txns[0].EndLSN, txns[2].EndLSN}; !slices.Equal(applied, want) {
		t.Fatalf("flushes applied up to %v, want %v", applied, want)
	}
	if want := []int64{3, 0}; !slices.Equal(queuedAfter, want) {
		t.Errorf("after each flush the queue held %v transactions, want %v", queuedAfter, want)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestFlushLeavesTrimmingToTheNextWhenMoreArrived checks that a flush
// trims its own transactions when nothing follows them in the queue, and
// leaves them to the next flush when a transaction was queued while it
// wrote: that flush is due at once, and trimming would hold it up.
func TestFlushLeavesTrimmingToTheNextWhenMoreArrived(t *testing.T) {
	requireFailpoints(t)
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[0])
	a := New(Config{TablesDir: filepath.Join(dir, "tables"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.flush(ctx, txns[0].EndLSN); err != nil {
		t.Fatal(err)
	}
	if n := queuedTxns(t, db); n != 0 {
		t.Fatalf("after a flush with nothing queued after it, the queue held %d transactions, want 0", n)
	}
	// While the flush of the second transaction writes, the third is
	// queued (at the failpoint before the applied position is recorded).
	a.failpoint.set(func(point, _ string) error {
		if point == "before-applied" {
			a.failpoint.set(nil)
			return db.Update(func(w *store.Writer) error { return w.AppendTxn(txns[2], 0) })
		}
		return nil
	})
	if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txns[1], 0) }); err != nil {
		t.Fatal(err)
	}
	if err := a.flush(ctx, txns[1].EndLSN); err != nil {
		t.Fatal(err)
	}
	if n := queuedTxns(t, db); n != 2 {
		t.Fatalf("after a flush that found another transaction queued, the queue held %d transactions, want 2 (its own and the new one)", n)
	}
	if got := appliedPosition(t, db); got != txns[1].EndLSN {
		t.Fatalf("applied position %s, want %s", got, txns[1].EndLSN)
	}
	if err := a.flush(ctx, txns[2].EndLSN); err != nil {
		t.Fatal(err)
	}
	if n := queuedTxns(t, db); n != 0 {
		t.Fatalf("after the last flush the queue held %d transactions, want 0", n)
	}
	checkReadAheadTables(t, filepath.Join(dir, "tables"))
}

// queuedTxns returns how many transactions db's queue holds.
func queuedTxns(t *testing.T, db *store.DB) int64 {
	t.Helper()
	var st store.QueueStats
	if err := db.View(func(r *store.Reader) (err error) { st, err = r.QueueStats(); return err }); err != nil {
		t.Fatal(err)
	}
	return st.Transactions
}

// TestMergeRefusesAFileShorterThanItsStats checks that a merge that would
// rewrite a mirror file stops with an error, committing nothing, when the
// file holds fewer rows than its stats in the log say.
func TestMergeRefusesAFileShorterThanItsStats(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[0])
	tablesDir := filepath.Join(dir, "tables")
	cfg := Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a := New(cfg, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txns[1], 0) }); err != nil {
		t.Fatal(err)
	}

	a = New(cfg, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ingest(ctx, txns[1].EndLSN, 0); err != nil {
		t.Fatal(err)
	}
	m := a.tables["public.orders"].mirror
	if len(m.files) != 1 || m.files[0].rows != 50 {
		t.Fatalf("mirror files %+v, want one of 50 rows", m.files)
	}
	m.files[0].rows++ // as if the file had lost a row
	before := m.version
	if err := a.flush(ctx, txns[1].EndLSN); !errors.Is(err, errFileRows) {
		t.Fatalf("flush: %v, want errFileRows", err)
	}
	for _, st := range a.Tables() {
		if st.Name == "public.orders" && st.Kind == KindMirror && st.Version != before {
			t.Errorf("the mirror committed version %d after the refused merge", st.Version)
		}
	}
	if l := appliedPosition(t, db); l != txns[0].EndLSN {
		t.Errorf("applied position %s, want %s", l, txns[0].EndLSN)
	}
}

// TestColumnBuffersCarryOverFlushes checks that the Parquet column buffers
// of a flush are kept for the flush that follows it, rather than made anew
// for each, and let go once the queue is applied.
func TestColumnBuffersCarryOverFlushes(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, txn := range txns[:2] {
		if err := a.flush(ctx, txn.EndLSN); err != nil {
			t.Fatal(err)
		}
		if a.buffers.Bytes() == 0 {
			t.Fatalf("the flush up to %s left no column buffers for the next", txn.EndLSN)
		}
	}
	// Run applies the rest, and finds the queue applied.
	runCtx, cancel := context.WithCancel(ctx)
	ran := make(chan error, 1)
	a.cfg.FlushInterval, a.cfg.PollInterval = 10*time.Millisecond, 2*time.Millisecond
	go func() { ran <- a.Run(runCtx) }()
	last := txns[len(txns)-1].EndLSN
	for deadline := time.Now().Add(10 * time.Second); appliedPosition(t, db) < last || a.buffers.Bytes() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the applier applied up to %s of %s and holds %d bytes of column buffers", appliedPosition(t, db), last, a.buffers.Bytes())
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	checkReadAheadTables(t, tablesDir)
}
