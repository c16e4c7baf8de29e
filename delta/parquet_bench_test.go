package delta

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// benchOrdersRows returns n rows of an orders table: long, string,
// decimal(12,2), timestamp, boolean and integer columns, all nullable.
func benchOrdersRows(n int) (*StructType, []Row) {
	st := NewStructType(
		NewField("id", TypeLong, true),
		NewField("label", TypeString, true),
		NewField("amount", DecimalType{Precision: 12, Scale: 2}, true),
		NewField("placed_at", TypeTimestamp, true),
		NewField("paid", TypeBoolean, true),
		NewField("qty", TypeInteger, true),
	)
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make([]Row, n)
	for i := range rows {
		g := int64(i + 1)
		sum := md5.Sum([]byte(strconv.FormatInt(g, 10)))
		rows[i] = Row{g, hex.EncodeToString(sum[:]), NewDecimal(g%1000000, 2),
			epoch.Add(time.Duration(g) * time.Second), g%3 == 0, int32(g % 1000)}
	}
	return st, rows
}

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// BenchmarkWriteDataFileOrders writes 1Mi rows of the orders table per
// iteration in row groups of DefaultRowGroupRows rows. Besides the rate by
// the wall clock it reports the CPU time per row, which other work on the
// machine disturbs less.
func BenchmarkWriteDataFileOrders(b *testing.B) {
	const n = 1024 * 1024
	st, rows := benchOrdersRows(n)
	dir := b.TempDir()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		add, err := WriteDataFile(context.Background(), dir, st, nil, nil, rows, WriteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(filepath.Join(dir, add.Path))
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n*b.N), "cpu-ns/row")
}

// BenchmarkWriteDataFileChangelog writes 256Ki rows of a changelog of the
// orders table per iteration: its columns, the change's metadata, and the
// struct and array columns of the row before and of unchanged columns
// (every tenth row an update that fills them).
func BenchmarkWriteDataFileChangelog(b *testing.B) {
	const n = 256 * 1024
	orders, rows := benchOrdersRows(n)
	st := NewStructType(append(append([]*StructField{}, orders.Fields...),
		NewField("_op", TypeString, false),
		NewField("_lsn", TypeLong, false),
		NewField("_commit_ts", TypeTimestamp, false),
		NewField("_seq", TypeLong, false),
		NewField("_before", NewStructType(orders.Fields...), true),
		NewField("_unchanged", &ArrayType{ElementType: TypeString}, true))...)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, r := range rows {
		op, before, unchanged := "insert", any(nil), any(nil)
		if i%10 == 0 {
			op, before, unchanged = "update", r, []any{"label"}
		}
		rows[i] = append(append(Row{}, r...), op, int64(i/100), at, int64(i%100), before, unchanged)
	}
	dir := b.TempDir()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		add, err := WriteDataFile(context.Background(), dir, st, nil, nil, rows, WriteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(filepath.Join(dir, add.Path))
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n*b.N), "cpu-ns/row")
}
