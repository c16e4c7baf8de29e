package parquet

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

	"github.com/lakeside/lakeside/delta/internal/types"
)

// benchOrdersRows returns n rows of an orders table: long, string,
// decimal(12,2), timestamp, boolean and integer columns, all nullable.
func benchOrdersRows(n int) (*types.StructType, []types.Row) {
	st := types.NewStructType(
		types.NewField("id", types.TypeLong, true),
		types.NewField("label", types.TypeString, true),
		types.NewField("amount", types.DecimalType{Precision: 12, Scale: 2}, true),
		types.NewField("placed_at", types.TypeTimestamp, true),
		types.NewField("paid", types.TypeBoolean, true),
		types.NewField("qty", types.TypeInteger, true),
	)
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rows := make([]types.Row, n)
	for i := range rows {
		g := int64(i + 1)
		sum := md5.Sum([]byte(strconv.FormatInt(g, 10)))
		rows[i] = types.Row{g, hex.EncodeToString(sum[:]), types.NewDecimal(g%1000000, 2),
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
		add, err := writeDataFile(context.Background(), dir, st, nil, rows, WriteOptions{})
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
	st := types.NewStructType(append(append([]*types.StructField{}, orders.Fields...),
		types.NewField("_op", types.TypeString, false),
		types.NewField("_lsn", types.TypeLong, false),
		types.NewField("_commit_ts", types.TypeTimestamp, false),
		types.NewField("_seq", types.TypeLong, false),
		types.NewField("_before", types.NewStructType(orders.Fields...), true),
		types.NewField("_unchanged", &types.ArrayType{ElementType: types.TypeString}, true))...)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, r := range rows {
		op, before, unchanged := "insert", any(nil), any(nil)
		if i%10 == 0 {
			op, before, unchanged = "update", r, []any{"label"}
		}
		rows[i] = append(append(types.Row{}, r...), op, int64(i/100), at, int64(i%100), before, unchanged)
	}
	dir := b.TempDir()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		add, err := writeDataFile(context.Background(), dir, st, nil, rows, WriteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(filepath.Join(dir, add.Path))
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n*b.N), "cpu-ns/row")
}
