package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCDCActionRoundTrip(t *testing.T) {
	pv := "x"
	in := &AddCDC{Path: "_change_data/cdc-1.parquet", PartitionValues: map[string]*string{"p": &pv}, Size: 42, Tags: map[string]string{"k": "v"}}
	line, err := marshalAction(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(line), `{"cdc":{`) || !strings.Contains(string(line), `"dataChange":false`) {
		t.Fatalf("cdc line %s", line)
	}
	acts, err := parseActions(line)
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 1 {
		t.Fatalf("parsed %d actions", len(acts))
	}
	out, ok := acts[0].(*AddCDC)
	if !ok || out.Path != in.Path || out.Size != 42 || *out.PartitionValues["p"] != "x" || out.Tags["k"] != "v" || out.DataChange {
		t.Fatalf("parsed %#v", acts[0])
	}
	if err := validateCommit(1, []Action{&AddCDC{Path: "a", DataChange: true}}); err == nil {
		t.Fatal("a cdc action with dataChange true is accepted")
	}
}

// TestChangeFilesOfReferenceTable reads the change actions of the
// delta-kernel-rs table-with-cdf: version 0 adds a file, version 1 has a
// cdc file besides a remove, version 2 turns the feed off and version 3
// on again.
func TestChangeFilesOfReferenceTable(t *testing.T) {
	ctx := context.Background()
	tbl, err := Open(ctx, requireRef(t, "kernel/table-with-cdf"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := tbl.ChangeFiles(ctx, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 {
		t.Fatalf("%d versions", len(vs))
	}
	if v := vs[0]; v.Version != 0 || len(v.CDC) != 0 || len(v.Added) != 1 || v.Added[0].Path != "fake/path/1" || len(v.Removed) != 0 {
		t.Fatalf("version 0: %+v", v)
	}
	v := vs[1]
	if v.Version != 1 || len(v.CDC) != 1 || len(v.Removed) != 1 || v.Removed[0].Path != "fake/path/1" {
		t.Fatalf("version 1: %+v", v)
	}
	c := v.CDC[0]
	if c.Path != "fake/path/2" || c.Size != 1 || c.DataChange || *c.PartitionValues["partition_foo"] != "partition_bar" || c.Tags["tag_foo"] != "tag_bar" {
		t.Fatalf("version 1 cdc: %+v", c)
	}
	if v.Timestamp.UnixMilli() != 1704392846030 {
		t.Fatalf("version 1 timestamp %v", v.Timestamp)
	}
	if _, err := tbl.ChangeFiles(ctx, 0, 2); !errors.Is(err, ErrChangeDataFeedDisabled) {
		t.Fatalf("versions 0-2 with the feed off in 2: %v", err)
	}
	if vs, err := tbl.ChangeFiles(ctx, 3, 4); err != nil || len(vs) != 2 {
		t.Fatalf("versions 3-4: %v, %d", err, len(vs))
	}
	// The cdc action is no file of the table.
	snap, err := tbl.SnapshotAt(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := snap.NumFiles(); n != 0 {
		t.Fatalf("version 1 has %d files", n)
	}
}

// TestReadChanges writes a table with the change data feed in column
// mapping mode: an insert-only version, a version rewriting a file with
// a change data file, and a version removing a file; ReadChanges returns
// each version's changes as the protocol reads them.
func TestReadChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("v", TypeString, true))
	conf := map[string]string{EnableChangeDataFeedKey: "true", ColumnMappingModeKey: ColumnMappingName}
	tbl, err := Create(ctx, dir, schema, nil, conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Schema()
	if p := snap.Protocol(); p.MinWriterVersion < 4 {
		t.Fatalf("protocol %+v does not cover the change data feed", p)
	}
	add1, err := snap.WriteFile(ctx, nil, []Row{{int64(1), "a"}, {int64(2), "b"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 0, []Action{add1}); err != nil {
		t.Fatal(err)
	}
	// Version 2: 1 updated, 2 kept, 3 inserted: the rewritten file
	// copies 2, so the changes are in a cdc file.
	add2, err := snap.WriteFile(ctx, nil, []Row{{int64(1), "A"}, {int64(2), "b"}, {int64(3), "c"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cw, err := NewChangeDataWriter(dir, st, nil, nil, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cw.Write([]Row{{int64(1), "a", ChangeUpdatePreimage}, {int64(1), "A", ChangeUpdatePostimage}, {int64(3), "c", ChangeInsert}}); err != nil {
		t.Fatal(err)
	}
	cadd, err := cw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cadd.Path, ChangeDataDir+"/cdc-") {
		t.Fatalf("change data file at %s", cadd.Path)
	}
	if _, err := tbl.Commit(ctx, 1, []Action{RemoveOf(add1, 1, true), add2, CDCOf(cadd)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 2, []Action{RemoveOf(add2, 2, true)}); err != nil {
		t.Fatal(err)
	}
	got, err := tbl.ReadChanges(ctx, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id  int64
		v   string
		typ string
		ver int64
	}{
		{1, "a", ChangeInsert, 1}, {2, "b", ChangeInsert, 1},
		{1, "a", ChangeUpdatePreimage, 2}, {1, "A", ChangeUpdatePostimage, 2}, {3, "c", ChangeInsert, 2},
		{1, "A", ChangeDelete, 3}, {2, "b", ChangeDelete, 3}, {3, "c", ChangeDelete, 3},
	}
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if len(g.Row) != 2 || g.Row[0] != w.id || g.Row[1] != w.v || g.Type != w.typ || g.Version != w.ver {
			t.Errorf("change %d: %+v, want %+v", i, g, w)
		}
	}
	// Column mapping: the change data file names the columns by their
	// physical names, and _change_type by its name.
	rows, err := ReadParquetFile(ctx, filepath.Join(dir, filepath.FromSlash(cadd.Path)),
		NewStructType(NewField(st.Fields[0].PhysicalName(), TypeLong, true), NewField(ChangeTypeColumn, TypeString, true)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0][0] != int64(1) || rows[0][1] != ChangeUpdatePreimage {
		t.Fatalf("change data file rows %v", rows)
	}
	if !strings.HasPrefix(st.Fields[0].PhysicalName(), "col-") {
		t.Fatalf("physical name %q", st.Fields[0].PhysicalName())
	}
	// Vacuum keeps the change data file a retained version names, and
	// deletes it once no version within the retention does.
	res, err := tbl.Vacuum(ctx, VacuumOptions{Retention: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range res.Files {
		found = found || f.Path == cadd.Path
	}
	if !found {
		t.Fatalf("vacuum past every version leaves the change data file: %+v", res.Files)
	}
	keep := func(context.Context) (int64, error) { return 2, nil }
	res, err = tbl.Vacuum(ctx, VacuumOptions{Retention: 1, KeepFrom: keep})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Files {
		if f.Path == cadd.Path {
			t.Fatalf("vacuum deletes the change data file of a version it must keep")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(cadd.Path))); err != nil {
		t.Fatal(err)
	}
}

func TestChangeDataFeedProtocol(t *testing.T) {
	for _, c := range []struct {
		in, want Protocol
	}{
		{Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, Protocol{MinReaderVersion: 1, MinWriterVersion: 4}},
		{Protocol{MinReaderVersion: 2, MinWriterVersion: 5}, Protocol{MinReaderVersion: 2, MinWriterVersion: 5}},
		{Protocol{MinReaderVersion: 3, MinWriterVersion: 7, WriterFeatures: []string{"columnMapping"}},
			Protocol{MinReaderVersion: 3, MinWriterVersion: 7, WriterFeatures: []string{"columnMapping", ChangeDataFeedFeature}}},
	} {
		got := ChangeDataFeedProtocol(&c.in)
		if got.MinReaderVersion != c.want.MinReaderVersion || got.MinWriterVersion != c.want.MinWriterVersion ||
			strings.Join(got.WriterFeatures, ",") != strings.Join(c.want.WriterFeatures, ",") {
			t.Errorf("%+v: got %+v, want %+v", c.in, got, c.want)
		}
	}
}

// TestEmptyChangeDataFile writes a change data file of no rows, which a
// version that rewrites files without changing a row commits so that its
// removes and adds are not read as changes.
func TestEmptyChangeDataFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, false))
	tbl, err := Create(ctx, dir, schema, nil, map[string]string{EnableChangeDataFeedKey: "true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	add, err := WriteDataFile(ctx, dir, schema, nil, nil, []Row{{int64(1)}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 0, []Action{add}); err != nil {
		t.Fatal(err)
	}
	again, err := WriteDataFile(ctx, dir, schema, nil, nil, []Row{{int64(1)}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cw, err := NewChangeDataWriter(dir, schema, nil, nil, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cadd, err := cw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 1, []Action{RemoveOf(add, 1, true), again, CDCOf(cadd)}); err != nil {
		t.Fatal(err)
	}
	got, err := tbl.ReadChanges(ctx, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a rewrite with an empty change data file reads as %+v", got)
	}
}
