package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lakeside/lakeside/store"
)

// opKind says what a queue write does.
type opKind uint8

const (
	opAppendTxn opKind = iota + 1
	opSpoolAppend
	opSpoolAbort
	opSpoolCommit
	opDiscardSpools
	opRelation
	opCheckpoint
	opSlotState
	opClearState
	opSync
	// opIdentities records table identities (identities).
	opIdentities
	// opNewGeneration records a new generation of a table (gen) and, when
	// txn is set, queues txn (the truncate of the old generation) in the
	// same write.
	opNewGeneration
	// opBackfillAsked records that the backfill of gen was asked for.
	opBackfillAsked
	// opBackfill only records backfills (writeOp.backfills, forget).
	opBackfill
	// opPartitions records the partitions of tables (partitions).
	opPartitions
	// opEnumLabels records the enum labels of tables (enumLabels).
	opEnumLabels
)

// writeOp is one change to the state file, applied in order by the writer.
type writeOp struct {
	kind    opKind
	txn     *store.Txn
	spool   store.SpoolID
	subXid  uint32
	changes []store.Change
	header  store.TxnHeader
	rel     *store.Relation
	lsn     store.LSN
	// slot is the slot state an opSlotState records, or an
	// opSpoolCommit records with the transaction it queues.
	slot *store.SlotState
	// identities and gen are what opIdentities, opNewGeneration and
	// opBackfillAsked record; an opRelation records gen too, when set.
	identities []*store.TableIdentity
	gen        *newGeneration
	// backfills are recorded, and the records of the tables in forget
	// deleted, in the same bbolt transaction as the operation: a chunk
	// of copied rows and the progress that counts it are durable
	// together. markCopies marks the state as recording every copy
	// (store.Writer.MarkCopiesRecorded).
	backfills  []*store.Backfill
	forget     []uint32
	markCopies bool
	// partitions are the leaf partitions an opPartitions records, by
	// table OID.
	partitions map[uint32][]uint32
	// enumLabels are the enum labels an opEnumLabels records, by table
	// OID.
	enumLabels map[uint32][]string
	done       chan error
	// recycle, if set, is called once the operation is durable: the
	// memory of its changes may then be used again.
	recycle func()
	weight  int64
}

// Limits of the writer: how much weight of changes may wait in memory for
// the writer (see opWeight), and how many operations one bbolt transaction
// takes at most.
const (
	maxPendingWeight = 64 * 1024
	maxBatchOps      = 8192
)

// weightBytes is the bytes of values that weigh as much as a change: a
// change weighs one, and one more for each weightBytes of its values, so
// that the writer's limits hold fewer changes of wide rows (64 MiB of
// values at most wait in memory, and an open transaction is committed once
// it holds half of that).
const weightBytes = 1024

// opWeight returns the weight of op's changes, and one for op itself.
func opWeight(op *writeOp) int64 {
	w := 1 + changesWeight(op.changes)
	if op.txn != nil {
		w += changesWeight(op.txn.Changes)
	}
	return w
}

// changesWeight returns the weight of changes (see weightBytes).
func changesWeight(changes []store.Change) int64 {
	n := 0
	for i := range changes {
		n += store.ValuesBytes(changes[i].New) + store.ValuesBytes(changes[i].Old)
	}
	return weightOf(len(changes), n)
}

// weightOf returns the weight of n changes whose values hold size bytes,
// for a caller that counted them (stream.add).
func weightOf(n, size int) int64 { return int64(n + size/weightBytes) }

