package parquet

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/parquet-go/parquet-go"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestPutAgreesWithNormalize checks the writer's fast path: a value a leaf
// column takes as is must be stored exactly as the value types.Normalize
// makes of it, and values that need converting or checking are not taken
// as is.
func TestPutAgreesWithNormalize(t *testing.T) {
	dec := types.DecimalType{Precision: 12, Scale: 2}
	paris := time.FixedZone("CET", 3600)
	cases := []struct {
		typ  types.DataType
		v    any
		asIs bool
	}{
		{types.TypeBoolean, true, true},
		{types.TypeInteger, int32(-7), true},
		{types.TypeInteger, int64(7), false},
		{types.TypeInteger, 7, false},
		{types.TypeLong, int64(1) << 62, true},
		{types.TypeLong, int32(5), false},
		{types.TypeDouble, 2.5, true},
		{types.TypeDouble, float32(2.5), false},
		{types.TypeFloat, float32(2.5), true},
		{types.TypeString, "héllo", true},
		{types.TypeString, []byte("bytes"), false},
		{types.TypeBinary, []byte{0, 1}, true},
		{types.TypeBinary, "bytes", false},
		{types.TypeTimestamp, time.UnixMicro(1700000000123456).UTC(), true},
		{types.TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{types.TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 1500, time.UTC), true},
		{types.TypeTimestamp, time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC), true},
		{types.TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 0, paris), true},
		{types.TypeTimestamp, int64(5), false},
		{types.TypeTimestampNTZ, time.Date(2026, 1, 1, 0, 0, 0, 0, paris), true},
		{types.TypeDate, types.DateFromDays(3), true},
		{types.TypeDate, time.Date(2026, 1, 1, 23, 0, 0, 0, paris), true},
		{types.TypeDate, int32(3), false},
		{types.TypeShort, int16(1), true},
		{types.TypeShort, 1, false},
		{types.TypeByte, int8(-1), true},
		{dec, types.NewDecimal(-999_999_999_999, 2), true},
		{dec, types.NewDecimal(999_999_999_999, 2), true},
		{dec, types.NewDecimal(1_000_000_000_000, 2), false}, // 13 digits: types.Normalize refuses it
		{dec, types.NewDecimal(-1_000_000_000_000, 2), false},
		{dec, types.NewDecimal(15, 1), false}, // another scale: rescaled
		{dec, types.Decimal{Scale: 2}, false},
		{dec, "1.50", false},
		{types.DecimalType{Precision: 9, Scale: 0}, types.NewDecimal(-999_999_999, 0), true},
		{types.DecimalType{Precision: 9, Scale: 0}, types.NewDecimal(1_000_000_000, 0), false},
		{types.DecimalType{Precision: 38, Scale: 0}, types.NewDecimal(1, 0), true},
		{types.DecimalType{Precision: 38, Scale: 1}, types.NewDecimal(1, 0), false},
		{types.DecimalType{Precision: 20, Scale: 0}, types.Decimal{Unscaled: new(big.Int).Lsh(big.NewInt(1), 70)}, false},
		{types.DecimalType{Precision: 18, Scale: 0}, types.Decimal{Unscaled: new(big.Int).Lsh(big.NewInt(1), 70)}, false},
	}
	for _, c := range cases {
		f := types.NewField("c", c.typ, true)
		fast, slow := newFlatColumn(f, 0, 0), newFlatColumn(f, 0, 0)
		got := fast.put(c.v)
		if got != c.asIs {
			t.Errorf("put(%s, %#v) = %v, want %v", c.typ, c.v, got, c.asIs)
		}
		if !got {
			continue
		}
		n, err := types.Normalize(c.typ, c.v)
		if err != nil {
			t.Errorf("types.Normalize(%s, %#v): %v, but the fast path takes it", c.typ, c.v, err)
			continue
		}
		if !slow.put(n) {
			t.Errorf("put(%s, %#v) refuses the normalised value", c.typ, n)
			continue
		}
		fast.addValue()
		slow.addValue()
		fv, _ := fast.appendValues(nil, 0, 1, 0)
		sv, _ := slow.appendValues(nil, 0, 1, 0)
		if !parquet.Equal(fv[0], sv[0]) {
			t.Errorf("put(%s, %#v) stores %v, types.Normalize makes %v", c.typ, c.v, fv[0], sv[0])
		}
	}
}

