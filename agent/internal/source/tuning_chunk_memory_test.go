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

// TestCopyDecoderReusesMemorySafely decodes rows of COPY text into the
// memory of rows decoded before, as a backfill's chunk is once the chunk
// before it is durable (backfill/tuning_chunk_memory.go): the values are
// decoded into that memory, a NULL reads as NULL where the rows before
// held a value, and Size counts what the rows take.
func TestCopyDecoderReusesMemorySafely(t *testing.T) {
	cat := &backfillCatalog{s: &Source{}, types: typemap.New()}
	values, lines := make([]store.Value, 6), make([]byte, 0, 256)
	decode := func(rows ...string) [][]store.Value {
		t.Helper()
		dec := cat.Decoder(codeRelation(), values, lines)
		var out [][]store.Value
		for _, row := range rows {
			vals, err := dec.Decode([]byte(row), nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, vals)
		}
		if n, bytes := dec.Size(); n != 3*len(rows) || bytes == 0 {
			t.Errorf("Size says %d values and %d bytes of lines, want %d values", n, bytes, 3*len(rows))
		}
		return out
	}
	decode("a1\t1\tone, a longer note", "a2\t2\ttwo, a longer note")
	again := decode("b1\t\\N\t\\N", "b2\t20\t\\N")
	if &again[0][0] != &values[0] || &again[1][0] != &values[3] {
		t.Fatal("the rows were not decoded into the memory given")
	}
	for i, want := range []string{"b1 <nil> <nil>", "b2 20 <nil>"} {
		if got := rowText(again[i]); got != want {
			t.Errorf("row %d reads %q, want %q", i, got, want)
		}
	}
}

// rowText prints the values of a row decoded from the columns of
// codeRelation (text, int8, text).
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
