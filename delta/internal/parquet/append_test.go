package parquet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// appendSchema is flatTypesSchema with a nested column and a partition
// column after its leaf columns.
func appendSchema() *types.StructType {
	st := flatTypesSchema()
	st.Fields = append(st.Fields,
		types.NewField("arr", &types.ArrayType{ElementType: types.TypeInteger, ContainsNull: true}, true),
		types.NewField("p", types.TypeString, true))
	return st
}

// buildRow gives a RowBuilder the values of a normalised row of
// appendSchema with the typed setters (Value only for the nested column
// and for decimals beyond an int64), leaving every third null unset and
// the partition column p, which takes no value.
func buildRow(t *testing.T, b *RowBuilder, st *types.StructType, row types.Row) {
	t.Helper()
	for i, v := range row {
		f := st.Fields[i]
		if f.Name == "p" {
			continue
		}
		switch x := v.(type) {
		case nil:
			if i%3 != 0 {
				b.Null(i)
			}
		case bool:
			b.Bool(i, x)
		case int8:
			b.Int(i, int64(x))
		case int16:
			b.Int(i, int64(x))
		case int32:
			b.Int(i, int64(x))
		case int64:
			b.Int(i, x)
		case float32:
			b.Float(i, x)
		case float64:
			b.Double(i, x)
		case string:
			b.Bytes(i, []byte(x))
		case []byte:
			b.Bytes(i, x)
		case types.Decimal:
			if x.Unscaled.IsInt64() {
				b.Decimal(i, x.Unscaled.Int64(), x.Scale)
			} else {
				b.Value(i, x)
			}
		case time.Time:
			switch f.Type {
			case types.TypeDate:
				b.Date(i, types.DaysSinceEpoch(x))
			case types.TypeTimestampNTZ:
				b.Timestamp(i, types.NTZMicros(x))
			default:
				b.Timestamp(i, x.UnixMicro())
			}
		default:
			b.Value(i, x)
		}
	}
}

// TestRowBuilderWritesWhatWriteWrites writes the same rows with Write and
// with a RowBuilder, over several row groups, and checks that the two
// files hold the same rows, with the same stats.
func TestRowBuilderWritesWhatWriteWrites(t *testing.T) {
	ctx := context.Background()
	st := appendSchema()
	var rows []types.Row
	for i := range 400 {
		r := append(flatTypesRow(t, i), []any{int32(i), nil, int32(-i)}[:i%4], "p1")
		if i%4 == 3 {
			r[len(r)-2] = nil
		}
		rows = append(rows, r)
	}
	rows = normalizedRows(t, st, rows)
	opts := WriteOptions{RowGroupRows: 64}
	writeDir := t.TempDir()
	byWrite, err := writeDataFile(ctx, writeDir, st, []string{"p"}, rows, opts)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReadFile(ctx, filepath.Join(writeDir, byWrite.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(rows) {
		t.Fatalf("Write wrote %d rows, want %d", len(want), len(rows))
	}
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, []string{"p"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		b := w.Row()
		buildRow(t, b, st, r)
		if err := b.End(); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	byBuilder, got := closeAndRead(t, w, dir, st)
	if byBuilder.Stats != byWrite.Stats {
		t.Errorf("stats\n builder: %s\n   write: %s", byBuilder.Stats, byWrite.Stats)
	}
	assertSameRowsInOrder(t, "rows built", got, want)
}

// TestRowBuilderRefusesBadRows checks that a row the builder refuses
// (a value of another type or out of range, two values for a column, a
// null or no value for a non-nullable column) leaves nothing of itself in
// the file, and that the writer goes on.
func TestRowBuilderRefusesBadRows(t *testing.T) {
	st := types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("n", types.TypeInteger, true),
		types.NewField("s", types.TypeString, true),
		types.NewField("d", types.DecimalType{Precision: 5, Scale: 1}, true),
		types.NewField("tags", &types.ArrayType{ElementType: types.TypeString}, true),
	)
	bad := map[string]func(b *RowBuilder){
		"string for a long":      func(b *RowBuilder) { b.Bytes(0, []byte("1")) },
		"out of range":           func(b *RowBuilder) { b.Int(0, 1); b.Int(1, 1<<40) },
		"two values":             func(b *RowBuilder) { b.Int(0, 1); b.Int(0, 2) },
		"two nested values":      func(b *RowBuilder) { b.Int(0, 1); b.Null(4); b.Value(4, []any{"x"}) },
		"null non-nullable":      func(b *RowBuilder) { b.Null(0) },
		"no value non-nullable":  func(b *RowBuilder) { b.Int(1, 5) },
		"decimal too wide":       func(b *RowBuilder) { b.Int(0, 1); b.Decimal(3, 100000, 1) },
		"decimal of other scale": func(b *RowBuilder) { b.Int(0, 1); b.Decimal(3, 1, 2) },
		"no such field":          func(b *RowBuilder) { b.Int(0, 1); b.Int(9, 1) },
		"nested value refused":   func(b *RowBuilder) { b.Int(0, 1); b.Value(4, []any{7}) },
	}
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	var want []types.Row
	good := func(i int) {
		b := w.Row()
		b.Int(0, int64(i))
		b.Int(1, int64(-i))
		b.Bytes(2, []byte("row"))
		b.Decimal(3, int64(i), 1)
		b.Value(4, []any{"a"})
		if err := b.End(); err != nil {
			t.Fatalf("good row %d: %v", i, err)
		}
		want = append(want, types.Row{int64(i), int32(-i), "row", types.NewDecimal(int64(i), 1), []any{"a"}})
	}
	for name, build := range bad {
		good(len(want))
		b := w.Row()
		build(b)
		if err := b.End(); !errors.Is(err, types.ErrInvalidValue) {
			t.Errorf("%s: End returned %v, want ErrInvalidValue", name, err)
		}
	}
	good(len(want))
	_, got := closeAndRead(t, w, dir, st)
	assertSameRowsInOrder(t, "rows kept", got, want)
	if b := w.Row(); b.End() == nil {
		t.Error("a closed writer took a row")
	}
}

// TestRowBuilderAllocatesNothing checks that a row of typed values costs
// no allocation once the columns have room.
func TestRowBuilderAllocatesNothing(t *testing.T) {
	st := types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("s", types.TypeString, true),
		types.NewField("d", types.DecimalType{Precision: 12, Scale: 2}, true),
		types.NewField("at", types.TypeTimestamp, true),
		types.NewField("before", types.NewStructType(types.NewField("id", types.TypeLong, true)), true),
	)
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		w.Abort()
		os.RemoveAll(dir)
	}()
	label := []byte("0123456789abcdef")
	i := int64(0)
	row := func() {
		b := w.Row()
		b.Int(0, i)
		b.Bytes(1, label)
		b.Decimal(2, i*7, 2)
		b.Timestamp(3, i*1000)
		if err := b.End(); err != nil {
			t.Fatal(err)
		}
		i++
	}
	for range 5000 {
		row()
	}
	if n := testing.AllocsPerRun(1000, row); n > 0.01 {
		t.Errorf("a row took %.2f allocations, want none", n)
	}
}
