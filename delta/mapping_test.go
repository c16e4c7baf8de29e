package delta

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// nameMode is the configuration of a table created in column mapping mode
// name.
func nameMode() map[string]string {
	return map[string]string{ColumnMappingModeKey: ColumnMappingName}
}

// commitSchema commits a metaData action with the schema st on top of snap
// and returns the new snapshot.
func commitSchema(t *testing.T, tbl *Table, snap *Snapshot, st *StructType) *Snapshot {
	t.Helper()
	md, err := snap.Metadata().WithSchema(st)
	if err != nil {
		t.Fatal(err)
	}
	return commitActions(t, tbl, snap, md)
}

// commitActions commits actions on top of snap and returns the new snapshot.
func commitActions(t *testing.T, tbl *Table, snap *Snapshot, acts ...Action) *Snapshot {
	t.Helper()
	ctx := context.Background()
	v, err := tbl.Commit(ctx, snap.Version(), acts)
	if err != nil {
		t.Fatal(err)
	}
	next, err := tbl.SnapshotAt(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// readAt reads every row of a version.
func readAt(t *testing.T, tbl *Table, version int64) (*StructType, []Row) {
	t.Helper()
	ctx := context.Background()
	snap, err := tbl.SnapshotAt(ctx, version)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatalf("read version %d: %v", version, err)
	}
	return snap.Schema(), rows
}

// fieldPath returns the field at a path of display names, through struct
// fields and array elements.
func fieldPath(t *testing.T, st *StructType, path ...string) *StructField {
	t.Helper()
	var f *StructField
	for _, name := range path {
		if f, _ = st.Field(name); f == nil {
			t.Fatalf("no field %q in %s", name, st)
		}
		switch ft := f.Type.(type) {
		case *StructType:
			st = ft
		case *ArrayType:
			st, _ = ft.ElementType.(*StructType)
		}
	}
	return f
}

// fieldNames returns the display names of st's fields.
func fieldNames(st *StructType) string { return strings.Join(st.FieldNames(), ",") }

// TestColumnMappingRenameDropAndReAdd creates a table in name mode, renames a
// column (top-level and nested) by committing metadata only, drops it, and
// adds a new column under the dropped one's name: every version reads its
// own schema's rows, and the new column never shows the dropped one's data.
func TestColumnMappingRenameDropAndReAdd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("name", TypeString, true),
		NewField("info", NewStructType(NewField("a", TypeLong, true), NewField("b", TypeString, true)), true),
		NewField("arr", &ArrayType{ElementType: NewStructType(NewField("x", TypeLong, true)), ContainsNull: true}, true),
		NewField("day", TypeDate, true),
	)
	tbl, err := Create(ctx, dir, schema, []string{"day"}, nameMode(), nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := snap.Protocol(); p.MinReaderVersion != 2 || p.MinWriterVersion != 5 {
		t.Errorf("protocol %+v, want reader 2 / writer 5", p)
	}
	if m := snap.ColumnMappingMode(); m != ColumnMappingName {
		t.Errorf("mode %q", m)
	}
	if n := snap.Metadata().MaxColumnID(); n != 8 {
		t.Errorf("maxColumnId %d, want 8 (5 columns, 3 nested fields)", n)
	}
	var ids []int64
	names := map[string]bool{}
	walkFields(snap.Schema(), func(f *StructField) {
		ids = append(ids, f.ColumnID())
		if !strings.HasPrefix(f.PhysicalName(), "col-") || names[f.PhysicalName()] {
			t.Errorf("field %q: physical name %q", f.Name, f.PhysicalName())
		}
		names[f.PhysicalName()] = true
	})
	slices.Sort(ids)
	if !slices.Equal(ids, []int64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("ids %v", ids)
	}
	if schema.Fields[0].Metadata != nil {
		t.Error("Create changed the caller's schema")
	}

	// v1: one file.
	day1, day2 := DateFromDays(19800), DateFromDays(19801)
	rows1 := []Row{
		{int64(1), "a", Row{int64(10), "x"}, []any{Row{int64(100)}}, day1},
		{int64(2), "b", nil, nil, day1},
	}
	add1, err := snap.WriteFile(ctx, map[string]any{"day": day1}, rows1, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, add1)
	oldName := fieldPath(t, snap.Schema(), "name")

	// v2: rename name → label and info.a → info.alpha, metadata only.
	st := cloneStruct(snap.Schema())
	fieldPath(t, st, "name").Name = "label"
	fieldPath(t, st, "info", "a").Name = "alpha"
	snap = commitSchema(t, tbl, snap, st)

	// v3: drop label.
	st = cloneStruct(snap.Schema())
	st.Fields = slices.DeleteFunc(st.Fields, func(f *StructField) bool { return f.Name == "label" })
	snap = commitSchema(t, tbl, snap, st)

	// v4: add a new column called name.
	st = cloneStruct(snap.Schema())
	st.Fields = append(st.Fields, NewField("name", TypeString, true))
	st, maxID, err := AssignColumnIDs(st, snap.Metadata().MaxColumnID())
	if err != nil {
		t.Fatal(err)
	}
	if maxID != 9 {
		t.Errorf("new max id %d, want 9", maxID)
	}
	newName := fieldPath(t, st, "name")
	if newName.ColumnID() != 9 || newName.PhysicalName() == oldName.PhysicalName() || !strings.HasPrefix(newName.PhysicalName(), "col-") {
		t.Errorf("re-added name: id %d, physical %q (dropped one's %q)", newName.ColumnID(), newName.PhysicalName(), oldName.PhysicalName())
	}
	if fieldPath(t, st, "id").ColumnID() != 1 {
		t.Error("AssignColumnIDs changed an existing id")
	}
	snap = commitSchema(t, tbl, snap, st)
	if n := snap.Metadata().MaxColumnID(); n != 9 {
		t.Errorf("maxColumnId %d after adding a column, want 9", n)
	}

	// v5: a second file, with the new column.
	add2, err := snap.WriteFile(ctx, map[string]any{"day": day2},
		[]Row{{int64(3), Row{int64(30), "z"}, nil, day2, "new"}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commitActions(t, tbl, snap, add2)

	want := []struct {
		fields string
		rows   []Row
	}{
		{"id,name,info,arr,day", nil},
		{"id,name,info,arr,day", rows1},
		{"id,label,info,arr,day", rows1},
		{"id,info,arr,day", []Row{
			{int64(1), Row{int64(10), "x"}, []any{Row{int64(100)}}, day1},
			{int64(2), nil, nil, day1},
		}},
		{"id,info,arr,day,name", []Row{
			{int64(1), Row{int64(10), "x"}, []any{Row{int64(100)}}, day1, nil},
			{int64(2), nil, nil, day1, nil},
		}},
		{"id,info,arr,day,name", []Row{
			{int64(1), Row{int64(10), "x"}, []any{Row{int64(100)}}, day1, nil},
			{int64(2), nil, nil, day1, nil},
			{int64(3), Row{int64(30), "z"}, nil, day2, "new"},
		}},
	}
	for v, w := range want {
		st, rows := readAt(t, tbl, int64(v))
		if got := fieldNames(st); got != w.fields {
			t.Errorf("version %d: fields %s, want %s", v, got, w.fields)
		}
		rowstest.AssertSameRows(t, fmt.Sprintf("version %d", v), rows, w.rows)
	}
	if st, _ := readAt(t, tbl, 2); fieldNames(fieldPath(t, st, "info").Type.(*StructType)) != "alpha,b" {
		t.Errorf("version 2: info is %s", fieldPath(t, st, "info").Type)
	}
}

// TestEnableColumnMappingKeepsFiles turns an existing table with files into
// one in name mode: its old files read unchanged, files written afterwards
// read too, and a rename then reads the old and new files alike.
func TestEnableColumnMappingKeepsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("name", TypeString, true),
		NewField("info", NewStructType(NewField("a", TypeLong, true)), true),
		NewField("day", TypeDate, true),
	)
	tbl, err := Create(ctx, dir, schema, []string{"day"}, nil, nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	day := DateFromDays(19800)
	rows1 := []Row{{int64(1), "a", Row{int64(10)}, day}, {int64(2), nil, nil, day}}
	add1, err := snap.WriteFile(ctx, map[string]any{"day": day}, rows1, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, add1)

	proto, md, err := EnableColumnMapping(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, &CommitInfo{Operation: "SET TBLPROPERTIES"}, proto, md)
	if p := snap.Protocol(); p.MinReaderVersion != 2 || p.MinWriterVersion != 5 {
		t.Errorf("protocol %+v, want reader 2 / writer 5", p)
	}
	if m := snap.ColumnMappingMode(); m != ColumnMappingName {
		t.Errorf("mode %q", m)
	}
	if md.ID != snap.Metadata().ID || !slices.Equal(md.PartitionColumns, []string{"day"}) {
		t.Errorf("metadata lost its id or partition columns: %+v", md)
	}
	var ids []int64
	walkFields(snap.Schema(), func(f *StructField) {
		ids = append(ids, f.ColumnID())
		if f.PhysicalName() != f.Name || !f.HasPhysicalName() {
			t.Errorf("field %q: physical name %q, want its name", f.Name, f.PhysicalName())
		}
	})
	if !slices.Equal(ids, []int64{1, 2, 3, 4, 5}) || snap.Metadata().MaxColumnID() != 5 {
		t.Errorf("ids %v, maxColumnId %d", ids, snap.Metadata().MaxColumnID())
	}
	if _, _, err := EnableColumnMapping(snap.Protocol(), snap.Metadata()); err == nil {
		t.Error("column mapping enabled twice")
	}
	_, rows := readAt(t, tbl, snap.Version())
	rowstest.AssertSameRows(t, "after upgrade", rows, rows1)

	rows2 := []Row{{int64(3), "c", Row{int64(30)}, day}}
	add2, err := snap.WriteFile(ctx, map[string]any{"day": day}, rows2, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, add2)
	_, rows = readAt(t, tbl, snap.Version())
	rowstest.AssertSameRows(t, "new file", rows, append(slices.Clone(rows1), rows2...))

	// Rename name → title and add another name: both files keep their
	// values under title, the new name is null in both.
	st := cloneStruct(snap.Schema())
	fieldPath(t, st, "name").Name = "title"
	st.Fields = append(st.Fields, NewField("name", TypeString, true))
	st, _, err = AssignColumnIDs(st, snap.Metadata().MaxColumnID())
	if err != nil {
		t.Fatal(err)
	}
	snap = commitSchema(t, tbl, snap, st)
	st, rows = readAt(t, tbl, snap.Version())
	if fieldNames(st) != "id,title,info,day,name" {
		t.Fatalf("fields %s", fieldNames(st))
	}
	rowstest.AssertSameRows(t, "renamed", rows, []Row{
		{int64(1), "a", Row{int64(10)}, day, nil},
		{int64(2), nil, nil, day, nil},
		{int64(3), "c", Row{int64(30)}, day, nil},
	})
	_, rows = readAt(t, tbl, 1)
	rowstest.AssertSameRows(t, "version 1", rows, rows1)
}

// TestColumnMappingProtocols checks the protocol a table gets when column
// mapping is turned on, for the protocols before it.
func TestColumnMappingProtocols(t *testing.T) {
	for _, c := range []struct{ from, want Protocol }{
		{Protocol{MinReaderVersion: 1, MinWriterVersion: 2}, Protocol{MinReaderVersion: 2, MinWriterVersion: 5}},
		{Protocol{MinReaderVersion: 1, MinWriterVersion: 6}, Protocol{MinReaderVersion: 2, MinWriterVersion: 6}},
		{Protocol{MinReaderVersion: 1, MinWriterVersion: 7, WriterFeatures: []string{"appendOnly"}},
			Protocol{MinReaderVersion: 2, MinWriterVersion: 7, WriterFeatures: []string{"appendOnly", ColumnMappingFeature}}},
		{Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"timestampNtz"}, WriterFeatures: []string{"timestampNtz"}},
			Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: []string{"timestampNtz", ColumnMappingFeature},
				WriterFeatures: []string{"timestampNtz", ColumnMappingFeature}}},
	} {
		got, err := columnMappingProtocol(&c.from)
		if err != nil {
			t.Errorf("%+v: %v", c.from, err)
			continue
		}
		if !reflect.DeepEqual(*got, c.want) {
			t.Errorf("%+v: got %+v, want %+v", c.from, *got, c.want)
		}
	}

	// A new table at reader 3 / writer 7 gets the feature, and reads.
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("at", TypeTimestampNTZ, true))
	tbl, err := Create(ctx, t.TempDir(), schema, nil, nameMode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Protocol()
	if p.MinReaderVersion != 3 || !slices.Contains(p.ReaderFeatures, ColumnMappingFeature) ||
		!slices.Contains(p.WriterFeatures, ColumnMappingFeature) || snap.ColumnMappingMode() != ColumnMappingName {
		t.Errorf("protocol %+v, mode %q", p, snap.ColumnMappingMode())
	}
	rows := []Row{{int64(1), TimeFromMicros(1_000_000)}}
	add, err := snap.WriteFile(ctx, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commitActions(t, tbl, snap, add)
	_, got := readAt(t, tbl, 1)
	rowstest.AssertSameRows(t, "reader 3", got, rows)
}

// TestColumnMappingStatsAndPartitionValuesArePhysical checks that an add
// action of a table in name mode keys its partition values and its stats,
// nested ones too, by physical names, in the commit and in a checkpoint.
func TestColumnMappingStatsAndPartitionValuesArePhysical(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("info", NewStructType(NewField("a", TypeLong, true)), true),
		NewField("region", TypeString, true),
	)
	tbl, err := Create(ctx, dir, schema, []string{"region"}, nameMode(), nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Schema()
	phys := func(path ...string) string { return fieldPath(t, st, path...).PhysicalName() }
	rows := []Row{{int64(1), Row{int64(5)}, "eu"}, {int64(2), nil, "eu"}}
	add, err := snap.WriteFile(ctx, map[string]any{"region": "eu"}, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commitActions(t, tbl, snap, add)

	acts, err := tbl.ReadCommit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var committed *Add
	for _, a := range acts {
		if a, ok := a.(*Add); ok {
			committed = a
		}
	}
	if committed == nil {
		t.Fatal("no add in version 1")
	}
	check := func(what string, a *Add) {
		t.Helper()
		if len(a.PartitionValues) != 1 || a.PartitionValues[phys("region")] == nil || *a.PartitionValues[phys("region")] != "eu" {
			t.Errorf("%s: partition values %v, want %s=eu", what, a.PartitionValues, phys("region"))
		}
		s, err := ParseStats(a.Stats)
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range map[string]map[string]any{"minValues": s.MinValues, "maxValues": s.MaxValues, "nullCount": s.NullCount} {
			if len(m) != 2 || m[phys("id")] == nil {
				t.Errorf("%s: %s %v, want keys %s and %s", what, name, m, phys("id"), phys("info"))
				continue
			}
			inner, _ := m[phys("info")].(map[string]any)
			if _, ok := inner[phys("info", "a")]; !ok || len(inner) != 1 {
				t.Errorf("%s: %s of info %v, want key %s", what, name, m[phys("info")], phys("info", "a"))
			}
		}
		if strings.Contains(a.Stats, `"id"`) || strings.Contains(a.Stats, `"info"`) || strings.Contains(a.Stats, `"a"`) {
			t.Errorf("%s: stats name a display name: %s", what, a.Stats)
		}
	}
	check("commit", committed)

	if err := tbl.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fromCheckpoint, err := tbl.SnapshotAt(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	files := fromCheckpoint.Files()
	if len(files) != 1 {
		t.Fatalf("%d files in the checkpoint", len(files))
	}
	check("checkpoint", files[0])
	got, err := fromCheckpoint.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "from checkpoint", got, rows)
}

// TestSparkColumnMappingTable reads a table Spark wrote in name mode (the
// kernel's stats-writing-all-types) and writes its rows again: the values
// read are the table's (one null per column), and the stats of the file
// written are Spark's, keyed by the same physical names.
func TestSparkColumnMappingTable(t *testing.T) {
	ctx := context.Background()
	tbl, err := Open(ctx, filepath.Join(requireRef(t, "kernel"), "stats-writing-all-types", "delta"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, f := range snap.Schema().Fields {
		nulls := 0
		for _, r := range rows {
			if r[i] == nil {
				nulls++
			}
		}
		if nulls != 1 {
			t.Errorf("column %s: %d nulls in 4 rows, want 1", f.Name, nulls)
		}
	}
	files := snap.Files()
	if len(files) != 1 {
		t.Fatalf("%d files", len(files))
	}
	want, err := ParseStats(files[0].Stats)
	if err != nil {
		t.Fatal(err)
	}
	add, err := WriteDataFile(ctx, t.TempDir(), snap.Schema(), nil, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStats(add.Stats)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats differ from Spark's\n got: %s\nwant: %s", add.Stats, files[0].Stats)
	}
}

// TestColumnMappingIgnoredWithoutProtocolSupport checks that a table whose
// protocol does not support column mapping reads by display names, though
// its configuration and fields say otherwise, as the protocol says.
func TestColumnMappingIgnoredWithoutProtocolSupport(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	plain := NewStructType(NewField("id", TypeLong, false), NewField("name", TypeString, true))
	rows := []Row{{int64(1), "a"}}
	add, err := WriteDataFile(ctx, dir, plain, nil, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mapped, _, err := AssignColumnIDs(plain, 0)
	if err != nil {
		t.Fatal(err)
	}
	md, err := NewMetadata(mapped, nil, nameMode(), 0)
	if err != nil {
		t.Fatal(err)
	}
	tbl := New(dir)
	if _, err := tbl.Commit(ctx, -1, []Action{DefaultProtocol(), md, add}); err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := snap.ColumnMappingMode(); m != ColumnMappingNone {
		t.Errorf("mode %q at reader 1", m)
	}
	got, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "reader 1", got, rows)
}

// TestColumnMappingModeIDIsRefused checks that mode id, which this package
// does not read, is refused when creating and when reading a table.
func TestColumnMappingModeIDIsRefused(t *testing.T) {
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, false))
	idMode := map[string]string{ColumnMappingModeKey: ColumnMappingID}
	if _, err := Create(ctx, t.TempDir(), schema, nil, idMode, nil); !errors.Is(err, ErrUnsupportedFeature) {
		t.Errorf("create in mode id: %v", err)
	}
	mapped, _, err := AssignColumnIDs(schema, 0)
	if err != nil {
		t.Fatal(err)
	}
	md, err := NewMetadata(mapped, nil, idMode, 0)
	if err != nil {
		t.Fatal(err)
	}
	tbl := New(t.TempDir())
	if _, err := tbl.Commit(ctx, -1, []Action{&Protocol{MinReaderVersion: 2, MinWriterVersion: 5}, md}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Snapshot(ctx); !errors.Is(err, ErrUnsupportedFeature) || !strings.Contains(err.Error(), `"id"`) {
		t.Errorf("read in mode id: %v", err)
	}
}

// TestMetadataWithSchemaChecksColumnMapping checks that a schema committed
// to a table in name mode must give every field an id and a physical name.
func TestMetadataWithSchemaChecksColumnMapping(t *testing.T) {
	ctx := context.Background()
	tbl, err := Create(ctx, t.TempDir(), NewStructType(NewField("id", TypeLong, false)), nil, nameMode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := cloneStruct(snap.Schema())
	st.Fields = append(st.Fields, NewField("name", TypeString, true))
	if _, err := snap.Metadata().WithSchema(st); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("field without an id: %v", err)
	}
	dup := cloneStruct(snap.Schema())
	dup.Fields = append(dup.Fields, cloneStruct(snap.Schema()).Fields[0])
	dup.Fields[1].Name = "copy"
	if _, err := snap.Metadata().WithSchema(dup); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("two fields of one id: %v", err)
	}
}

// TestAssignColumnIDsReachesNestedFields checks that AssignColumnIDs names
// the fields of structs inside maps and arrays too, keeps the ids there are,
// leaves its argument alone, and that a file of the result reads back
// through its physical names.
func TestAssignColumnIDsReachesNestedFields(t *testing.T) {
	ctx := context.Background()
	kept := NewField("id", TypeLong, false)
	kept.Metadata = map[string]any{ColumnMappingIDKey: float64(7), ColumnMappingPhysicalNameKey: "col-kept"}
	value := NewStructType(NewField("v", TypeLong, true))
	st := NewStructType(kept,
		NewField("m", &MapType{KeyType: TypeString, ValueType: value, ValueContainsNull: true}, true),
		NewField("l", &ArrayType{ElementType: &ArrayType{ElementType: NewStructType(NewField("w", TypeString, true))}}, true),
	)
	got, maxID, err := AssignColumnIDs(st, 3)
	if err != nil {
		t.Fatal(err)
	}
	if maxID != 11 {
		t.Errorf("max id %d, want 11 (7 kept, 4 new)", maxID)
	}
	var ids []int64
	walkFields(got, func(f *StructField) {
		ids = append(ids, f.ColumnID())
		if f.Name != "id" && !strings.HasPrefix(f.PhysicalName(), "col-") {
			t.Errorf("field %q: physical name %q", f.Name, f.PhysicalName())
		}
	})
	if !slices.Equal(ids, []int64{7, 8, 9, 10, 11}) || got.Fields[0].PhysicalName() != "col-kept" {
		t.Errorf("ids %v, first physical name %q", ids, got.Fields[0].PhysicalName())
	}
	if value.Fields[0].Metadata != nil || st.Fields[1].Metadata != nil {
		t.Error("AssignColumnIDs changed its argument")
	}
	if err := checkColumnMapping(got); err != nil {
		t.Error(err)
	}

	dir := t.TempDir()
	rows := []Row{{int64(1), []MapEntry{{Key: "k", Value: Row{int64(2)}}}, []any{[]any{Row{"x"}}}}}
	add, err := WriteDataFile(ctx, dir, got, nil, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), got)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "nested", read, rows)
	// With the schema before, only the field that had a physical name
	// finds its column: the file has none under the display names.
	read, err = ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "by display names", read, []Row{{int64(1), nil, nil}})
}
