package applier

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// ordersRelation is a schema version of a table like the one the Delta
// benchmarks of make bench use: a bigint key and a mix of column types.
func ordersRelation() *store.Relation {
	return &store.Relation{Key: store.RelationKey{OID: 16384, LSN: 0x100}, Schema: "public", Name: "orders",
		ReplicaIdentity: 'd', Columns: []store.Column{
			{Name: "id", TypeOID: pgtype.Int8OID, TypeMod: -1, Key: true},
			{Name: "label", TypeOID: 25, TypeMod: -1},
			{Name: "amount", TypeOID: pgtype.NumericOID, TypeMod: (12<<16 | 2) + 4},
			{Name: "placed_at", TypeOID: pgtype.TimestamptzOID, TypeMod: -1},
			{Name: "paid", TypeOID: pgtype.BoolOID, TypeMod: -1},
			{Name: "qty", TypeOID: pgtype.Int4OID, TypeMod: -1},
		}}
}

// ordersValues returns the queued values of row g of the orders table.
func ordersValues(g int64) []store.Value {
	sum := md5.Sum([]byte(strconv.FormatInt(g, 10)))
	paid := int64(0)
	if g%3 == 0 {
		paid = 1
	}
	amount := strconv.FormatFloat(float64(g%1000000)/100, 'f', 2, 64)
	return []store.Value{
		{Kind: store.KindInt64, Int: g},
		{Kind: store.KindString, Bytes: []byte(hex.EncodeToString(sum[:]))},
		{Kind: store.KindNumeric, Bytes: []byte(amount)},
		{Kind: store.KindTimestamp, Int: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() + g*1_000_000},
		{Kind: store.KindBool, Int: paid},
		{Kind: store.KindInt32, Int: g % 1000},
	}
}

// queueOneTxn writes a state file in dir whose queue holds one transaction
// inserting the orders rows with ids 1 to rows, spooled as capture spools a
// large transaction; with truncate, the transaction truncates the table
// first.
func queueOneTxn(tb testing.TB, dir string, rows int64, truncate bool) {
	tb.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	rel := ordersRelation()
	err = db.Update(func(w *store.Writer) error {
		if err := w.PutRelation(rel); err != nil || !truncate {
			return err
		}
		return w.SpoolAppend(store.SpoolID(1000), 1000, []store.Change{{Op: store.OpTruncate, Relation: rel.Key}})
	})
	if err != nil {
		tb.Fatal(err)
	}
	spoolInserts(tb, db, 1000, 1, rows, 0x1001)
}

