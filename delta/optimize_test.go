package delta

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// optimizeTable creates a table in column mapping mode name, partitioned
// by day, with a nested column, and commits one small file per version:
// files files spread over two partitions.
func optimizeTable(t *testing.T, files int) (*Table, []time.Time) {
	t.Helper()
	ctx := context.Background()
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("name", TypeString, true),
		NewField("before", NewStructType(NewField("id", TypeLong, true), NewField("tags", &ArrayType{ElementType: TypeString, ContainsNull: true}, true)), true),
		NewField("amount", DecimalType{Precision: 12, Scale: 2}, true),
		NewField("day", TypeDate, false),
	)
	tbl, err := Create(ctx, t.TempDir(), schema, []string{"day"}, nameMode(), nil, WithCheckpointInterval(4))
	if err != nil {
		t.Fatal(err)
	}
	days := []time.Time{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)}
	for i := range files {
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		day := days[i%2]
		var rows []Row
		for j := range 3 {
			id := int64(i*10 + j)
			var name any
			if j != 1 {
				name = fmt.Sprintf("row %d", id)
			}
			rows = append(rows, Row{id, name, Row{id - 1, []any{"a", nil}}, mustDec(t, fmt.Sprintf("%d.%02d", id, j)), day})
		}
		add, err := snap.WriteFile(ctx, map[string]any{"day": day}, rows, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, snap.Version(), []Action{add}); err != nil {
			t.Fatal(err)
		}
	}
	return tbl, days
}

// TestOptimizeKeepsEveryVersionsRows compacts a partitioned table in
// column mapping mode: the small files of each partition become one file
// (dataChange false, operation OPTIMIZE, stats and partition values keyed
// by physical names), every version reads the same rows before and after,
// and the change data of the OPTIMIZE version is empty.
func TestOptimizeKeepsEveryVersionsRows(t *testing.T) {
	ctx := context.Background()
	tbl, _ := optimizeTable(t, 10)
	before := map[int64][]Row{}
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(0); v <= latest; v++ {
		_, before[v] = readAt(t, tbl, v)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Files != 10 || plan.SmallFiles != 10 || len(plan.Bins) != 2 || plan.BinFiles() != 10 {
		t.Fatalf("plan: %d files, %d small, %d bins of %d files; want 10, 10, 2 of 10", plan.Files, plan.SmallFiles, len(plan.Bins), plan.BinFiles())
	}
	var adds []*Add
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	v, bins, err := tbl.CommitOptimize(ctx, plan, plan.Bins, adds, &CommitInfo{EngineInfo: "test"})
	if err != nil || len(bins) != 2 || v != latest+1 {
		t.Fatalf("commit optimize: version %d, %d bins, %v", v, len(bins), err)
	}
	for w := int64(0); w <= latest; w++ {
		_, rows := readAt(t, tbl, w)
		rowstest.AssertSameRows(t, fmt.Sprintf("version %d", w), rows, before[w])
	}
	after, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := after.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "after optimize", rows, before[latest])
	if after.NumFiles() != 2 {
		t.Errorf("%d files after optimize, want 2", after.NumFiles())
	}
	dayPhys := after.Schema().Fields[4].PhysicalName()
	idPhys := after.Schema().Fields[0].PhysicalName()
	for _, f := range after.Files() {
		st, err := ParseStats(f.Stats)
		if err != nil {
			t.Fatal(err)
		}
		if st.NumRecords != 15 || st.MinValues[idPhys] == nil || f.PartitionValues[dayPhys] == nil {
			t.Errorf("file %s: stats %s, partition values %v", f.Path, f.Stats, f.PartitionValues)
		}
	}
	acts, err := tbl.ReadCommit(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	var removes, addsSeen int
	for _, a := range acts {
		switch a := a.(type) {
		case *Add:
			addsSeen++
			if a.DataChange {
				t.Errorf("add %s with dataChange true", a.Path)
			}
		case *Remove:
			removes++
			if a.DataChange {
				t.Errorf("remove %s with dataChange true", a.Path)
			}
		case *CommitInfo:
			if a.Operation != OperationOptimize || a.EngineInfo != "test" {
				t.Errorf("commitInfo %+v", a)
			}
		}
	}
	if removes != 10 || addsSeen != 2 {
		t.Errorf("%d removes and %d adds, want 10 and 2", removes, addsSeen)
	}
	changes, err := tbl.ReadChanges(ctx, v, v)
	if err != nil && !errors.Is(err, ErrChangeDataFeedDisabled) {
		t.Fatal(err)
	}
	if len(changes) != 0 {
		t.Errorf("the OPTIMIZE version reads %d changes", len(changes))
	}
}

// TestOptimizeDropsABinWhoseFilesChanged commits a remove of one file of
// a planned bin before the bin: that bin is dropped (its file deleted)
// and the other committed, and no row comes back.
func TestOptimizeDropsABinWhoseFilesChanged(t *testing.T) {
	ctx := context.Background()
	tbl, _ := optimizeTable(t, 6)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 128 << 20})
	if err != nil || len(plan.Bins) != 2 {
		t.Fatalf("plan: %v, %v", plan, err)
	}
	var adds []*Add
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	gone := plan.Bins[0].Files[1]
	if _, err := tbl.Commit(ctx, snap.Version(), []Action{RemoveOf(gone, 1, true)}); err != nil {
		t.Fatal(err)
	}
	_, want := readAt(t, tbl, snap.Version()+1)
	v, bins, err := tbl.CommitOptimize(ctx, plan, plan.Bins, adds, nil)
	if err != nil || len(bins) != 1 || bins[0] != plan.Bins[1] {
		t.Fatalf("commit optimize: version %d, bins %v, %v", v, bins, err)
	}
	_, got := readAt(t, tbl, v)
	rowstest.AssertSameRows(t, "after optimize", got, want)
	if p, err := ResolvePath(tbl.Path(), adds[0].Path); err != nil {
		t.Fatal(err)
	} else if _, err := readFileIfExists(p); err == nil {
		t.Errorf("the dropped bin's file %s is still there", adds[0].Path)
	}
}

