package delta

import (
	"context"
	"slices"
	"testing"
)

// TestTypeWidening checks which changes widen, that a widened field keeps
// its id and physical name and records the change, that the protocol
// gains the feature, and that files written before read as the wider type.
func TestTypeWidening(t *testing.T) {
	for _, c := range []struct {
		from, to DataType
		ok       bool
	}{
		{TypeShort, TypeInteger, true}, {TypeInteger, TypeLong, true}, {TypeByte, TypeLong, true},
		{TypeFloat, TypeDouble, true}, {DecimalType{Precision: 10, Scale: 2}, DecimalType{Precision: 12, Scale: 3}, true},
		{TypeLong, TypeInteger, false}, {TypeInteger, TypeString, false}, {TypeInteger, TypeDouble, false},
		{DecimalType{Precision: 10, Scale: 2}, DecimalType{Precision: 11, Scale: 3}, true},
		{DecimalType{Precision: 10, Scale: 2}, DecimalType{Precision: 10, Scale: 3}, false},
		{DecimalType{Precision: 10, Scale: 2}, DecimalType{Precision: 10, Scale: 2}, false},
	} {
		if got := CanWiden(c.from, c.to); got != c.ok {
			t.Errorf("CanWiden(%s, %s) = %v, want %v", c.from, c.to, got, c.ok)
		}
	}
	ctx := context.Background()
	st, _, err := AssignColumnIDs(NewStructType(NewField("id", TypeLong, true), NewField("n", TypeInteger, true)), 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tbl, err := Create(ctx, dir, st, nil, map[string]string{ColumnMappingModeKey: ColumnMappingName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add, err := snap.WriteFile(ctx, nil, []Row{{int64(1), int32(7)}, {int64(2), nil}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	widened := WidenField(st.Fields[1], TypeLong)
	if widened.ColumnID() != st.Fields[1].ColumnID() || widened.PhysicalName() != st.Fields[1].PhysicalName() {
		t.Fatal("the widened field lost its id or physical name")
	}
	md, err := snap.Metadata().WithSchema(NewStructType(st.Fields[0], widened))
	if err != nil {
		t.Fatal(err)
	}
	proto, err := TypeWideningProtocol(snap.Protocol())
	if err != nil {
		t.Fatal(err)
	}
	if !SupportsTypeWidening(proto) || !slices.Contains(proto.ReaderFeatures, ColumnMappingFeature) {
		t.Fatalf("protocol %+v", proto)
	}
	if _, err := tbl.Commit(ctx, snap.Version(), []Action{add, proto, md}); err != nil {
		t.Fatal(err)
	}
	snap, err = tbl.Snapshot(ctx)
	if err != nil {
		t.Fatalf("a widened table does not read: %v", err)
	}
	f, _ := snap.Schema().Field("n")
	if changes, ok := f.Metadata[TypeChangesKey].([]any); !ok || len(changes) != 1 {
		t.Errorf("type changes recorded: %v", f.Metadata[TypeChangesKey])
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0][1] != int64(7) || rows[1][1] != nil {
		t.Errorf("rows of the file written before the widening: %v", rows)
	}
}
