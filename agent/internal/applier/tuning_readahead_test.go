package applier

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// readAheadQueue returns the transactions of the read-ahead tests: orders
// 50 down to 1 inserted, then 3 deleted and 51 inserted, then 5 given the
// values of 105 (its id kept) and 52 inserted. (In descending order, the
// inserts go to the mirror's pending set as they are read, and the tests
// see it spill; in ascending order, the mirror's appender would hold them.)
func readAheadQueue() []*store.Txn {
	rel := ordersRelation()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	insert := func(id int64) store.Change {
		return store.Change{Op: store.OpInsert, Relation: rel.Key, New: ordersValues(id)}
	}
	first := &store.Txn{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: at}}
	for id := int64(50); id >= 1; id-- {
		first.Changes = append(first.Changes, insert(id))
	}
	newFive := ordersValues(105)
	newFive[0] = store.Value{Kind: store.KindInt64, Int: 5}
	return []*store.Txn{
		first,
		{TxnHeader: store.TxnHeader{Xid: 2, CommitLSN: 0x2000, EndLSN: 0x2001, CommitTime: at.Add(time.Second)},
			Changes: []store.Change{{Op: store.OpDelete, Relation: rel.Key, Old: ordersValues(3)}, insert(51)}},
		{TxnHeader: store.TxnHeader{Xid: 3, CommitLSN: 0x3000, EndLSN: 0x3001, CommitTime: at.Add(2 * time.Second)},
			Changes: []store.Change{{Op: store.OpUpdate, Relation: rel.Key, New: newFive, Old: ordersValues(5)}, insert(52)}},
	}
}