// TestPlanOptimizeKeepsSequencesAndLimits packs sequences given by the
// caller: a file that is not small ends a bin, bins stop at the row
// limit, and bins of one file are left out.
func TestPlanOptimizeKeepsSequencesAndLimits(t *testing.T) {
	file := func(name string, size, rows int64) *Add {
		return &Add{Path: name, Size: size, Stats: fmt.Sprintf(`{"numRecords":%d}`, rows)}
	}
	seq := []*Add{file("a", 10, 10), file("b", 10, 10), file("big", 10, 60), file("c", 10, 10),
		file("d", 10, 40), file("e", 10, 40), file("f", 10, 40), file("g", 10, 5)}
	opts := OptimizeOptions{TargetFileSize: 1000, MaxFileRows: 100, Sequences: func([]*Add) [][]*Add { return [][]*Add{seq} }}
	snap := &Snapshot{table: New(t.TempDir()), metadata: &Metadata{}, files: map[string]*Add{}}
	plan, err := snap.PlanOptimize(opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range plan.Bins {
		s := ""
		for _, f := range b.Files {
			s += f.Path
		}
		got = append(got, s)
	}
	// c+d+e = 90 rows; f would make 130; f+g = 45.
	want := []string{"ab", "cde", "fg"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bins %v, want %v", got, want)
	}

	// A file larger than twice the others of its bin splits it.
	seq = []*Add{file("x", 10, 1), file("y", 10, 1), file("huge", 400, 1), file("z", 100, 1), file("w", 60, 1)}
	plan, err = snap.PlanOptimize(opts)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, b := range plan.Bins {
		s := ""
		for _, f := range b.Files {
			s += f.Path
		}
		got = append(got, s)
	}
	if want := []string{"xy", "zw"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bins %v, want %v", got, want)
	}
}

// readFileIfExists reads a file, failing when it is gone.
func readFileIfExists(path string) ([]byte, error) { return os.ReadFile(path) }

// TestVacuumAfterOptimize vacuums a compacted table: the small files the
// OPTIMIZE version removed stay while a version inside the retention or
// at or after KeepFrom (a replica still missing versions) needs them, and
// are deleted after; the merged files stay, and the latest version reads
// the same rows.
func TestVacuumAfterOptimize(t *testing.T) {
	ctx := context.Background()
	tbl, _ := optimizeTable(t, 6)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, want := readAt(t, tbl, snap.Version())
	plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var adds []*Add
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	v, _, err := tbl.CommitOptimize(ctx, plan, plan.Bins, adds, nil)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(48 * time.Hour)
	keepFrom := func(v int64) func(context.Context) (int64, error) {
		return func(context.Context) (int64, error) { return v, nil }
	}
	for _, opts := range []VacuumOptions{
		{Retention: time.Hour}, // versions inside the retention need them
		{Retention: time.Hour, Now: later, KeepFrom: keepFrom(v - 1)}, // the replica lacks the OPTIMIZE version
	} {
		res, err := tbl.Vacuum(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) != 0 {
			t.Fatalf("vacuum %+v deleted %d files a version it keeps needs", opts, len(res.Files))
		}
	}
	res, err := tbl.Vacuum(ctx, VacuumOptions{Retention: time.Hour, Now: later, KeepFrom: keepFrom(v + 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != plan.BinFiles() {
		t.Errorf("vacuum deleted %d files, want the %d the OPTIMIZE removed", len(res.Files), plan.BinFiles())
	}
	_, got := readAt(t, tbl, v)
	rowstest.AssertSameRows(t, "after vacuum", got, want)
}

// TestRewriteBinHoldsABatchNotAFile compacts two files of 300k rows and
// samples the heap meanwhile: a rewrite holds a batch of rows at a time,
// not a file's, whose rows take some 60 MiB as Go values.
func TestRewriteBinHoldsABatchNotAFile(t *testing.T) {
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("name", TypeString, true))
	tbl, err := Create(ctx, t.TempDir(), schema, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const perFile = 300_000
	for f := range 2 {
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows := make([]Row, perFile)
		for i := range rows {
			id := int64(f*perFile + i)
			rows[i] = Row{id, fmt.Sprintf("%064d", id)}
		}
		add, err := snap.WriteFile(ctx, nil, rows, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, snap.Version(), []Action{add}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Bins) != 1 || len(plan.Bins[0].Files) != 2 {
		t.Fatalf("plan: %d bins, want one of the two files", len(plan.Bins))
	}

	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var most uint64
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			most = max(most, ms.HeapAlloc)
		}
	}()
	add, err := snap.RewriteBin(ctx, plan, plan.Bins[0], RewriteOptions{})
	close(done)
	most := <-peak
	if err != nil {
		t.Fatal(err)
	}
	if n := fileRows(add); n != 2*perFile {
		t.Fatalf("the rewritten file holds %d rows, want %d", n, 2*perFile)
	}
	if grew := int64(most) - int64(base.HeapAlloc); grew > 24<<20 {
		t.Fatalf("the heap grew by %d MiB during the rewrite, want at most 24", grew>>20)
	}
}
