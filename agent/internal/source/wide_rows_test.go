package source

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// TestWriterHoldsFewWideRows sends changes of 1 MiB values to a writer
// whose commits are held: sends block once about 64 MiB of values wait
// (maxPendingWeight), not once 64Ki changes do, and every change is
// queued once the commits go on.
func TestWriterHoldsFewWideRows(t *testing.T) {
	release := make(chan struct{})
	h := newWriterHarness(t, false, func(w *queueWriter) {
		w.beforeCommit = func() error {
			<-release
			return nil
		}
	})
	value := make([]byte, 1<<20)
	const sends = 80
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range int64(sends) {
			end := store.LSN(i + 2)
			txn := &store.Txn{
				TxnHeader: store.TxnHeader{Xid: uint32(end), CommitLSN: end - 1, EndLSN: end, CommitTime: time.Now()},
				Changes: []store.Change{{Op: store.OpInsert, Relation: store.RelationKey{OID: 16384, LSN: 1},
					New: []store.Value{{Kind: store.KindInt64, Int: int64(end)}, {Kind: store.KindString, Bytes: value}}}},
			}
			if err := h.w.send(writeOp{kind: opAppendTxn, txn: txn}); err != nil {
				t.Error(err)
				return
			}
			sent.Add(1)
		}
	}()
	// Until the sends stop moving.
	for last := int64(-1); sent.Load() != last; time.Sleep(300 * time.Millisecond) {
		last = sent.Load()
	}
	if n := sent.Load(); n > maxPendingWeight/(1+(1<<20)/weightBytes) {
		t.Errorf("%d changes of 1 MiB were taken while nothing was durable, want at most %d (64 MiB)", n, maxPendingWeight/(1+(1<<20)/weightBytes))
	}
	close(release)
	<-done
	h.syncTo(sends + 1)
	if got := len(h.queued()); got != sends {
		t.Fatalf("%d transactions queued, want %d", got, sends)
	}
}

// TestSnapshotSpoolsWideRowsInSmallWrites feeds the initial snapshot's
// reader rows of 100 kB: it sends them to the writer in writes of about
// snapshotChunkBytes of COPY text, not snapshotChunk rows at a time.
func TestSnapshotSpoolsWideRowsInSmallWrites(t *testing.T) {
	rel := &store.Relation{Key: store.RelationKey{OID: 1}, Schema: "public", Name: "t", Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
		{Name: "doc", TypeOID: 25, TypeMod: -1},
	}}
	w := &queueWriter{ops: make(chan writeOp, maxBatchOps)}
	w.cond = sync.NewCond(&w.mu)
	src := &Source{writer: w}
	c := &copyReader{src: src, rd: newRelationDecoder(typemap.New(), rel, DefaultMaxValueBytes), log: slog.New(slog.DiscardHandler), started: time.Now(), lastLog: time.Now()}
	doc := strings.Repeat("x", 100_000)
	const rows = 200
	for i := range rows {
		if _, err := c.Write(fmt.Appendf(nil, "%d\t%s\n", i, doc)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	close(w.ops)
	got := 0
	for op := range w.ops {
		bytes := 0
		for _, ch := range op.changes {
			bytes += len(ch.New[1].Bytes)
		}
		if bytes > snapshotChunkBytes+len(doc) {
			t.Errorf("a write of %d rows holds %d bytes of text, want at most %d", len(op.changes), bytes, snapshotChunkBytes+len(doc))
		}
		got += len(op.changes)
	}
	if got != rows {
		t.Fatalf("%d rows sent, want %d", got, rows)
	}
}

// TestBackfillOfWideRowsKeepsChunksSmall copies a table added later whose
// rows hold 100 kB notes: its chunks hold about backfill.MaxChunkBytes each, not
// the configured rows (the first chunk drops the rows past it, the next
// ones read no more than fit), and the queue replays to the table's rows.
func TestBackfillOfWideRowsKeepsChunksSmall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.addTableB(600)
	h.exec(`UPDATE b SET note = repeat(md5(id::text), 3125)`)
	txns, rels, done := h.copyAndStopStatus("public.b")
	copied := 0
	for _, txn := range txns {
		bytes, rows, widest := 0, 0, 0
		for _, c := range txn.Changes {
			if c.Op == store.OpSnapshot {
				n := store.ValuesBytes(c.New)
				bytes, rows, widest = bytes+n, rows+1, max(widest, n)
			}
		}
		// The row that reaches the bound is the chunk's last.
		if bytes > backfill.MaxChunkBytes+widest {
			t.Errorf("a chunk of %d rows holds %d bytes of values, want at most %d and one row", rows, bytes, backfill.MaxChunkBytes)
		}
		copied += rows
	}
	if copied != 600 || done.Rows != 600 || done.Chunks < 4 {
		t.Errorf("%d rows queued, status %+v; want 600 rows in 4 chunks or more (60 MB in chunks of 16 MiB)", copied, done)
	}
	h.checkReplayed(txns, rels, false)
	t.Logf("%d rows copied in %d chunks", done.Rows, done.Chunks)
}