// checkReadAheadTables checks the tables after the transactions of
// readAheadQueue were applied: the mirror holds orders 1 to 52 but 3, with
// order 5's new quantity, and the changelog each of the 54 changes once.
func checkReadAheadTables(t *testing.T, tablesDir string) {
	t.Helper()
	var ids []int64
	for _, r := range readTable(t, filepath.Join(tablesDir, "public.orders"), "id") {
		id := r.get("id").(int64)
		ids = append(ids, id)
		if id == 5 && r.get("qty") != int32(105) {
			t.Errorf("order 5 has qty %v, want 105", r.get("qty"))
		}
	}
	var want []int64
	for id := int64(1); id <= 52; id++ {
		if id != 3 {
			want = append(want, id)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("mirror ids %v, want %v", ids, want)
	}
	changes := readTable(t, filepath.Join(tablesDir, "public.orders_changes"), "_lsn", "_seq")
	if len(changes) != 54 {
		t.Fatalf("changelog holds %d changes, want 54", len(changes))
	}
	for i := 1; i < len(changes); i++ {
		if changes[i].get("_lsn") == changes[i-1].get("_lsn") && changes[i].get("_seq") == changes[i-1].get("_seq") {
			t.Fatalf("change %v/%v is in the changelog twice", changes[i].get("_lsn"), changes[i].get("_seq"))
		}
	}
}

// appliedPosition returns the applied position recorded in the state file.
func appliedPosition(t *testing.T, db *store.DB) store.LSN {
	t.Helper()
	var l store.LSN
	if err := db.View(func(r *store.Reader) (err error) { l, err = r.Applied(); return err }); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestReadAheadThenFlushAppliesEachChangeOnce(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[:2]...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, MergeMemoryKeys: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}

	// Read ahead twice over the same batch: the second time reads nothing.
	for range 2 {
		a.readAhead(ctx, txns[1].EndLSN)
		if a.read.upTo != txns[1].EndLSN || a.read.txns != 2 || a.read.changes != 52 {
			t.Fatalf("read ahead %+v, want through %s: 2 transactions, 52 changes", a.read, txns[1].EndLSN)
		}
	}
	if l := appliedPosition(t, db); l != 0 {
		t.Fatalf("applied position %s after reading ahead, want nothing applied", l)
	}
	for _, st := range a.Tables() {
		if st.Version > 0 {
			t.Fatalf("%s has version %d after reading ahead: something was committed", st.Name, st.Version)
		}
	}

	// A transaction that arrives meanwhile is read by the flush.
	if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txns[2], 0) }); err != nil {
		t.Fatal(err)
	}
	if err := a.flush(ctx, txns[2].EndLSN); err != nil {
		t.Fatal(err)
	}
	if a.read != (queueRead{}) {
		t.Fatalf("after the flush, the pending flush has read %+v", a.read)
	}
	if l := appliedPosition(t, db); l != txns[2].EndLSN {
		t.Fatalf("applied position %s, want %s", l, txns[2].EndLSN)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestReadAheadReadsASliceAtATime checks that a call of readAhead stops at
// the end of the transaction that reaches its slice of changes, says that
// more is left, and goes on from there the next time; the flush then
// applies each change once.
func TestReadAheadReadsASliceAtATime(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue() // 50 changes, then 2 and 2
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	a.readAheadSlice = 3
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	upTo := txns[2].EndLSN
	for i, want := range []struct {
		more          bool
		through       store.LSN
		txns, changes int64
	}{
		{true, txns[0].EndLSN, 1, 50},  // a transaction is read whole
		{false, txns[2].EndLSN, 3, 54}, // 2 changes, under the slice: one more transaction, the last
		{false, txns[2].EndLSN, 3, 54}, // nothing left
	} {
		more := a.readAhead(ctx, upTo)
		if more != want.more || a.read.upTo != want.through || a.read.txns != want.txns || a.read.changes != want.changes {
			t.Fatalf("call %d: more %v, read %+v; want more %v, through %s: %d transactions, %d changes",
				i+1, more, a.read, want.more, want.through, want.txns, want.changes)
		}
	}
	if err := a.flush(ctx, upTo); err != nil {
		t.Fatal(err)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestRunReadsAheadSliceAfterSlice checks that the applier, holding its
// flush back while capture catches up, reads the next slice at once
// instead of waiting to be told or to poll again.
func TestRunReadsAheadSliceAfterSlice(t *testing.T) {
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	var looks atomic.Int64
	a := New(Config{TablesDir: filepath.Join(dir, "tables"), PollInterval: time.Hour, FlushInterval: time.Hour, MaxDefer: time.Hour,
		Capture: captureFuncs{catchingUp: func() bool { looks.Add(1); return true }}, // capture is catching up
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	a.readAheadSlice = 3
	defer runInBackground(t, a)()
	// One look per slice: the first transaction, then the other two.
	for deadline := time.Now().Add(10 * time.Second); looks.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the applier looked at the queue %d times in 10 s while reading ahead, want 2: it waited between slices", looks.Load())
		}
	}
}

// TestReadAheadOfAClearedQueueIsDropped: what was read ahead of a queue
// that is then cleared (an initial snapshot starting over) is not
// committed; the flush reads the new queue.
func TestReadAheadOfAClearedQueueIsDropped(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	dir := t.TempDir()
	stale := &store.Txn{TxnHeader: txns[0].TxnHeader, Changes: slices.Clone(txns[0].Changes)}
	for i := range stale.Changes {
		stale.Changes[i].New = ordersValues(int64(1000 + i))
	}
	queueTxns(t, dir, ordersRelation(), stale)
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	a.readAhead(ctx, stale.EndLSN)
	if a.read.changes != 50 {
		t.Fatalf("read ahead %+v, want 50 changes", a.read)
	}
	err = db.Update(func(w *store.Writer) error {
		if err := w.ClearSlotState(); err != nil {
			return err
		}
		if err := w.PutRelation(ordersRelation()); err != nil {
			return err
		}
		for _, txn := range txns {
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.flush(ctx, txns[2].EndLSN); err != nil {
		t.Fatal(err)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestRunReadsAheadWhileCaptureCatchesUp: while capture catches up, Run
// holds the flush back but reads the batch (the mirror's pending set
// spills, and nothing is committed); once capture has caught up, the
// flush commits every change once.
func TestRunReadsAheadWhileCaptureCatchesUp(t *testing.T) {
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	var catchingUp atomic.Bool
	catchingUp.Store(true)
	a := New(Config{TablesDir: tablesDir, MergeMemoryKeys: 8, FlushInterval: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Capture: captureFuncs{catchingUp: catchingUp.Load}, MaxDefer: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	defer runInBackground(t, a)()
	a.Notify()

	waitForSpill(t, tablesDir, "while capture caught up")
	if l := appliedPosition(t, db); l != 0 {
		t.Fatalf("applied position %s while capture catches up, want the flush held back", l)
	}

	catchingUp.Store(false)
	a.Notify()
	for deadline := time.Now().Add(10 * time.Second); appliedPosition(t, db) < txns[2].EndLSN; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch was not flushed once capture caught up")
		}
	}
	checkReadAheadTables(t, tablesDir)
}

// TestRunReadsAheadUntilTheFlushIsDue: with capture caught up, Run reads
// the batch while its flush waits for the deadline (the mirror's pending
// set spills, and nothing is committed); the flush then commits every
// change once.
func TestRunReadsAheadUntilTheFlushIsDue(t *testing.T) {
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, MergeMemoryKeys: 8, FlushInterval: time.Hour, PollInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	stop := runInBackground(t, a)
	a.Notify()

	waitForSpill(t, tablesDir, "while the flush waited")
	stop()
	if l := appliedPosition(t, db); l != 0 {
		t.Fatalf("applied position %s before the flush was due, want nothing applied", l)
	}

	// The flush, when due, commits what was read (and what cancelling
	// Run may have left unread).
	if err := a.flush(context.Background(), txns[2].EndLSN); err != nil {
		t.Fatal(err)
	}
	checkReadAheadTables(t, tablesDir)
}

// runInBackground runs a.Run until the returned stop is called; stop
// waits for Run to return and fails the test on its error.
func runInBackground(t *testing.T, a *Applier) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// waitForSpill waits until the orders mirror's pending set has spilled a
// run, which shows that the batch is being read ahead (the tests use a
// tiny merge memory), and fails after 10 seconds, saying when it did not.
func waitForSpill(t *testing.T, tablesDir, when string) {
	t.Helper()
	spill := spillDir(tablesDir, "public.orders")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if runs, _ := os.ReadDir(spill); len(runs) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror's pending set did not fill %s: the batch was not read ahead", when)
		}
	}
}

// TestRunAppliesTheBacklogAtOnce: once capture has caught up, Run waits
// for the backlog's last transactions to be durable in the queue (capture
// counts as caught up a little before the backlog's end), then applies the
// backlog at once, without waiting for the flush interval. A transaction
// after the backlog waits for the interval. FlushingBacklog holds from the
// backlog's arrival until its commit, and no longer when Committed is
// called.
func TestRunAppliesTheBacklogAtOnce(t *testing.T) {
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[0])
	tablesDir := filepath.Join(dir, "tables")
	var catchingUp atomic.Bool
	catchingUp.Store(true)
	var a *Applier
	flushingAtCommit := make(chan bool, 10)
	a = New(Config{TablesDir: tablesDir, FlushInterval: time.Hour, PollInterval: 10 * time.Millisecond,
		Capture:   captureFuncs{catchingUp: catchingUp.Load, backlogEnd: func() store.LSN { return txns[1].EndLSN }},
		MaxDefer:  time.Hour,
		Committed: notifyFunc(func() { flushingAtCommit <- a.FlushingBacklog() }),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	stop := runInBackground(t, a)
	a.Notify()
	queue := func(txn *store.Txn) {
		t.Helper()
		err := db.Update(func(w *store.Writer) error {
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
			return w.SetCheckpoint(txn.EndLSN)
		})
		if err != nil {
			t.Fatal(err)
		}
		a.Notify()
	}

	// Caught up, with the backlog's last transaction still to come.
	catchingUp.Store(false)
	a.Notify()
	time.Sleep(100 * time.Millisecond)
	if l := appliedPosition(t, db); l != 0 {
		t.Fatalf("applied position %s before the backlog's end arrived, want nothing applied", l)
	}
	if !a.FlushingBacklog() {
		t.Fatal("FlushingBacklog is false with the backlog queued and not applied")
	}
	queue(txns[1])
	for deadline := time.Now().Add(10 * time.Second); appliedPosition(t, db) < txns[1].EndLSN; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backlog was not applied at once when its end arrived")
		}
	}
	if <-flushingAtCommit {
		t.Fatal("FlushingBacklog is true when Committed is told of the backlog's commit")
	}
	queue(txns[2])
	time.Sleep(100 * time.Millisecond)
	if l := appliedPosition(t, db); l != txns[1].EndLSN {
		t.Fatalf("applied position %s, want %s: a transaction after the backlog waits for the interval", l, txns[1].EndLSN)
	}
	if a.FlushingBacklog() {
		t.Fatal("FlushingBacklog is true with only a transaction after the backlog queued")
	}
	stop()
	if err := a.flush(context.Background(), txns[2].EndLSN); err != nil {
		t.Fatal(err)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestIdleApplierTrimsWhatAReaderHeldBack: a flush trims the queue only as
// far as its other reader (Reader, the live view) has read; once that
// reader has read the rest, the idle applier trims it, and the queue of an
// idle agent ends empty.
func TestIdleApplierTrimsWhatAReaderHeldBack(t *testing.T) {
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	var readerAt atomic.Uint64
	readerAt.Store(uint64(txns[0].EndLSN))
	a := New(Config{TablesDir: filepath.Join(dir, "tables"), FlushInterval: 10 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		Reader: offsetFunc(func() store.LSN { return store.LSN(readerAt.Load()) }),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	defer runInBackground(t, a)()
	a.Notify()
	for deadline := time.Now().Add(10 * time.Second); appliedPosition(t, db) < txns[2].EndLSN; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the queue was not applied")
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := queuedTxns(t, db); n != 2 {
		t.Fatalf("%d transactions queued after the flush, want 2: the reader has read only the first", n)
	}
	readerAt.Store(uint64(txns[2].EndLSN))
	for deadline := time.Now().Add(10 * time.Second); queuedTxns(t, db) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions still queued after the reader read them all", queuedTxns(t, db))
		}
	}
}

// TestSchemaVersionMetInsideAFlushIsABoundary records a schema version of
// the table (a column added) at a position the batch had already been read
// past, as the catalog watcher may while capture catches up, and queues a
// transaction of that version after it: the flush meets the version after
// changes of the one before. That is a boundary, not a failure: nothing is
// reported failing, no error is logged, and every change is applied.
func TestSchemaVersionMetInsideAFlushIsABoundary(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[:2]...)
	tablesDir := filepath.Join(dir, "tables")
	var logBuf lockedBuffer
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if upTo, _, _, err := a.nextBatch(); err != nil || upTo != txns[1].EndLSN {
		t.Fatalf("batch up to %s, %v", upTo, err)
	}
	a.readAhead(ctx, txns[1].EndLSN)
	wider := ordersRelation()
	wider.Key.LSN = txns[1].CommitLSN - 1
	wider.Columns = append(wider.Columns, store.Column{Name: "note", TypeOID: 25, TypeMod: -1})
	last := *txns[2]
	last.Changes = nil
	for _, ch := range txns[2].Changes {
		ch.Relation = wider.Key
		ch.New = append(ch.New, store.Value{Kind: store.KindString, Bytes: []byte("n")})
		if ch.Old != nil {
			ch.Old = append(ch.Old, store.Value{})
		}
		last.Changes = append(last.Changes, ch)
	}
	if err := db.Update(func(w *store.Writer) error {
		if err := w.PutRelation(wider); err != nil {
			return err
		}
		return w.AppendTxn(&last, 0)
	}); err != nil {
		t.Fatal(err)
	}
	upTo, _, _, err := a.nextBatch()
	if err != nil || upTo != last.EndLSN {
		t.Fatalf("batch up to %s, %v", upTo, err)
	}
	err = a.flush(ctx, upTo)
	if f := a.Failures(); len(f) != 0 {
		t.Fatalf("failures after a version met inside a flush: %+v (flush: %v)", f, err)
	}
	if strings.Contains(logBuf.String(), "level=ERROR") {
		t.Fatalf("an error was logged:\n%s", logBuf.String())
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	if f := a.Failures(); len(f) != 0 {
		t.Fatalf("failures after the table caught up: %+v", f)
	}
	if l := appliedPosition(t, db); l != last.EndLSN {
		t.Fatalf("applied position %s, want %s", l, last.EndLSN)
	}
	checkReadAheadTables(t, tablesDir)
}