// TestWriteManyBatches writes rows of a flat schema over several of the
// writer's internal batches (whose memory it reuses), mixing nulls, values
// taken as is and values that need converting, and reads them back with
// arrow-go, which also decodes the snappy pages of our encoder.
func TestWriteManyBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("label", types.TypeString, true),
		types.NewField("amount", types.DecimalType{Precision: 12, Scale: 2}, true),
		types.NewField("at", types.TypeTimestamp, true),
	)
	const n = 5000
	var rows, want []types.Row
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := int64(0); i < n; i++ {
		label := fmt.Sprintf("row %d %s", i, string(rune('a'+i%26)))
		at := epoch.Add(time.Duration(i) * time.Millisecond)
		switch {
		case i%7 == 0:
			want = append(want, types.Row{i, nil, nil, at})
			rows = append(rows, types.Row{i, nil, nil, at})
		case i%2 == 0:
			want = append(want, types.Row{i, label, types.NewDecimal(i*10, 2), at})
			rows = append(rows, types.Row{i, label, types.NewDecimal(i*10, 2), at})
		default:
			want = append(want, types.Row{i, label, types.NewDecimal(i*10, 2), at})
			rows = append(rows, types.Row{int(i), []byte(label), types.NewDecimal(i, 1), at.In(time.FixedZone("X", -7200))})
		}
	}
	add, err := writeDataFile(ctx, dir, st, nil, rows, WriteOptions{RowGroupRows: 1500})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "many batches", got, want)
	pr, err := file.OpenParquetFile(filepath.Join(dir, add.Path), false)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	for rg := 0; rg < pr.NumRowGroups(); rg++ {
		for c := 0; c < len(st.Fields); c++ {
			cc, err := pr.MetaData().RowGroup(rg).ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			if cc.Compression() != compress.Codecs.Snappy {
				t.Errorf("row group %d column %d: codec %v, want snappy", rg, c, cc.Compression())
			}
		}
	}

	_, err = writeDataFile(ctx, dir, st, nil, []types.Row{{int64(1), "x", types.NewDecimal(1_000_000_000_000, 2), epoch}}, WriteOptions{})
	if !errors.Is(err, types.ErrInvalidValue) {
		t.Errorf("13-digit value in decimal(12,2): err %v, want ErrInvalidValue", err)
	}
	_, err = writeDataFile(ctx, dir, st, nil, []types.Row{{nil, "x", nil, epoch}}, WriteOptions{})
	if !errors.Is(err, types.ErrInvalidValue) {
		t.Errorf("null in a non-nullable column: err %v, want ErrInvalidValue", err)
	}
}

// TestShredInColumnOrder checks which schemas the shredder walks in column
// order (structs and arrays of one leaf column), and writes a changelog-like
// schema with null, empty and filled nested values and reads it back.
func TestShredInColumnOrder(t *testing.T) {
	ctx := context.Background()
	data := []*types.StructField{types.NewField("id", types.TypeLong, true), types.NewField("name", types.TypeString, true)}
	st := types.NewStructType(append(append([]*types.StructField{}, data...),
		types.NewField("_op", types.TypeString, false),
		types.NewField("_before", types.NewStructType(append(append([]*types.StructField{}, data...),
			types.NewField("inner", types.NewStructType(types.NewField("x", types.TypeInteger, true)), true))...), true),
		types.NewField("_unchanged", &types.ArrayType{ElementType: types.TypeString}, true),
		types.NewField("nums", &types.ArrayType{ElementType: &types.ArrayType{ElementType: types.TypeLong, ContainsNull: true}, ContainsNull: true}, true),
		types.NewField("tail", types.TypeBoolean, true))...)
	if !inColumnOrder(st) {
		t.Fatal("a schema of structs and arrays of one leaf column is not shredded in column order")
	}
	for _, dt := range []types.DataType{
		&types.ArrayType{ElementType: types.NewStructType(types.NewField("a", types.TypeLong, true), types.NewField("b", types.TypeLong, true))},
		&types.MapType{KeyType: types.TypeString, ValueType: types.TypeLong},
		types.NewStructType(types.NewField("m", &types.MapType{KeyType: types.TypeString, ValueType: types.TypeLong}, true)),
	} {
		if inColumnOrder(dt) {
			t.Errorf("%s is taken as shredded in column order", dt)
		}
	}
	var rows []types.Row
	for i := int64(0); i < 3000; i++ {
		var before, unchanged, nums any
		switch i % 4 {
		case 1:
			before, unchanged, nums = types.Row{i, "old", types.Row{int32(i)}}, []any{}, []any{[]any{}, nil}
		case 2:
			before, unchanged, nums = types.Row{nil, nil, nil}, []any{"name", "id"}, []any{[]any{int64(1), nil, int64(i)}}
		case 3:
			before, nums = types.Row{i, fmt.Sprint(i), types.Row{nil}}, []any{}
		}
		rows = append(rows, types.Row{i, fmt.Sprintf("n%d", i), "update", before, unchanged, nums, i%3 == 0})
	}
	dir := t.TempDir()
	add, err := writeDataFile(ctx, dir, st, nil, rows, WriteOptions{RowGroupRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "in column order", got, rows)
}
