package source

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// writerHarness runs a queueWriter on a state file of its own.
type writerHarness struct {
	t       *testing.T
	db      *store.DB
	w       *queueWriter
	commits atomic.Int64
	log     *messageCounter
	// cancel ends the context the writer runs with, as a stop of
	// capture does.
	cancel context.CancelFunc
}

// messageCounter is a slog.Handler that counts the records of each message.
type messageCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (m *messageCounter) Enabled(context.Context, slog.Level) bool { return true }
func (m *messageCounter) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messageCounter) WithGroup(string) slog.Handler            { return m }

func (m *messageCounter) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counts[r.Message]++
	return nil
}

// count returns how many records had a message containing substr.
func (m *messageCounter) count(substr string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for msg, c := range m.counts {
		if strings.Contains(msg, substr) {
			n += c
		}
	}
	return n
}

// newWriterHarness starts a writer; behind says whether capture is draining
// a backlog, and setup adjusts the writer before it starts.
func newWriterHarness(t *testing.T, behind bool, setup func(w *queueWriter)) *writerHarness {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := &writerHarness{t: t, db: db, log: &messageCounter{counts: map[string]int{}}}
	log := slog.New(h.log)
	h.w = newQueueWriter(db, log, 0, func() { h.commits.Add(1) }, func() bool { return behind })
	if setup != nil {
		setup(h.w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.w.run(ctx)
	t.Cleanup(func() { h.w.close() })
	t.Cleanup(cancel)
	return h
}

// appendTxn sends a one-row transaction ending at end.
func (h *writerHarness) appendTxn(end store.LSN) {
	h.t.Helper()
	txn := &store.Txn{
		TxnHeader: store.TxnHeader{Xid: uint32(end), CommitLSN: end - 1, EndLSN: end, CommitTime: time.Now()},
		Changes: []store.Change{{Op: store.OpInsert, Relation: store.RelationKey{OID: 16384, LSN: 1},
			New: []store.Value{{Kind: store.KindInt64, Int: int64(end)}}}},
	}
	if err := h.w.send(writeOp{kind: opAppendTxn, txn: txn}); err != nil {
		h.t.Fatal(err)
	}
}

// queued returns the end LSNs of the queued transactions.
func (h *writerHarness) queued() []store.LSN {
	h.t.Helper()
	var ends []store.LSN
	err := h.db.View(func(r *store.Reader) error {
		txns, err := r.ReadTxns(0, 1000)
		for _, txn := range txns {
			ends = append(ends, txn.EndLSN)
		}
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return ends
}

// syncTo waits until everything sent is durable and checks that the
// durable position is then want.
func (h *writerHarness) syncTo(want store.LSN) {
	h.t.Helper()
	if err := h.w.sync(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	if d := h.w.Durable(); d != want {
		h.t.Fatalf("durable %s after sync, want %s", d, want)
	}
}

// waitDurable waits until the writer says lsn is durable.
func (h *writerHarness) waitDurable(lsn store.LSN) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.w.Durable() < lsn {
		if time.Now().After(deadline) {
			h.t.Fatalf("durable %s, want %s", h.w.Durable(), lsn)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriterKeepsNothingDurable checks that the writer lets go of a
// transaction once it is durable: the operations of its open transaction
// are kept in a slice that is used again, and a captured backlog must not
// stay in memory through it.
func TestWriterKeepsNothingDurable(t *testing.T) {
	// Behind, with commits far apart: the first three transactions and
	// the sync share one commit, the next transaction and sync another.
	h := newWriterHarness(t, true, func(w *queueWriter) { w.commitEvery = time.Hour })
	h.appendTxn(100)
	h.appendTxn(200)
	var collected atomic.Bool
	txn := &store.Txn{
		TxnHeader: store.TxnHeader{Xid: 300, CommitLSN: 299, EndLSN: 300, CommitTime: time.Now()},
		Changes: []store.Change{{Op: store.OpInsert, Relation: store.RelationKey{OID: 16384, LSN: 1},
			New: []store.Value{{Kind: store.KindInt64, Int: 300}}}},
	}
	runtime.SetFinalizer(txn, func(*store.Txn) { collected.Store(true) })
	if err := h.w.send(writeOp{kind: opAppendTxn, txn: txn}); err != nil {
		t.Fatal(err)
	}
	txn = nil
	h.syncTo(300)
	h.appendTxn(400)
	h.syncTo(400)
	for i := 0; i < 20 && !collected.Load(); i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if !collected.Load() {
		t.Fatal("a durable transaction is still referenced by the writer")
	}
}

func TestWriterCommitsOnceNothingMoreIsWaiting(t *testing.T) {
	h := newWriterHarness(t, false, nil)
	h.appendTxn(100)
	// No sync: a transaction alone is committed as soon as the writer has
	// nothing more to apply.
	h.waitDurable(100)
	if got := h.queued(); len(got) != 1 || got[0] != 100 {
		t.Fatalf("queued %v, want [100]", got)
	}
}

func TestWriterSpacesCommitsWhileBehind(t *testing.T) {
	h := newWriterHarness(t, true, func(w *queueWriter) { w.commitEvery = time.Hour })
	h.appendTxn(100)
	// Give the writer time to apply the first transaction alone: caught
	// up, it would commit it now.
	time.Sleep(100 * time.Millisecond)
	if d := h.w.Durable(); d != 0 {
		t.Fatalf("durable %s while behind, before the commit interval", d)
	}
	h.appendTxn(200)
	h.syncTo(200)
	if n := h.commits.Load(); n != 1 {
		t.Fatalf("%d commits, want both transactions in one", n)
	}
	if got := h.queued(); len(got) != 2 || got[0] != 100 || got[1] != 200 {
		t.Fatalf("queued %v, want [100 200]", got)
	}
}

func TestWriterTellsOfCommitsWhileBehind(t *testing.T) {
	// While capture catches up, each commit is announced before it starts
	// and after it ends (the agent gives it a thread of its own); caught
	// up, commits are not.
	for _, behind := range []bool{true, false} {
		var mu sync.Mutex
		var told []bool
		h := newWriterHarness(t, behind, func(w *queueWriter) {
			w.commitEvery = 0
			w.onCatchUpCommit = func(committing bool) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, committing)
			}
		})
		h.appendTxn(100)
		h.syncTo(100)
		h.appendTxn(200)
		h.syncTo(200)
		mu.Lock()
		n := len(told)
		for i, committing := range told {
			if committing != (i%2 == 0) {
				t.Errorf("behind %v: told %v, want starts and ends in turn", behind, told)
				break
			}
		}
		mu.Unlock()
		switch {
		case behind && (n < 4 || int64(n/2) != h.commits.Load()):
			t.Fatalf("behind: told of %d commit starts and ends for %d commits", n, h.commits.Load())
		case !behind && n != 0:
			t.Fatalf("caught up: told of %d commit starts and ends, want none", n)
		}
	}
}

func TestWriterRetriesAFullDiskWithEverythingApplied(t *testing.T) {
	var fails atomic.Int64
	h := newWriterHarness(t, true, func(w *queueWriter) {
		w.commitEvery = time.Hour
		w.fullDiskPause = 10 * time.Millisecond
		w.beforeCommit = func() error {
			if fails.Add(1) <= 2 {
				return syscall.ENOSPC
			}
			return nil
		}
	})
	h.appendTxn(100)
	h.appendTxn(200)
	h.syncTo(200)
	if got := h.queued(); len(got) != 2 || got[0] != 100 || got[1] != 200 {
		t.Fatalf("queued %v after the disk had room again, want [100 200]", got)
	}
	if n := h.log.count("state disk is full"); n != 1 {
		t.Fatalf("logged a full disk %d times for two retries, want once", n)
	}
	if n := h.log.count("capture resumes"); n != 1 {
		t.Fatalf("logged the recovery %d times, want once", n)
	}
	// The writer goes on after the disk has room.
	h.appendTxn(300)
	h.syncTo(300)
}

// TestWriterStopsOnAFullDisk stops a writer that waits for disk space:
// it stops at once, with the full disk as its error, and nothing of what
// it could not write counts as durable.
func TestWriterStopsOnAFullDisk(t *testing.T) {
	h := newWriterHarness(t, true, func(w *queueWriter) {
		w.fullDiskPause = time.Hour
		w.beforeCommit = func() error { return syscall.ENOSPC }
	})
	h.appendTxn(100)
	for h.log.count("state disk is full") == 0 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- h.w.close() }()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("close on a full disk: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer waited for disk space instead of stopping")
	}
	if d := h.w.Durable(); d >= 100 {
		t.Fatalf("durable %s after a commit that never happened", d)
	}
}

// TestWriterStopsOnAFullDiskWhenCancelled stops capture while the writer
// waits for disk space and a sender waits for the writer (backpressure):
// capture cannot close the writer then, so the wait must end with the
// writer's context. The sender gets the stop as its error within a few
// seconds, not once the disk has room (here: an hour).
func TestWriterStopsOnAFullDiskWhenCancelled(t *testing.T) {
	h := newWriterHarness(t, true, func(w *queueWriter) {
		w.fullDiskPause = time.Hour
		w.beforeCommit = func() error { return syscall.ENOSPC }
	})
	h.appendTxn(100)
	for deadline := time.Now().Add(10 * time.Second); h.log.count("state disk is full") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not find the disk full")
		}
	}
	// An operation as heavy as all that may wait in memory waits for the
	// writer, as capture does once the writer falls behind.
	sent := make(chan error, 1)
	go func() { sent <- h.w.send(writeOp{kind: opSync, weight: maxPendingWeight}) }()
	select {
	case err := <-sent:
		t.Fatalf("a send past the memory limit did not wait for the writer: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.cancel()
	select {
	case err := <-sent:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errStoppedWhileFull) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("send after a stop on a full disk: %v, want the stop, the full disk and context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stop on a full disk waited for disk space")
	}
	// Capture, no longer held up, closes the writer.
	closed := make(chan error, 1)
	go func() { closed <- h.w.close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, errStoppedWhileFull) || !errors.Is(err, context.Canceled) {
			t.Fatalf("close after a stop on a full disk: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not close")
	}
	if d := h.w.Durable(); d >= 100 {
		t.Fatalf("durable %s after a commit that never happened", d)
	}
}

func TestWriterFailureFailsEverySync(t *testing.T) {
	h := newWriterHarness(t, false, func(w *queueWriter) {
		w.beforeCommit = func() error { return errors.New("disk on fire") }
	})
	h.appendTxn(100)
	err := h.w.sync(context.Background())
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("sync after a failed commit: %v", err)
	}
	if err := h.w.send(writeOp{kind: opSync}); err == nil {
		t.Fatal("a failed writer accepted an operation")
	}
	if got := h.queued(); len(got) != 0 {
		t.Fatalf("queued %v after a failed commit", got)
	}
}
