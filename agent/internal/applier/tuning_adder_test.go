package applier

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestFlushAddsAcrossASchemaChange: a flush whose batch has a schema
// version that adds a column after many changes of the version before it
// (the adder's goroutine is still adding them while the column is added)
// gives every row of the new version its value and the older rows null.
// Under the race detector it also checks that the column is added only
// once the adder is idle.
func TestFlushAddsAcrossASchemaChange(t *testing.T) {
	ctx := context.Background()
	v1 := ordersRelation()
	v2 := ordersRelation()
	v2.Key.LSN = 0x5000
	v2.Columns = append(v2.Columns, store.Column{Name: "note", TypeOID: 25, TypeMod: -1})
	db, dir := openRelations(t, v1, v2)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	first := &store.Txn{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x4000, EndLSN: 0x4001, CommitTime: at}}
	for id := int64(1); id <= 3000; id++ {
		first.Changes = append(first.Changes, store.Change{Op: store.OpInsert, Relation: v1.Key, New: ordersValues(id)})
	}
	second := &store.Txn{TxnHeader: store.TxnHeader{Xid: 2, CommitLSN: 0x6000, EndLSN: 0x6001, CommitTime: at.Add(time.Second)}}
	for id := int64(3001); id <= 3100; id++ {
		vals := append(ordersValues(id), store.Value{Kind: store.KindString, Bytes: []byte("new")})
		second.Changes = append(second.Changes, store.Change{Op: store.OpInsert, Relation: v2.Key, New: vals})
	}
	err := db.Update(func(w *store.Writer) error {
		if err := w.AppendTxn(first, 0); err != nil {
			return err
		}
		return w.AppendTxn(second, 0)
	})
	if err != nil {
		t.Fatal(err)
	}
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.flush(ctx, second.EndLSN); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"public.orders", "public.orders_changes"} {
		rows := readTable(t, filepath.Join(tablesDir, table), "id")
		if len(rows) != 3100 {
			t.Fatalf("%s holds %d rows, want 3100", table, len(rows))
		}
		for _, r := range rows {
			id, note := r.get("id").(int64), r.get("note")
			if want := any(nil); id <= 3000 && note != want || id > 3000 && note != "new" {
				t.Fatalf("%s: row %d has note %v", table, id, note)
			}
		}
	}
}

// TestFlushFailsWhenAddingFails: a change that cannot be added (here, the
// mirror's pending set cannot spill) fails its table, which commits
// nothing and falls behind; once the cause is gone, the table's retry
// applies the batch.
func TestFlushFailsWhenAddingFails(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns...)
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, MergeMemoryKeys: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	spill := spillDir(tablesDir, "public.orders")
	if err := os.MkdirAll(filepath.Dir(spill), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spill, []byte("in the way"), 0o640); err != nil {
		t.Fatal(err)
	}
	err := a.flush(ctx, txns[2].EndLSN)
	if err == nil || !strings.Contains(err.Error(), "spill") {
		t.Fatalf("flush with a spill directory that is a file returned %v, want a spill error", err)
	}
	if l := appliedPosition(t, db); l != 0 {
		t.Fatalf("applied position %s after a failed flush, want nothing applied", l)
	}
	for _, st := range a.Tables() {
		if st.Version > 0 {
			t.Fatalf("%s has version %d after a failed flush: something was committed", st.Name, st.Version)
		}
	}
	if f := a.Failures(); len(f) != 1 || f[0].Table != "public.orders" || !strings.Contains(f[0].Err.Error(), "spill") {
		t.Fatalf("failures %+v, want public.orders failing to spill", f)
	}
	if err := os.Remove(spill); err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return time.Now().Add(time.Hour) } // the retry is due
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	if f := a.Failures(); len(f) != 0 {
		t.Fatalf("failures %+v after the retry", f)
	}
	checkReadAheadTables(t, tablesDir)
}

// TestFlushRecyclesTheQueuesMemory: a flush of a large streamed insert
// decodes the queue's chunks into memory that the adder hands back once it
// has added their changes, instead of into new memory for each chunk (each
// row's six values take 384 bytes as decoded, its change 80 more). The
// second of two flushes of 100k rows, in files of 10k rows, allocated 540
// bytes per row so, and 1390 when each chunk was decoded into new memory.
// The tables hold every row.
func TestFlushRecyclesTheQueuesMemory(t *testing.T) {
	const rows = 100_000
	ctx := context.Background()
	db, dir := openRelations(t, ordersRelation())
	tablesDir := filepath.Join(dir, "tables")
	a := New(Config{TablesDir: tablesDir, TargetFileRows: rows / 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	var perRow uint64
	for i := range int64(2) {
		spoolInserts(t, db, uint32(1000+i), 1+i*rows, (i+1)*rows, store.LSN(0x1001+i*0x1000))
		perRow = applyAllocating(t, a) / rows
	}
	// (Under the race detector, which allocates for itself, only the
	// rows are checked.)
	if perRow > 900 && !raceEnabled {
		t.Errorf("the second flush allocated %d bytes per row", perRow)
	}
	for _, table := range []string{"public.orders", "public.orders_changes"} {
		if n := len(readTable(t, filepath.Join(tablesDir, table), "id")); n != 2*rows {
			t.Fatalf("%s holds %d rows, want %d", table, n, 2*rows)
		}
	}
}

// applyAllocating applies what a has queued and returns the bytes allocated
// meanwhile.
func applyAllocating(t *testing.T, a *Applier) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := a.applyAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestAdderHandsOverByBytes queues changes holding 1 MiB of converted
// values each: a batch is handed over once it holds additionBytes of
// them, long before additionBatch changes.
func TestAdderHandsOverByBytes(t *testing.T) {
	d := &adder{work: make(chan []addition, 4), free: make(chan []addition, 6), batch: make([]addition, 0, additionBatch)}
	st := &sourceTable{}
	n := 0
	for len(d.work) == 0 && n < additionBatch {
		d.queue(addition{st: st, size: 1 << 20})
		n++
	}
	if len(d.work) == 0 || n != additionBytes>>20 {
		t.Fatalf("handed over after %d changes of 1 MiB, want %d", n, additionBytes>>20)
	}
	if batch := <-d.work; len(batch) != n {
		t.Fatalf("the batch holds %d changes, want %d", len(batch), n)
	}
	// Small changes fill a batch by count.
	for range additionBatch {
		d.queue(addition{st: st, size: 10})
	}
	if batch := <-d.work; len(batch) != additionBatch {
		t.Fatalf("a batch of small changes holds %d, want %d", len(batch), additionBatch)
	}
}