// queueWriter applies writeOps to the state file from one goroutine, many per
// bbolt transaction (group commit), and publishes the durable checkpoint.
type queueWriter struct {
	db  *store.DB
	log *slog.Logger
	ops chan writeOp

	mu      sync.Mutex
	cond    *sync.Cond
	pending int64 // weight of ops sent but not yet durable
	err     error // set when the writer failed; it stops accepting ops

	durable atomic.Uint64 // the checkpoint known to be fsync'd
	stopped chan struct{}
	// quit is closed when the writer is asked to stop: a wait for disk
	// space ends then, as it does when the context run was given ends.
	quit      chan struct{}
	closeOnce sync.Once
	// onDurable is called after each durable write, if set.
	onDurable func()
	// behind reports whether capture is draining a backlog, if set.
	behind func() bool
	// onCatchUpCommit, if set, is told before and after each commit
	// made while behind (Threads.CatchUpCommit).
	onCatchUpCommit func(committing bool)
	// commitEvery is the least time between commits while behind.
	commitEvery time.Duration
	// fullDiskPause is how long the writer waits before it retries a
	// write that found the disk full.
	fullDiskPause time.Duration
	// beforeCommit, if set, is called before each commit; an error it
	// returns fails the commit as the disk would (tests only).
	beforeCommit func() error
	// lastCommit is when the writer last committed (its goroutine only).
	lastCommit time.Time
}

func newQueueWriter(db *store.DB, log *slog.Logger, checkpoint store.LSN, onDurable func(), behind func() bool) *queueWriter {
	w := &queueWriter{
		db:        db,
		log:       log,
		ops:       make(chan writeOp, maxBatchOps),
		stopped:   make(chan struct{}),
		quit:      make(chan struct{}),
		onDurable: onDurable,
		behind:    behind,

		commitEvery:   catchUpCommitEvery,
		fullDiskPause: 5 * time.Second,
	}
	w.cond = sync.NewCond(&w.mu)
	w.durable.Store(uint64(checkpoint))
	return w
}

// Durable returns the checkpoint that is fsync'd in the state file.
func (w *queueWriter) Durable() store.LSN { return store.LSN(w.durable.Load()) }

// send queues an operation, waiting while too many changes are in memory.
// It fails only when the writer has failed.
func (w *queueWriter) send(op writeOp) error {
	if op.weight == 0 {
		op.weight = opWeight(&op)
	}
	w.mu.Lock()
	for w.err == nil && w.pending > 0 && w.pending+op.weight > maxPendingWeight {
		w.cond.Wait()
	}
	if err := w.err; err != nil {
		w.mu.Unlock()
		return err
	}
	w.pending += op.weight
	w.mu.Unlock()
	w.ops <- op
	return nil
}

// sync waits until every operation sent before it is durable.
func (w *queueWriter) sync(ctx context.Context) error {
	done := make(chan error, 1)
	if err := w.send(writeOp{kind: opSync, done: done}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-w.stopped:
		return w.failure()
	}
}

// failure returns why the writer stopped, or an error saying it stopped.
func (w *queueWriter) failure() error {
	if err := w.failed(); err != nil {
		return err
	}
	return errors.New("queue writer stopped")
}

