package source

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// TestChunkMemoryIsReusedSafely decodes a chunk into the memory of one
// before it, as a backfill does once that chunk is durable: the memory is
// used again, a NULL reads as NULL where the chunk before held a value, and
// the last key that the earlier chunk's progress keeps does not change.
func TestChunkMemoryIsReusedSafely(t *testing.T) {
	rd := newRelationDecoder(typemap.New(), codeRelation(), DefaultMaxValueBytes)
	pool := newChunkPool()
	decode := func(lines ...string) (*chunkReader, *chunkMemory) {
		t.Helper()
		mem := pool.get()
		cr := newChunkReader(rd, 4, mem)
		cr.keyPos = []int{0}
		if _, err := cr.Write([]byte(strings.Join(lines, ""))); err != nil {
			t.Fatal(err)
		}
		mem.keep(cr)
		return cr, mem
	}

	// The first chunk sizes the memory (its lines are the longest); the
	// second is decoded into blocks of that size, the third into the
	// second's.
	_, mem := decode("a1\t1\tone, a longer note\n", "a2\t2\ttwo, a longer note\n", "a3\t3\tthree, a longer note\n")
	pool.put(mem)
	second, again := decode("b1\t10\tten\n", "b2\t20\ttwenty\n", "b3\t30\tthirty\n")
	after, values := second.lastKey(), &again.values[0]
	pool.put(again)

	// Its lines cover where the second chunk's last key was.
	third, last := decode("c1\t\\N\t\\N\n", "c2\t40\t\\N\n", "c3\t50\tfifty\n")
	if last != mem || &last.values[0] != values {
		t.Fatal("the third chunk was not decoded into the memory of the second")
	}
	if got := string(after[0]); got != "b3" {
		t.Fatalf("the second chunk's last key reads %q after the third chunk, want b3", got)
	}
	want := []string{"c1 <nil> <nil>", "c2 40 <nil>", "c3 50 fifty"}
	if len(third.rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(third.rows), len(want))
	}
	for i, c := range third.rows {
		if got := rowText(c.New); got != want[i] {
			t.Errorf("row %d reads %q, want %q", i, got, want[i])
		}
	}
}

// rowText prints the values of a row decoded from the columns of
// TestChunkMemoryIsReusedSafely (text, int8, text).
func rowText(vals []store.Value) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch v.Kind {
		case store.KindNull:
			parts[i] = "<nil>"
		case store.KindInt64:
			parts[i] = fmt.Sprint(v.Int)
		default:
			parts[i] = string(v.Bytes)
		}
	}
	return strings.Join(parts, " ")
}

// TestWriterRecyclesOnlyWhatIsDurable checks that the writer gives a
// chunk's memory back once its write is committed, not before: not while a
// full disk holds the commit back (the write is applied again from that
// memory), and never when the write fails.
func TestWriterRecyclesOnlyWhatIsDurable(t *testing.T) {
	var full atomic.Bool
	var attempts atomic.Int64
	full.Store(true)
	h := newWriterHarness(t, false, func(w *queueWriter) {
		w.fullDiskPause = 10 * time.Millisecond
		w.beforeCommit = func() error {
			attempts.Add(1)
			if full.Load() {
				return syscall.ENOSPC
			}
			return nil
		}
	})
	var recycled atomic.Int64
	h.sendRecycled(100, func() { recycled.Add(1) })
	for deadline := time.Now().Add(10 * time.Second); attempts.Load() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not retry the full disk")
		}
	}
	whileFull := recycled.Load()
	full.Store(false)
	if whileFull != 0 {
		t.Fatalf("the memory came back %d times while the disk was full", whileFull)
	}
	h.syncTo(100)
	if n := recycled.Load(); n != 1 {
		t.Fatalf("the memory came back %d times once the write was durable, want once", n)
	}

	failing := newWriterHarness(t, false, func(w *queueWriter) {
		w.beforeCommit = func() error { return errors.New("disk on fire") }
	})
	failing.sendRecycled(100, func() { t.Error("the memory of a failed write came back") })
	if err := failing.w.sync(t.Context()); err == nil {
		t.Fatal("sync after a failed commit succeeded")
	}
}

// sendRecycled sends a one-row transaction ending at end, whose memory
// recycle gives back.
func (h *writerHarness) sendRecycled(end store.LSN, recycle func()) {
	h.t.Helper()
	txn := &store.Txn{
		TxnHeader: store.TxnHeader{CommitLSN: end - 1, EndLSN: end, CommitTime: time.Now()},
		Changes: []store.Change{{Op: store.OpSnapshot, Relation: store.RelationKey{OID: 16384, LSN: 1},
			New: []store.Value{{Kind: store.KindInt64, Int: int64(end)}}}},
	}
	if err := h.w.send(writeOp{kind: opAppendTxn, txn: txn, recycle: recycle}); err != nil {
		h.t.Fatal(err)
	}
}
