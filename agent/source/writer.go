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
	slot    *store.SlotState
	done    chan error
	weight  int64
}

// Limits of the writer: how many changes may wait in memory for the writer,
// and how many operations one bbolt transaction takes at most.
const (
	maxPendingChanges = 64 * 1024
	maxBatchOps       = 8192
)

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
	// onDurable is called after each durable write, if set.
	onDurable func()
}

func newQueueWriter(db *store.DB, log *slog.Logger, checkpoint store.LSN, onDurable func()) *queueWriter {
	w := &queueWriter{
		db:        db,
		log:       log,
		ops:       make(chan writeOp, maxBatchOps),
		stopped:   make(chan struct{}),
		onDurable: onDurable,
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
	op.weight = int64(len(op.changes)) + 1
	if op.txn != nil {
		op.weight += int64(len(op.txn.Changes))
	}
	w.mu.Lock()
	for w.err == nil && w.pending > 0 && w.pending+op.weight > maxPendingChanges {
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

// close stops the writer after it has applied everything sent so far.
func (w *queueWriter) close() error {
	close(w.ops)
	<-w.stopped
	return w.failed()
}

// run applies operations until ops is closed or a write fails for a reason
// other than a full disk. A full disk pauses the writer (and so, through
// backpressure, the reading from PostgreSQL) and retries; nothing is dropped.
func (w *queueWriter) run() {
	defer close(w.stopped)
	var carry []writeOp
	for {
		batch := carry
		carry = nil
		if len(batch) == 0 {
			op, ok := <-w.ops
			if !ok {
				return
			}
			batch = append(batch, op)
		}
	drain:
		for len(batch) < maxBatchOps {
			select {
			case op, ok := <-w.ops:
				if !ok {
					break drain
				}
				batch = append(batch, op)
			default:
				break drain
			}
		}
		applied, checkpoint, cleared, err := w.write(batch)
		for err != nil && errors.Is(err, syscall.ENOSPC) {
			w.log.Error("state disk is full; capture is paused until space is freed", "path", w.db.Path(), "err", err)
			time.Sleep(5 * time.Second)
			applied, checkpoint, cleared, err = w.write(batch)
		}
		if err != nil {
			w.fail(fmt.Errorf("write queue: %w", err), batch)
			// Fail everything still queued too.
			for op := range w.ops {
				if op.done != nil {
					op.done <- err
				}
			}
			return
		}
		carry = batch[applied:]
		if cleared || checkpoint > w.Durable() {
			w.durable.Store(uint64(checkpoint))
		}
		var weight int64
		for _, op := range batch[:applied] {
			weight += op.weight
			if op.done != nil {
				op.done <- nil
			}
		}
		w.mu.Lock()
		w.pending -= weight
		w.cond.Broadcast()
		w.mu.Unlock()
		if w.onDurable != nil {
			w.onDurable()
		}
	}
}

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
}

// write applies a prefix of batch in one bbolt transaction and returns how
// many operations it applied and the checkpoint it recorded. It stops before
// committing a spool that the same transaction changed (see
// store.Writer.SpoolCommit).
//
// After a batch that cleared the state, the checkpoint starts again from what
// the batch recorded (zero when nothing).
func (w *queueWriter) write(batch []writeOp) (applied int, checkpoint store.LSN, cleared bool, err error) {
	err = w.db.Update(func(tx *store.Writer) error {
		checkpoint, applied, cleared = 0, 0, false
		for _, op := range batch {
			if op.kind == opSpoolCommit && tx.SpoolTouched(op.spool) {
				break
			}
			if err := apply(tx, &op); err != nil {
				return err
			}
			applied++
			switch op.kind {
			case opAppendTxn:
				checkpoint = max(checkpoint, op.txn.EndLSN)
			case opSpoolCommit:
				checkpoint = max(checkpoint, op.header.EndLSN)
			case opCheckpoint:
				checkpoint = max(checkpoint, op.lsn)
			case opClearState:
				checkpoint, cleared = 0, true
			}
		}
		if checkpoint > 0 {
			if err := tx.SetCheckpoint(checkpoint); err != nil {
				return err
			}
		}
		return nil
	})
	return applied, checkpoint, cleared, err
}

func apply(tx *store.Writer, op *writeOp) error {
	switch op.kind {
	case opAppendTxn:
		return tx.AppendTxn(op.txn, store.DefaultChunkSize)
	case opSpoolAppend:
		return tx.SpoolAppend(op.spool, op.subXid, op.changes)
	case opSpoolAbort:
		return tx.SpoolAbort(op.spool, op.subXid)
	case opSpoolCommit:
		return tx.SpoolCommit(op.spool, op.header)
	case opDiscardSpools:
		_, err := tx.DiscardSpools()
		return err
	case opRelation:
		return tx.PutRelation(op.rel)
	case opSlotState:
		return tx.SetSlotState(op.slot)
	case opClearState:
		return tx.ClearSlotState()
	case opCheckpoint, opSync:
		return nil
	}
	return fmt.Errorf("unknown write operation %d", op.kind)
}