// failed returns the writer's error, or nil while it works.
func (w *queueWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close stops the writer after it has applied everything sent so far, or
// at once while it waits for disk space. Calling it again waits the same.
func (w *queueWriter) close() error {
	w.closeOnce.Do(func() {
		close(w.quit)
		close(w.ops)
	})
	<-w.stopped
	return w.failed()
}

// run applies operations until ops is closed or a write fails for a reason
// other than a full disk. A full disk pauses the writer (and so, through
// backpressure, the reading from PostgreSQL) and retries; nothing is dropped.
// The pause ends the writer, with errStoppedWhileFull, when it is closed or
// when ctx ends: capture, held up by the backpressure, cannot close it then,
// and its senders get the error instead of waiting for disk space.
//
// Each operation is applied as it arrives, into a bbolt transaction that is
// committed (fsync'd) once no more operations are waiting: many operations
// share one fsync under load (group commit). While capture drains a backlog
// (behind), commits are at most catchUpCommitEvery apart instead, so that
// fsyncs take less of the time the walsender waits for its socket to drain.
func (w *queueWriter) run(ctx context.Context) {
	defer close(w.stopped)
	var open openTxn
	w.lastCommit = time.Now()
	for {
		op, ok, commitNow := w.next(&open)
		switch {
		case commitNow:
			if !w.commit(ctx, &open) {
				return
			}
			continue
		case !ok:
			w.commit(ctx, &open)
			return
		}
		if op.kind == opSpoolCommit && open.tx != nil && open.tx.SpoolTouched(op.spool) {
			// A spool is committed in a transaction of its own (see
			// store.Writer.SpoolCommit).
			if !w.commit(ctx, &open) {
				return
			}
		}
		if err := w.retryFull(ctx, func() error { return open.apply(w.db, op) }, &open); err != nil {
			open.ops = append(open.ops, op)
			w.abort(&open, err)
			return
		}
		if op.done != nil || open.weight >= maxOpenWeight || len(open.ops) >= maxBatchOps {
			if !w.commit(ctx, &open) {
				return
			}
		}
	}
}

// maxOpenWeight is the weight of changes an open transaction takes before
// it is committed, whatever the time: half of what may wait in memory, so
// that capture goes on reading while the writer commits.
const maxOpenWeight = maxPendingWeight / 2

// catchUpCommitEvery is the least time between two commits while capture
// drains a backlog.
const catchUpCommitEvery = 100 * time.Millisecond

// next waits for the next operation. With a transaction open, it returns
// commitNow instead when nothing more is waiting and a commit is due.
func (w *queueWriter) next(open *openTxn) (op writeOp, ok, commitNow bool) {
	if open.tx == nil {
		op, ok = <-w.ops
		return op, ok, false
	}
	select {
	case op, ok = <-w.ops:
		return op, ok, false
	default:
	}
	wait := time.Duration(0)
	if w.behind != nil && w.behind() {
		wait = w.commitEvery - time.Since(w.lastCommit)
	}
	if wait <= 0 {
		return op, false, true
	}
	select {
	case op, ok = <-w.ops:
		return op, ok, false
	case <-time.After(wait):
		return op, false, true
	}
}

// errStoppedWhileFull ends a writer stopped while it waited for disk
// space: what it could not write was never acknowledged, and PostgreSQL
// sends it again at the next start.
var errStoppedWhileFull = errors.New("stopped while the state disk is full")

// retryFull runs write, and while it fails because the disk is full, rolls
// the open transaction back, waits, applies its operations again and runs
// write again. The wait ends with errStoppedWhileFull when the writer is
// closed or ctx ends.
func (w *queueWriter) retryFull(ctx context.Context, write func() error, open *openTxn) error {
	err := write()
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	since := time.Now()
	w.log.Error("state disk is full; capture is paused until space is freed", "path", w.db.Path(), "err", err)
	for err != nil && errors.Is(err, syscall.ENOSPC) {
		select {
		case <-w.quit:
			return fmt.Errorf("%w: %w", errStoppedWhileFull, err)
		case <-ctx.Done():
			return fmt.Errorf("%w: %w: %w", errStoppedWhileFull, ctx.Err(), err)
		case <-time.After(w.fullDiskPause):
		}
		if err = open.reapply(w.db); err == nil {
			err = write()
		}
	}
	if err == nil {
		w.log.Info("state disk has room again; capture resumes", "path", w.db.Path(), "paused", time.Since(since).Round(time.Millisecond))
	}
	return err
}

// commit commits the open transaction, if any, and publishes what became
// durable. It returns false when the writer failed.
func (w *queueWriter) commit(ctx context.Context, open *openTxn) bool {
	if open.tx == nil {
		return true
	}
	announce := w.onCatchUpCommit != nil && w.behind != nil && w.behind()
	if announce {
		w.onCatchUpCommit(true)
	}
	err := w.retryFull(ctx, func() error { return open.commit(w.beforeCommit) }, open)
	if announce {
		w.onCatchUpCommit(false)
	}
	if err != nil {
		w.abort(open, err)
		return false
	}
	w.lastCommit = time.Now()
	if open.cleared || open.checkpoint > w.Durable() {
		w.durable.Store(uint64(open.checkpoint))
	}
	// onDurable runs before the waiting syncs return, so that a caller of
	// sync finds what it triggers done.
	if w.onDurable != nil {
		w.onDurable()
	}
	for _, op := range open.ops {
		if op.done != nil {
			op.done <- nil
		}
		if op.recycle != nil {
			op.recycle()
		}
	}
	w.mu.Lock()
	w.pending -= open.weight
	w.cond.Broadcast()
	w.mu.Unlock()
	// The slice is used again; the operations it held (their changes)
	// are not kept alive by it.
	clear(open.ops)
	*open = openTxn{ops: open.ops[:0]}
	return true
}

// abort rolls back the open transaction, if it is still open, and fails
// the writer with err.
func (w *queueWriter) abort(open *openTxn, err error) {
	if open.tx != nil {
		open.tx.Rollback()
		open.tx = nil
	}
	w.fail(fmt.Errorf("write queue: %w", err), open.ops)
}

// fail records err, fails the operations of batch and everything still
// queued, and stops the writer from accepting more.
func (w *queueWriter) fail(err error, batch []writeOp) {
	w.mu.Lock()
	w.err = err
	w.cond.Broadcast()
	w.mu.Unlock()
	for _, op := range batch {
		if op.done != nil {
			op.done <- err
		}
	}
	for op := range w.ops {
		if op.done != nil {
			op.done <- err
		}
	}
}

// openTxn is the writer's bbolt transaction and the operations applied in it.
//
// After an operation that cleared the state, the checkpoint starts again
// from what the later operations record (zero when none).
type openTxn struct {
	tx         *store.Writer
	ops        []writeOp
	weight     int64
	checkpoint store.LSN
	cleared    bool
}

// apply applies op, beginning a transaction if none is open.
func (t *openTxn) apply(db *store.DB, op writeOp) error {
	if t.tx == nil {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		t.tx = tx
	}
	if err := apply(t.tx, &op); err != nil {
		return err
	}
	t.ops = append(t.ops, op)
	t.weight += op.weight
	switch op.kind {
	case opAppendTxn:
		t.checkpoint = max(t.checkpoint, op.txn.EndLSN)
	case opNewGeneration:
		if op.txn != nil {
			t.checkpoint = max(t.checkpoint, op.txn.EndLSN)
		}
	case opSpoolCommit:
		t.checkpoint = max(t.checkpoint, op.header.EndLSN)
	case opCheckpoint:
		t.checkpoint = max(t.checkpoint, op.lsn)
	case opClearState:
		t.checkpoint, t.cleared = 0, true
	}
	return nil
}

// commit records the checkpoint and commits, after calling before if it is
// set. The transaction is closed whatever it returns; on failure the
// operations stay, for reapply.
func (t *openTxn) commit(before func() error) error {
	tx := t.tx
	t.tx = nil
	if before != nil {
		if err := before(); err != nil {
			tx.Rollback()
			return err
		}
	}
	if t.checkpoint > 0 {
		if err := tx.SetCheckpoint(t.checkpoint); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// reapply rolls back the open transaction, if any, and applies its
// operations again in a new one.
func (t *openTxn) reapply(db *store.DB) error {
	if t.tx != nil {
		t.tx.Rollback()
	}
	ops := t.ops
	*t = openTxn{}
	for _, op := range ops {
		if err := t.apply(db, op); err != nil {
			t.ops = append(t.ops, ops[len(t.ops):]...)
			return err
		}
	}
	return nil
}

func apply(tx *store.Writer, op *writeOp) error {
	if err := applyKind(tx, op); err != nil {
		return err
	}
	for _, bf := range op.backfills {
		if err := tx.PutBackfill(bf); err != nil {
			return err
		}
	}
	for _, oid := range op.forget {
		if err := tx.DeleteBackfill(oid); err != nil {
			return err
		}
	}
	if op.markCopies {
		return tx.MarkCopiesRecorded()
	}
	return nil
}

// applyKind does what the kind of op says.
func applyKind(tx *store.Writer, op *writeOp) error {
	switch op.kind {
	case opAppendTxn:
		return tx.AppendTxn(op.txn, store.DefaultChunkSize)
	case opSpoolAppend:
		return tx.SpoolAppend(op.spool, op.subXid, op.changes)
	case opSpoolAbort:
		return tx.SpoolAbort(op.spool, op.subXid)
	case opSpoolCommit:
		if err := tx.SpoolCommit(op.spool, op.header); err != nil || op.slot == nil {
			return err
		}
		return tx.SetSlotState(op.slot)
	case opDiscardSpools:
		_, err := tx.DiscardSpools()
		return err
	case opRelation:
		if err := tx.PutRelation(op.rel); err != nil {
			return err
		}
		if op.gen != nil {
			return op.gen.record(tx)
		}
		return nil
	case opSlotState:
		return tx.SetSlotState(op.slot)
	case opClearState:
		return tx.ClearSlotState()
	case opIdentities:
		for _, id := range op.identities {
			if err := tx.PutTableIdentity(id); err != nil {
				return err
			}
		}
		return nil
	case opNewGeneration:
		if op.txn != nil {
			if err := tx.AppendTxn(op.txn, store.DefaultChunkSize); err != nil {
				return err
			}
		}
		return op.gen.record(tx)
	case opBackfillAsked:
		return op.gen.asked(tx)
	case opPartitions:
		for oid, leaves := range op.partitions {
			if err := tx.PutPartitions(oid, leaves); err != nil {
				return err
			}
		}
		return nil
	case opEnumLabels:
		for oid, labels := range op.enumLabels {
			if err := tx.PutEnumLabels(oid, labels); err != nil {
				return err
			}
		}
		return nil
	case opCheckpoint, opSync, opBackfill:
		return nil
	}
	return fmt.Errorf("unknown write operation %d", op.kind)
}

// newGeneration is a table's new generation: the PostgreSQL table oid
// captured as table from since on, whose rows are to be copied for
// backfill (when not empty).
type newGeneration struct {
	table    string
	oid      uint32
	since    store.LSN
	backfill string
	// request is the store.TableGeneration.BackfillRequest an
	// opBackfillAsked was asked for.
	request uint64
}

// record adds the generation to the table's identity, read in the same
// write: nothing when it is the current one already.
func (g *newGeneration) record(tx *store.Writer) error {
	id, err := tx.TableIdentity(g.table)
	if err != nil {
		return err
	}
	if id == nil {
		return fmt.Errorf("new generation of %s: the table has no identity", g.table)
	}
	cur := id.Current()
	if cur.OID == g.oid {
		if g.backfill == "" {
			return nil
		}
		// The current generation's rows are to be copied again.
		last := &id.Generations[len(id.Generations)-1]
		last.Backfill = g.backfill
		last.BackfillRequest++
		return tx.PutTableIdentity(id)
	}
	next := store.TableGeneration{OID: g.oid, Generation: cur.Generation + 1, Since: g.since, Backfill: g.backfill}
	if g.backfill != "" {
		next.BackfillRequest = 1
	}
	id.Generations = append(id.Generations, next)
	return tx.PutTableIdentity(id)
}

// asked clears the backfill due for the generation of oid, read in the
// same write, if it is still the request asked for: one recorded since
// stays due.
func (g *newGeneration) asked(tx *store.Writer) error {
	id, err := tx.TableIdentity(g.table)
	if err != nil || id == nil {
		return err
	}
	for i := range id.Generations {
		gen := &id.Generations[i]
		if gen.OID == g.oid && gen.Backfill != "" && gen.BackfillRequest == g.request {
			gen.Backfill = ""
			return tx.PutTableIdentity(id)
		}
	}
	return nil
}