// spoolInserts queues one transaction, xid, that ends at end and inserts
// the orders rows first to last, streamed: spooled in chunks of
// store.DefaultChunkSize changes, 16 chunks per write, then committed.
func spoolInserts(tb testing.TB, db *store.DB, xid uint32, first, last int64, end store.LSN) {
	tb.Helper()
	rel := ordersRelation()
	for from := first; from <= last; from += store.DefaultChunkSize * 16 {
		err := db.Update(func(w *store.Writer) error {
			for c := from; c < min(from+store.DefaultChunkSize*16, last+1); c += store.DefaultChunkSize {
				chs := make([]store.Change, 0, store.DefaultChunkSize)
				for g := c; g < min(c+store.DefaultChunkSize, last+1); g++ {
					chs = append(chs, store.Change{Op: store.OpInsert, Relation: rel.Key, New: ordersValues(g)})
				}
				if err := w.SpoolAppend(store.SpoolID(xid), xid, chs); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	h := store.TxnHeader{Xid: xid, CommitLSN: end - 1, EndLSN: end, CommitTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	if err := db.Update(func(w *store.Writer) error { return w.SpoolCommit(store.SpoolID(xid), h) }); err != nil {
		tb.Fatal(err)
	}
}

// queueTxns writes a state file in dir whose queue holds txns, with the
// schema version rel.
func queueTxns(tb testing.TB, dir string, rel *store.Relation, txns ...*store.Txn) {
	tb.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(w *store.Writer) error {
		if err := w.PutRelation(rel); err != nil {
			return err
		}
		for _, t := range txns {
			if err := w.AppendTxn(t, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// returnsRelation is a second table shaped like orders.
func returnsRelation() *store.Relation {
	r := ordersRelation()
	r.Key.OID, r.Name = r.Key.OID+1, "returns"
	return r
}

// openRelations returns an open state file whose schema history holds rels
// and whose queue is empty, and its directory; the test's end closes it.
func openRelations(t *testing.T, rels ...*store.Relation) (*store.DB, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(w *store.Writer) error {
		for _, r := range rels {
			if err := w.PutRelation(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db, dir
}

// openQueued returns an open state file whose queue holds txns, with the
// schema version rel, and its directory; the test's end closes it.
func openQueued(t *testing.T, rel *store.Relation, txns ...*store.Txn) (*store.DB, string) {
	t.Helper()
	dir := t.TempDir()
	queueTxns(t, dir, rel, txns...)
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, dir
}

// BenchmarkApplyLargeTransaction applies one transaction of 1M inserted
// rows (LAKESIDE_BENCH_ROWS overrides the count) to new tables: the apply
// stage of the end-to-end benchmark, without PostgreSQL and capture.
func BenchmarkApplyLargeTransaction(b *testing.B) {
	benchmarkApplyOneTxn(b, false)
}

// BenchmarkApplyReload applies one transaction that truncates the table and
// inserts 1M rows (LAKESIDE_BENCH_ROWS overrides the count), as a nightly
// reload does, and as a resync's first chunks follow its truncate.
func BenchmarkApplyReload(b *testing.B) {
	benchmarkApplyOneTxn(b, true)
}

// benchmarkApplyOneTxn applies the transaction queueOneTxn queues to new
// tables and reports the rows applied per second.
func benchmarkApplyOneTxn(b *testing.B, truncate bool) {
	rows := int64(1_000_000)
	if s := os.Getenv("LAKESIDE_BENCH_ROWS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	template := b.TempDir()
	queueOneTxn(b, template, rows, truncate)
	applyQueued(b, filepath.Join(template, store.FileName), 0)
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkSteadyFlushes applies 30 flushes of 2000 single-row inserting
// transactions each, as the applier sees 2k transactions a second with a
// flush interval of 1 s, and reports the time per flush.
func BenchmarkSteadyFlushes(b *testing.B) {
	const flushes, perFlush = 30, 2000
	applyQueued(b, queueSingleRowTxns(b, flushes*perFlush, time.Millisecond/2), perFlush)
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*flushes), "ms/flush")
}

// applyQueued times, per b.Loop, applying the state file at queued (a
// copy of it each time) with flushes of flushChanges (zero: the default).
// The copy is made file to file: held in memory, a large queue would count
// against a memory limit (GOMEMLIMIT, which the agent sets) as the agent's
// own queue, in its file, does not. Besides the time it reports the CPU
// time of the process while applying (cpu-ms/op), which other work on the
// machine disturbs less.
func applyQueued(b *testing.B, queued string, flushChanges int) {
	var cpu time.Duration
	defer func() { b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op") }()
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		if err := copyFile(queued, filepath.Join(dir, store.FileName)); err != nil {
			b.Fatal(err)
		}
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		a := New(Config{TablesDir: filepath.Join(dir, "tables"), FlushChanges: flushChanges,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
		if err := a.start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		before := processCPU(b)
		if err := a.applyAll(context.Background()); err != nil {
			b.Fatal(err)
		}
		cpu += processCPU(b) - before
		b.StopTimer()
		db.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
}

// BenchmarkApplyBacklog applies 100k single-row inserting transactions in
// one flush: the apply stage of the end-to-end benchmark's backlog of small
// transactions, without PostgreSQL and capture.
func BenchmarkApplyBacklog(b *testing.B) {
	const txnCount = 100_000
	applyQueued(b, queueSingleRowTxns(b, txnCount, 10*time.Microsecond), 0)
	b.ReportMetric(float64(txnCount)*float64(b.N)/b.Elapsed().Seconds(), "txns/s")
}

// queueSingleRowTxns returns the path of a state file whose queue holds n
// transactions, each inserting one orders row, committed spacing apart.
func queueSingleRowTxns(b *testing.B, n int64, spacing time.Duration) string {
	b.Helper()
	rel := ordersRelation()
	txns := make([]*store.Txn, 0, n)
	for g := int64(1); g <= n; g++ {
		txns = append(txns, &store.Txn{
			TxnHeader: store.TxnHeader{Xid: uint32(g), CommitLSN: store.LSN(g << 8), EndLSN: store.LSN(g<<8 + 1),
				CommitTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(g) * spacing)},
			Changes: []store.Change{{Op: store.OpInsert, Relation: rel.Key, New: ordersValues(g)}},
		})
	}
	template := b.TempDir()
	queueTxns(b, template, rel, txns...)
	return filepath.Join(template, store.FileName)
}

// copyFile copies the file at from to a new file at to.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
