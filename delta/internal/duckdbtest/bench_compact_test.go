//go:build bench

package duckdbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
)

// benchChangelogSchema is a changelog's kind of schema: data columns, the
// change's metadata and a date partition.
func benchChangelogSchema() *delta.StructType {
	return delta.NewStructType(
		delta.NewField("id", delta.TypeLong, true),
		delta.NewField("label", delta.TypeString, true),
		delta.NewField("amount", delta.DecimalType{Precision: 12, Scale: 2}, true),
		delta.NewField("qty", delta.TypeInteger, true),
		delta.NewField("_op", delta.TypeString, false),
		delta.NewField("_lsn", delta.TypeLong, false),
		delta.NewField("_commit_ts", delta.TypeTimestamp, false),
		delta.NewField("_commit_date", delta.TypeDate, false),
	)
}

// benchTable creates a table of commits commits of one small file of
// rowsPerCommit rows each, all in one day's partition, with a checkpoint
// every 100 versions, and returns it.
func benchTable(t *testing.T, commits, rowsPerCommit int) *delta.Table {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	tbl, err := delta.Create(ctx, dir, benchChangelogSchema(), []string{"_commit_date"},
		map[string]string{delta.ColumnMappingModeKey: delta.ColumnMappingName}, nil, delta.WithCheckpointInterval(100))
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := int64(0)
	for c := range commits {
		rows := make([]delta.Row, rowsPerCommit)
		at := day.Add(time.Duration(c) * time.Second)
		for i := range rows {
			id++
			amount, err := delta.ParseDecimal(fmt.Sprintf("%d.%02d", id%100000, id%100))
			if err != nil {
				t.Fatal(err)
			}
			rows[i] = delta.Row{id, fmt.Sprintf("label %x", id*2654435761), amount, int32(id % 1000), "insert", int64(c + 1), at, day}
		}
		add, err := snap.WriteFile(ctx, map[string]any{"_commit_date": day}, rows, delta.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, int64(c), []delta.Action{add}); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}

// duckQuery runs a query on a fresh DuckDB and returns its time and its
// one row's values as text.
func duckQuery(t *testing.T, q string, threads int) (time.Duration, string) {
	t.Helper()
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if threads > 0 {
		if _, err := db.Exec(fmt.Sprintf("SET threads = %d", threads)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	rs, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out string
	cols, _ := rs.Columns()
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = fmt.Sprint(vals...)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start), out
}

// filesList returns the local paths of the snapshot's files, quoted for
// DuckDB's read_parquet.
func filesList(t *testing.T, tbl *delta.Table, snap *delta.Snapshot) string {
	t.Helper()
	var files []string
	for _, f := range snap.Files() {
		p, err := delta.ResolvePath(tbl.Path(), f.Path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, sqlString(p))
	}
	return strings.Join(files, ", ")
}

// TestBenchCompaction measures compaction against DuckDB and what it buys
// a reader.
//
// Throughput: the bins of a table of 4,000 small files (a changelog's
// kind of rows, 100 per file) are rewritten by delta's RewriteBin and by
// DuckDB (COPY (SELECT * FROM read_parquet([bin's files])) TO a snappy
// Parquet file, per bin), on one thread each and on DuckDB's default
// threads; MB/s counts the bins' input bytes.
//
// Reader: a simulated day of 1-second commits, scaled to 8,640 commits (a
// tenth of a day, one small file of 5 rows each), read by DuckDB over the
// files of the latest version (a count and a sum, the file list from the
// Delta log as a Delta reader plans it), before and after one compaction;
// the snapshot's load time (log replay from the last checkpoint) is given
// too.
func TestBenchCompaction(t *testing.T) {
	ctx := context.Background()
	fmt.Println()

	// Throughput.
	tbl := benchTable(t, 4000, 100)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := snap.PlanOptimize(delta.OptimizeOptions{TargetFileSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var in, out int64
	start := time.Now()
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, delta.RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		in += b.Bytes
		out += add.Size
		tbl.RemoveUncommitted(add)
	}
	ours := time.Since(start)
	dir := t.TempDir()
	duck := func(threads int) time.Duration {
		var total time.Duration
		for i, b := range plan.Bins {
			var files []string
			for _, f := range b.Files {
				p, err := delta.ResolvePath(tbl.Path(), f.Path)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, sqlString(p))
			}
			target := filepath.Join(dir, fmt.Sprintf("bin-%d-%d.parquet", threads, i))
			took, _ := duckQuery(t, fmt.Sprintf("COPY (SELECT * FROM read_parquet([%s])) TO %s (FORMAT parquet, COMPRESSION snappy)",
				strings.Join(files, ", "), sqlString(target)), threads)
			total += took
			os.Remove(target)
		}
		return total
	}
	duck1, duckN := duck(1), duck(0)
	mbps := func(d time.Duration) float64 { return float64(in) / (1 << 20) / d.Seconds() }
	fmt.Printf("BENCH compaction throughput: %d files, %d bins, %.1f MB in, %.1f MB out: ours %.1f MB/s (%v); DuckDB 1 thread %.1f MB/s (%v), default threads %.1f MB/s (%v); ours / DuckDB 1 thread %.2f, / default %.2f\n",
		plan.BinFiles(), len(plan.Bins), float64(in)/(1<<20), float64(out)/(1<<20), mbps(ours), ours.Round(time.Millisecond),
		mbps(duck1), duck1.Round(time.Millisecond), mbps(duckN), duckN.Round(time.Millisecond),
		duck1.Seconds()/ours.Seconds(), duckN.Seconds()/ours.Seconds())

	// Reader after a simulated day.
	const commits = 8640
	start = time.Now()
	day := benchTable(t, commits, 5)
	wrote := time.Since(start)
	read := func(what string) (time.Duration, time.Duration, int) {
		start := time.Now()
		snap, err := day.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		load := time.Since(start)
		q := fmt.Sprintf("SELECT count(*), sum(%s) FROM read_parquet([%s])", sqlIdent(snap.Schema().Fields[3].PhysicalName()), filesList(t, day, snap))
		took, res := duckQuery(t, q, 0)
		if res != fmt.Sprint(int64(commits*5), benchSum(commits*5)) {
			t.Fatalf("%s: DuckDB reads %s", what, res)
		}
		return load, took, snap.NumFiles()
	}
	loadBefore, before, filesBefore := read("before")
	snap, err = day.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err = snap.PlanOptimize(delta.OptimizeOptions{TargetFileSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var adds []*delta.Add
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, delta.RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	v, _, err := day.CommitOptimize(ctx, plan, plan.Bins, adds, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := day.Checkpoint(ctx, v); err != nil {
		t.Fatal(err)
	}
	compacted := time.Since(start)
	loadAfter, after, filesAfter := read("after")
	fmt.Printf("BENCH reader after a simulated day (%d one-second commits of 5 rows, a tenth of a day; written in %v): DuckDB count and sum over %d files %v, over %d files after compaction %v (compaction took %v); before / after %.1f; snapshot load %v before, %v after\n",
		commits, wrote.Round(time.Millisecond), filesBefore, before.Round(time.Millisecond), filesAfter, after.Round(time.Millisecond),
		compacted.Round(time.Millisecond), before.Seconds()/after.Seconds(), loadBefore.Round(time.Millisecond), loadAfter.Round(time.Millisecond))
}

// benchSum is the sum of qty over the first n rows of benchTable.
func benchSum(n int) int64 {
	var s int64
	for id := int64(1); id <= int64(n); id++ {
		s += id % 1000
	}
	return s
}
