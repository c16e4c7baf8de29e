package delta

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

	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestPutAgreesWithNormalize checks the writer's fast path: a value a leaf
// column takes as is must be stored exactly as the value normalizeValue
// makes of it, and values that need converting or checking are not taken
// as is.
func TestPutAgreesWithNormalize(t *testing.T) {
	dec := DecimalType{Precision: 12, Scale: 2}
	paris := time.FixedZone("CET", 3600)
	cases := []struct {
		typ  DataType
		v    any
		asIs bool
	}{
		{TypeBoolean, true, true},
		{TypeInteger, int32(-7), true},
		{TypeInteger, int64(7), false},
		{TypeInteger, 7, false},
		{TypeLong, int64(1) << 62, true},
		{TypeLong, int32(5), false},
		{TypeDouble, 2.5, true},
		{TypeDouble, float32(2.5), false},
		{TypeFloat, float32(2.5), true},
		{TypeString, "héllo", true},
		{TypeString, []byte("bytes"), false},
		{TypeBinary, []byte{0, 1}, true},
		{TypeBinary, "bytes", false},
		{TypeTimestamp, time.UnixMicro(1700000000123456).UTC(), true},
		{TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 1500, time.UTC), true},
		{TypeTimestamp, time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC), true},
		{TypeTimestamp, time.Date(2026, 1, 1, 0, 0, 0, 0, paris), true},
		{TypeTimestamp, int64(5), false},
		{TypeTimestampNTZ, time.Date(2026, 1, 1, 0, 0, 0, 0, paris), true},
		{TypeDate, DateFromDays(3), true},
		{TypeDate, time.Date(2026, 1, 1, 23, 0, 0, 0, paris), true},
		{TypeDate, int32(3), false},
		{TypeShort, int16(1), true},
		{TypeShort, 1, false},
		{TypeByte, int8(-1), true},
		{dec, NewDecimal(-999_999_999_999, 2), true},
		{dec, NewDecimal(999_999_999_999, 2), true},
		{dec, NewDecimal(1_000_000_000_000, 2), false}, // 13 digits: normalizeValue refuses it
		{dec, NewDecimal(-1_000_000_000_000, 2), false},
		{dec, NewDecimal(15, 1), false}, // another scale: rescaled
		{dec, Decimal{Scale: 2}, false},
		{dec, "1.50", false},
		{DecimalType{Precision: 9, Scale: 0}, NewDecimal(-999_999_999, 0), true},
		{DecimalType{Precision: 9, Scale: 0}, NewDecimal(1_000_000_000, 0), false},
		{DecimalType{Precision: 38, Scale: 0}, NewDecimal(1, 0), true},
		{DecimalType{Precision: 38, Scale: 1}, NewDecimal(1, 0), false},
		{DecimalType{Precision: 20, Scale: 0}, Decimal{Unscaled: new(big.Int).Lsh(big.NewInt(1), 70)}, false},
		{DecimalType{Precision: 18, Scale: 0}, Decimal{Unscaled: new(big.Int).Lsh(big.NewInt(1), 70)}, false},
	}
	for _, c := range cases {
		f := NewField("c", c.typ, true)
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
			t.Errorf("put(%s, %#v) stores %v, normalizeValue makes %v", c.typ, c.v, fv[0], sv[0])
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
	st := NewStructType(
		NewField("id", TypeLong, false),
		NewField("label", TypeString, true),
		NewField("amount", DecimalType{Precision: 12, Scale: 2}, true),
		NewField("at", TypeTimestamp, true),
	)
	const n = 5000
	var rows, want []Row
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := int64(0); i < n; i++ {
		label := fmt.Sprintf("row %d %s", i, string(rune('a'+i%26)))
		at := epoch.Add(time.Duration(i) * time.Millisecond)
		switch {
		case i%7 == 0:
			want = append(want, Row{i, nil, nil, at})
			rows = append(rows, Row{i, nil, nil, at})
		case i%2 == 0:
			want = append(want, Row{i, label, NewDecimal(i*10, 2), at})
			rows = append(rows, Row{i, label, NewDecimal(i*10, 2), at})
		default:
			want = append(want, Row{i, label, NewDecimal(i*10, 2), at})
			rows = append(rows, Row{int(i), []byte(label), NewDecimal(i, 1), at.In(time.FixedZone("X", -7200))})
		}
	}
	add, err := WriteDataFile(ctx, dir, st, nil, nil, rows, WriteOptions{RowGroupRows: 1500})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	assertSameRows(t, "many batches", got, want)
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

	_, err = WriteDataFile(ctx, dir, st, nil, nil, []Row{{int64(1), "x", NewDecimal(1_000_000_000_000, 2), epoch}}, WriteOptions{})
	if !errors.Is(err, ErrInvalidValue) {
		t.Errorf("13-digit value in decimal(12,2): err %v, want ErrInvalidValue", err)
	}
	_, err = WriteDataFile(ctx, dir, st, nil, nil, []Row{{nil, "x", nil, epoch}}, WriteOptions{})
	if !errors.Is(err, ErrInvalidValue) {
		t.Errorf("null in a non-nullable column: err %v, want ErrInvalidValue", err)
	}
}

// TestShredInColumnOrder checks which schemas the shredder walks in column
// order (structs and arrays of one leaf column), and writes a changelog-like
// schema with null, empty and filled nested values and reads it back.
func TestShredInColumnOrder(t *testing.T) {
	ctx := context.Background()
	data := []*StructField{NewField("id", TypeLong, true), NewField("name", TypeString, true)}
	st := NewStructType(append(append([]*StructField{}, data...),
		NewField("_op", TypeString, false),
		NewField("_before", NewStructType(append(append([]*StructField{}, data...),
			NewField("inner", NewStructType(NewField("x", TypeInteger, true)), true))...), true),
		NewField("_unchanged", &ArrayType{ElementType: TypeString}, true),
		NewField("nums", &ArrayType{ElementType: &ArrayType{ElementType: TypeLong, ContainsNull: true}, ContainsNull: true}, true),
		NewField("tail", TypeBoolean, true))...)
	if !inColumnOrder(st) {
		t.Fatal("a schema of structs and arrays of one leaf column is not shredded in column order")
	}
	for _, dt := range []DataType{
		&ArrayType{ElementType: NewStructType(NewField("a", TypeLong, true), NewField("b", TypeLong, true))},
		&MapType{KeyType: TypeString, ValueType: TypeLong},
		NewStructType(NewField("m", &MapType{KeyType: TypeString, ValueType: TypeLong}, true)),
	} {
		if inColumnOrder(dt) {
			t.Errorf("%s is taken as shredded in column order", dt)
		}
	}
	var rows []Row
	for i := int64(0); i < 3000; i++ {
		var before, unchanged, nums any
		switch i % 4 {
		case 1:
			before, unchanged, nums = Row{i, "old", Row{int32(i)}}, []any{}, []any{[]any{}, nil}
		case 2:
			before, unchanged, nums = Row{nil, nil, nil}, []any{"name", "id"}, []any{[]any{int64(1), nil, int64(i)}}
		case 3:
			before, nums = Row{i, fmt.Sprint(i), Row{nil}}, []any{}
		}
		rows = append(rows, Row{i, fmt.Sprintf("n%d", i), "update", before, unchanged, nums, i%3 == 0})
	}
	dir := t.TempDir()
	add, err := WriteDataFile(ctx, dir, st, nil, nil, rows, WriteOptions{RowGroupRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	assertSameRows(t, "in column order", got, rows)
}
