package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// dvTable is a table written by this package whose rows are deleted with
// deletion vectors: file a holds ids 0..99 in partition "a", in row groups
// of 16 rows, and file b ids 100..109 in partition "b".
type dvTable struct {
	tbl  *Table
	dir  string
	a, b *Add
}

func newDVTable(t *testing.T, configuration map[string]string) *dvTable {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("name", TypeString, true), NewField("p", TypeString, true))
	tbl, err := Create(ctx, dir, schema, []string{"p"}, configuration, nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p string, from, to int64) *Add {
		var rows []Row
		for id := from; id < to; id++ {
			rows = append(rows, Row{id, fmt.Sprintf("n%d", id), p})
		}
		add, err := WriteDataFile(ctx, dir, schema, []string{"p"}, map[string]any{"p": p}, rows, WriteOptions{RowGroupRows: 16})
		if err != nil {
			t.Fatal(err)
		}
		return add
	}
	d := &dvTable{tbl: tbl, dir: dir, a: write("a", 0, 100), b: write("b", 100, 110)}
	if _, err := tbl.Commit(ctx, 0, []Action{&CommitInfo{Operation: "WRITE"}, d.a, d.b}); err != nil {
		t.Fatal(err)
	}
	return d
}

// rowsWithout returns the table's rows of ids 0..109 but those deleted.
func rowsWithout(deleted ...int64) []Row {
	var out []Row
	for id := range int64(110) {
		if slices.Contains(deleted, id) {
			continue
		}
		p := "a"
		if id >= 100 {
			p = "b"
		}
		out = append(out, Row{id, fmt.Sprintf("n%d", id), p})
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestDeleteRowsWithDeletionVectors writes a table, turns deletion vectors
// on, deletes rows of one file with an inline deletion vector, then more
// of it and every row of the other with deletion vectors in a file, and
// reads back the rows left at every version, through a checkpoint, per
// file (ReadDataFile) and as the change data feed.
func TestDeleteRowsWithDeletionVectors(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, map[string]string{EnableChangeDataFeedKey: "true"})
	snap, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if DeletionVectorsEnabled(snap.Protocol(), snap.Metadata()) {
		t.Fatal("deletion vectors enabled on a new table")
	}
	proto, md, err := EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 1, []Action{proto, md}); err != nil {
		t.Fatal(err)
	}

	// v3: ids 0, 17, 33 and 99 of file a, inline.
	first := []int64{0, 17, 33, 99}
	dv1 := NewDeletionVector(0, 17, 33, 99)
	descs, err := StoreDeletionVectors(d.dir, []*DeletionVector{dv1}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if descs[0].StorageType != DeletionVectorStorageInline {
		t.Fatalf("storage %q", descs[0].StorageType)
	}
	rmA, a1, err := DeletionVectorActions(d.a, descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if rmA.DeletionVector != nil || a1.Path != d.a.Path || !strings.Contains(a1.Stats, `"tightBounds":false`) ||
		!strings.Contains(a1.Stats, `"numRecords":100`) {
		t.Errorf("actions: remove %+v, add %+v", rmA, a1)
	}
	if _, err := d.tbl.Commit(ctx, 2, []Action{rmA, a1}); err != nil {
		t.Fatal(err)
	}
	// An inline deletion vector has no offset in the log.
	log3, err := os.ReadFile(filepath.Join(d.dir, LogDirName, CommitFileName(3)))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(log3)), "\n") {
		var l map[string]map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if add, ok := l["add"]; ok {
			var dv map[string]any
			if err := json.Unmarshal(add["deletionVector"], &dv); err != nil {
				t.Fatal(err)
			}
			if _, ok := dv["offset"]; ok || dv["storageType"] != "i" || dv["pathOrInlineDv"] != descs[0].PathOrInlineDv {
				t.Errorf("inline deletion vector in the log: %v", dv)
			}
		}
	}

	// v4: ids 1..15 more of file a, and all of file b, in one file.
	dv2 := dv1.Clone()
	dv2.Or(NewDeletionVector(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
	dvB := NewDeletionVector(0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	descs, err = StoreDeletionVectors(d.dir, []*DeletionVector{dv2, dvB}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rmA1, a2, err := DeletionVectorActions(a1, descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	rmB, b1, err := DeletionVectorActions(d.b, descs[1], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if b1 != nil || rmA1.DeletionVector.UniqueID() != a1.DeletionVector.UniqueID() {
		t.Errorf("remove %+v, add of an emptied file %+v", rmA1, b1)
	}
	// The add before the remove: their order in a commit does not count.
	if _, err := d.tbl.Commit(ctx, 3, []Action{a2, rmA1, rmB}); err != nil {
		t.Fatal(err)
	}

	second := append(slices.Clone(first), span(1, 16)...)
	want := map[int64][]Row{
		1: rowsWithout(),
		2: rowsWithout(),
		3: rowsWithout(first...),
		4: rowsWithout(append(slices.Clone(second), span(100, 110)...)...),
	}
	check := func(label string, tbl *Table) {
		t.Helper()
		for v, rows := range want {
			s, err := tbl.SnapshotAt(ctx, v)
			if err != nil {
				t.Fatalf("%s v%d: %v", label, v, err)
			}
			got, err := s.ReadRows(ctx)
			if err != nil {
				t.Fatalf("%s v%d: %v", label, v, err)
			}
			rowstest.AssertSameRows(t, fmt.Sprintf("%s v%d", label, v), got, rows)
		}
	}
	check("commits", d.tbl)
	latest, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before, beforeTombs := logicalFiles(latest), tombstoneKeys(latest)
	if !strings.Contains(beforeTombs, "i") {
		t.Errorf("no tombstone with the inline deletion vector:\n%s", beforeTombs)
	}
	if err := d.tbl.Checkpoint(ctx, 4); err != nil {
		t.Fatal(err)
	}
	fromCP, err := New(d.dir).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after := logicalFiles(fromCP); after != before {
		t.Errorf("checkpoint: files\n%s\nwant\n%s", after, before)
	}
	if after := tombstoneKeys(fromCP); after != beforeTombs {
		t.Errorf("checkpoint: tombstones\n%s\nwant\n%s", after, beforeTombs)
	}
	check("checkpoint", New(d.dir))

	// One file at a time, without partition values.
	rows, err := ReadDataFile(ctx, d.dir, a2, NewStructType(NewField("id", TypeLong, false)))
	if err != nil {
		t.Fatal(err)
	}
	var wantA []Row
	for id := range int64(100) {
		if !slices.Contains(second, id) {
			wantA = append(wantA, Row{id})
		}
	}
	rowstest.AssertSameRows(t, "ReadDataFile", rows, wantA)

	// The change data feed: the rows each deletion vector adds, deleted.
	changes, err := d.tbl.ReadChanges(ctx, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	var deletes = map[int64][]Row{}
	for _, c := range changes {
		if c.Type != ChangeDelete {
			t.Errorf("v%d: change %s of %v", c.Version, c.Type, c.Row)
		}
		deletes[c.Version] = append(deletes[c.Version], c.Row)
	}
	onlyIDs := func(ids ...int64) []Row {
		var out []Row
		for _, r := range rowsWithout() {
			if slices.Contains(ids, r[0].(int64)) {
				out = append(out, r)
			}
		}
		return out
	}
	rowstest.AssertSameRows(t, "changes v3", deletes[3], onlyIDs(first...))
	rowstest.AssertSameRows(t, "changes v4", deletes[4], onlyIDs(append(span(1, 16), span(100, 110)...)...))
}

// TestDeletionVectorUndeleteChanges reads the change data feed of a
// version that replaces a file's deletion vector by one deleting fewer
// rows: the rows only the old one deleted are inserts.
func TestDeletionVectorUndeleteChanges(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, map[string]string{EnableChangeDataFeedKey: "true", EnableDeletionVectorsKey: "true"})
	snap, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proto, err := DeletionVectorsProtocol(snap.Protocol())
	if err != nil {
		t.Fatal(err)
	}
	descs, err := StoreDeletionVectors(d.dir, []*DeletionVector{NewDeletionVector(5, 6, 7), NewDeletionVector(6, 50)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rm, a1, err := DeletionVectorActions(d.a, descs[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 1, []Action{proto, rm, a1}); err != nil {
		t.Fatal(err)
	}
	rm, a2, err := DeletionVectorActions(a1, descs[1], 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 2, []Action{rm, a2}); err != nil {
		t.Fatal(err)
	}
	changes, err := d.tbl.ReadChanges(ctx, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %d", c.Type, c.Row[0]))
	}
	slices.Sort(got)
	if want := []string{"delete 50", "insert 5", "insert 7"}; !slices.Equal(got, want) {
		t.Errorf("changes %v, want %v", got, want)
	}
}

// TestDeletionVectorsProtocol checks the protocol that supports deletion
// vectors for tables at each kind of protocol: the features the old
// versions implied are listed, column mapping stays in force, and the
// change data feed stays respected.
func TestDeletionVectorsProtocol(t *testing.T) {
	cases := []struct {
		in             *Protocol
		reader, writer []string
	}{
		{DefaultProtocol(), []string{"deletionVectors"}, []string{"appendOnly", "invariants", "deletionVectors"}},
		{&Protocol{MinReaderVersion: 1, MinWriterVersion: 4}, []string{"deletionVectors"},
			[]string{"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "deletionVectors"}},
		{&Protocol{MinReaderVersion: 2, MinWriterVersion: 5}, []string{"columnMapping", "deletionVectors"},
			[]string{"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "columnMapping", "deletionVectors"}},
		{&Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"changeDataFeed"}},
			[]string{"deletionVectors"}, []string{"changeDataFeed", "deletionVectors"}},
		{&Protocol{MinReaderVersion: 2, MinWriterVersion: 7, WriterFeatures: []string{"columnMapping"}},
			[]string{"columnMapping", "deletionVectors"}, []string{"columnMapping", "deletionVectors"}},
		{&Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"timestampNtz"}, WriterFeatures: []string{"timestampNtz"}},
			[]string{"timestampNtz", "deletionVectors"}, []string{"timestampNtz", "deletionVectors"}},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%d/%d %v", c.in.MinReaderVersion, c.in.MinWriterVersion, c.in.WriterFeatures)
		p, err := DeletionVectorsProtocol(c.in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.MinReaderVersion != 3 || p.MinWriterVersion != 7 || !slices.Equal(p.ReaderFeatures, c.reader) || !slices.Equal(p.WriterFeatures, c.writer) {
			t.Errorf("%s: %+v, want readers %v writers %v", name, p, c.reader, c.writer)
		}
		if !SupportsDeletionVectors(p) {
			t.Errorf("%s: not supported", name)
		}
		if again, err := DeletionVectorsProtocol(p); err != nil || again != p {
			t.Errorf("%s: raised again: %+v %v", name, again, err)
		}
		if ChangeDataFeedProtocol(p) != p && slices.Contains(c.writer, ChangeDataFeedFeature) {
			t.Errorf("%s: the change data feed is no longer covered", name)
		}
		md := &Metadata{Configuration: map[string]string{ColumnMappingModeKey: ColumnMappingName}}
		if ColumnMappingMode(c.in, md) != ColumnMappingMode(p, md) {
			t.Errorf("%s: column mapping mode %q became %q", name, ColumnMappingMode(c.in, md), ColumnMappingMode(p, md))
		}
	}
	if _, err := DeletionVectorsProtocol(&Protocol{MinReaderVersion: 3, MinWriterVersion: 5}); err == nil {
		t.Error("reader 3 without writer 7 accepted")
	}
	p, err := DeletionVectorsProtocol(DefaultProtocol())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["appendOnly","invariants","deletionVectors"]}`; string(data) != want {
		t.Errorf("protocol %s", data)
	}
}

// TestWithDeletionVectorStats checks the stats of an add with a deletion
// vector: tightBounds false, the other fields kept in order, and numRecords
// required.
func TestWithDeletionVectorStats(t *testing.T) {
	d := &DeletionVectorDescriptor{StorageType: DeletionVectorStorageInline, PathOrInlineDv: "x", Cardinality: 2}
	a := &Add{Path: "f.parquet", Stats: `{"numRecords":10,"minValues":{"id":1},"tightBounds":true,"maxValues":{"id":9}}`, DataChange: false}
	got, err := a.WithDeletionVector(d)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"numRecords":10,"minValues":{"id":1},"maxValues":{"id":9},"tightBounds":false}`; got.Stats != want {
		t.Errorf("stats %s, want %s", got.Stats, want)
	}
	if !got.DataChange || got.DeletionVector == d || got.DeletionVector.UniqueID() != d.UniqueID() || a.DeletionVector != nil {
		t.Errorf("add %+v", got)
	}
	for _, stats := range []string{"", `{"minValues":{}}`, `[1]`} {
		if _, err := (&Add{Path: "f", Stats: stats}).WithDeletionVector(d); err == nil {
			t.Errorf("stats %q accepted", stats)
		}
	}
	d.Cardinality = 11
	if _, err := a.WithDeletionVector(d); err == nil {
		t.Error("more rows deleted than the file has")
	}
}

// TestVacuumDeletionVectorFilesWritten vacuums a table whose file got a
// deletion vector in a file, then another: past the retention the first
// file goes, the one in use stays, and the table reads.
func TestVacuumDeletionVectorFilesWritten(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, nil)
	snap, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proto, md, err := EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	version, err := d.tbl.Commit(ctx, 1, []Action{proto, md})
	if err != nil {
		t.Fatal(err)
	}
	cur := d.a
	var files []string
	for _, rows := range [][]uint64{{1, 2}, {1, 2, 3}} {
		descs, err := WriteDeletionVectorFile(d.dir, []*DeletionVector{NewDeletionVector(rows...)})
		if err != nil {
			t.Fatal(err)
		}
		p, err := descs[0].FilePath(d.dir)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
		rm, add, err := DeletionVectorActions(cur, descs[0], time.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if version, err = d.tbl.Commit(ctx, version, []Action{rm, add}); err != nil {
			t.Fatal(err)
		}
		cur = add
	}
	if _, err := d.tbl.Vacuum(ctx, VacuumOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("inside the retention: %v", err)
		}
	}
	res, err := d.tbl.Vacuum(ctx, VacuumOptions{Now: time.Now().Add(48 * time.Hour), Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Errorf("replaced deletion vector file kept: %v (deleted %v)", err, res.Files)
	}
	if _, err := os.Stat(files[1]); err != nil {
		t.Errorf("deletion vector file in use: %v", err)
	}
	latest, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := latest.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "after vacuum", rows, rowsWithout(1, 2, 3))
	if n := len(res.Files); n != 1 || filepath.Join(d.dir, res.Files[0].Path) != files[0] {
		t.Errorf("vacuum deleted %v", res.Files)
	}
}

// TestCommitRefusesDeletionVectorsUnsupported checks that a commit of an
// add with a deletion vector fails, writing nothing, on a table whose
// protocol does not support deletion vectors, and succeeds once the same
// commit (or an earlier one) upgrades the protocol.
func TestCommitRefusesDeletionVectorsUnsupported(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, nil)
	descs, err := StoreDeletionVectors(d.dir, []*DeletionVector{NewDeletionVector(3)}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rm, add, err := DeletionVectorActions(d.a, descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.tbl.Commit(ctx, 1, []Action{rm, add})
	if !errors.Is(err, ErrUnsupportedFeature) || !strings.Contains(err.Error(), "does not support deletion vectors") {
		t.Fatalf("commit of a deletion vector on a table without the feature: %v", err)
	}
	if v, err := d.tbl.LatestVersion(ctx); err != nil || v != 1 {
		t.Fatalf("latest version %d, %v; want 1", v, err)
	}
	snap, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := *snap.Protocol()
	if _, err := d.tbl.Commit(ctx, 1, []Action{&old, rm, add}); !errors.Is(err, ErrUnsupportedFeature) {
		t.Fatalf("commit with the old protocol: %v", err)
	}
	proto, md, err := EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 1, []Action{proto, md, rm, add}); err != nil {
		t.Fatalf("commit with the upgrade: %v", err)
	}
	// Later commits read the table's protocol.
	descs, err = StoreDeletionVectors(d.dir, []*DeletionVector{NewDeletionVector(3, 4)}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rm2, add2, err := DeletionVectorActions(add, descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 2, []Action{rm2, add2}); err != nil {
		t.Fatalf("commit on an upgraded table: %v", err)
	}
}

// TestOptimizePurgesDeletionVectors compacts a table whose files carry
// deletion vectors: a file whose vector deletes half of its rows or more
// is rewritten, alone if need be, without the deleted rows, and the
// compacted table reads the same rows, its new files without vectors.
func TestOptimizePurgesDeletionVectors(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, nil)
	snap, err := d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proto, md, err := EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	deleted := append(span(0, 60), 100, 101)
	descs, err := StoreDeletionVectors(d.dir, []*DeletionVector{NewDeletionVector(rowIndexes(span(0, 60))...), NewDeletionVector(0, 1)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rmA, a1, err := DeletionVectorActions(d.a, descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	rmB, b1, err := DeletionVectorActions(d.b, descs[1], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.tbl.Commit(ctx, 1, []Action{proto, md, rmA, a1, rmB, b1}); err != nil {
		t.Fatal(err)
	}
	snap, err = d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Bins) != 2 || plan.SmallFiles != 2 {
		t.Fatalf("plan: %d bins, %d small files; want a bin for each file with a deletion vector", len(plan.Bins), plan.SmallFiles)
	}
	var adds []*Add
	for _, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, RewriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, add)
	}
	v, bins, err := d.tbl.CommitOptimize(ctx, plan, plan.Bins, adds, nil)
	if err != nil || len(bins) != 2 {
		t.Fatalf("commit optimize: version %d, %d bins, %v", v, len(bins), err)
	}
	snap, err = d.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range snap.Files() {
		if f.DeletionVector != nil {
			t.Errorf("compacted file %s has a deletion vector", f.Path)
		}
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "compacted", rows, rowsWithout(deleted...))
	if plan, err := snap.PlanOptimize(OptimizeOptions{TargetFileSize: 1 << 30}); err != nil || len(plan.Bins) != 0 {
		t.Errorf("plan after compaction: %+v, %v; want no bins", plan, err)
	}
}

// rowIndexes returns ids as row indexes.
func rowIndexes(ids []int64) []uint64 {
	out := make([]uint64, len(ids))
	for i, id := range ids {
		out[i] = uint64(id)
	}
	return out
}

// TestReadDataFileIndexed reads a file with a deletion vector with the
// indexes of its rows, all of them and a selection, across row groups.
func TestReadDataFileIndexed(t *testing.T) {
	ctx := context.Background()
	d := newDVTable(t, nil)
	descs, err := StoreDeletionVectors(d.dir, []*DeletionVector{NewDeletionVector(1, 16, 50)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	add, err := d.a.WithDeletionVector(descs[0])
	if err != nil {
		t.Fatal(err)
	}
	schema := NewStructType(NewField("id", TypeLong, false))
	rows, index, err := ReadDataFileIndexed(ctx, d.dir, add, schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 97 || len(index) != 97 {
		t.Fatalf("%d rows, %d indexes; want 97", len(rows), len(index))
	}
	for i, r := range rows {
		if r[0] != int64(index[i]) || index[i] == 1 || index[i] == 16 || index[i] == 50 {
			t.Fatalf("row %d: id %v at index %d", i, r[0], index[i])
		}
	}
	rows, index, err = ReadDataFileIndexed(ctx, d.dir, add, schema, NewDeletionVector(0, 16, 17, 99))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rows, index); got != "[[0] [17] [99]] [0 17 99]" {
		t.Errorf("selected rows and indexes %s; want [[0] [17] [99]] [0 17 99]", got)
	}
}

// TestCreateWithDeletionVectors creates a table whose configuration
// enables deletion vectors: its protocol supports them from version 0.
func TestCreateWithDeletionVectors(t *testing.T) {
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, false))
	conf := map[string]string{EnableDeletionVectorsKey: "true", ColumnMappingModeKey: ColumnMappingName, EnableChangeDataFeedKey: "true"}
	tbl, err := Create(ctx, t.TempDir(), schema, nil, conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Protocol()
	if !DeletionVectorsEnabled(p, snap.Metadata()) || !slices.Contains(p.ReaderFeatures, ColumnMappingFeature) ||
		!slices.Contains(p.WriterFeatures, ChangeDataFeedFeature) {
		t.Errorf("protocol %+v", p)
	}
}
