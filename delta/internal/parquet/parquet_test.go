package parquet

import (
	"context"
	"math/big"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

func allTypesSchema() *types.StructType {
	return types.NewStructType(
		types.NewField("b", types.TypeBoolean, true),
		types.NewField("i8", types.TypeByte, true),
		types.NewField("i16", types.TypeShort, true),
		types.NewField("i32", types.TypeInteger, true),
		types.NewField("i64", types.TypeLong, false),
		types.NewField("f32", types.TypeFloat, true),
		types.NewField("f64", types.TypeDouble, true),
		types.NewField("d9", types.DecimalType{Precision: 9, Scale: 2}, true),
		types.NewField("d18", types.DecimalType{Precision: 18, Scale: 4}, true),
		types.NewField("d38", types.DecimalType{Precision: 38, Scale: 10}, true),
		types.NewField("s", types.TypeString, true),
		types.NewField("bin", types.TypeBinary, true),
		types.NewField("date", types.TypeDate, true),
		types.NewField("ts", types.TypeTimestamp, true),
		types.NewField("ntz", types.TypeTimestampNTZ, true),
		types.NewField("arr", &types.ArrayType{ElementType: types.TypeLong, ContainsNull: true}, true),
		types.NewField("sarr", &types.ArrayType{ElementType: types.TypeString, ContainsNull: false}, true),
		types.NewField("st", types.NewStructType(types.NewField("x", types.TypeInteger, true), types.NewField("y", types.TypeString, true)), true),
		types.NewField("m", &types.MapType{KeyType: types.TypeString, ValueType: types.TypeLong, ValueContainsNull: true}, true),
	)
}

func mustDec(t *testing.T, s string) types.Decimal {
	t.Helper()
	d, err := types.ParseDecimal(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func allTypesRows(t *testing.T) []types.Row {
	ts := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UTC()
	}
	return []types.Row{
		{true, int8(-128), int16(32767), int32(-2147483648), int64(9223372036854775807), float32(1.5), 2.25,
			mustDec(t, "1234567.89"), mustDec(t, "-12345678901234.5678"), mustDec(t, "9999999999999999999999999999.9999999999"),
			"héllo wörld 😈", []byte{0, 1, 2, 255}, types.DateFromDays(19000), ts("2024-02-29T12:34:56.123456Z"), ts("2024-02-29T12:34:56.654321Z"),
			[]any{int64(1), nil, int64(3)}, []any{"a", "b"}, types.Row{int32(7), "seven"},
			[]types.MapEntry{{Key: "k1", Value: int64(1)}, {Key: "k2", Value: nil}}},
		{false, int8(127), int16(-32768), int32(2147483647), int64(-9223372036854775808), float32(-0.25), -1e300,
			mustDec(t, "-0.01"), mustDec(t, "0.0001"), mustDec(t, "-9999999999999999999999999999.9999999999"),
			"", []byte{}, types.DateFromDays(-1000), ts("1969-07-20T20:17:40.000001Z"), ts("1900-01-01T00:00:00Z"),
			[]any{}, []any{}, types.Row{nil, nil}, []types.MapEntry{}},
		{nil, nil, nil, nil, int64(0), nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
		{true, int8(0), int16(0), int32(0), int64(42), float32(0), 0.0,
			mustDec(t, "0.00"), mustDec(t, "-1.0000"), mustDec(t, "-0.0000000001"),
			strings.Repeat("z", 40), []byte("x"), types.DateFromDays(0), ts("1970-01-01T00:00:00Z"), ts("2262-04-11T23:47:16.854775Z"),
			[]any{nil}, []any{"only"}, types.Row{int32(-1), "ü"}, []types.MapEntry{{Key: "z", Value: int64(-5)}}},
	}
}

func TestParquetRoundTripAllTypes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := allTypesSchema()
	rows := allTypesRows(t)
	for _, codec := range []string{CompressionSnappy, CompressionZstd} {
		add, err := writeDataFile(ctx, dir, st, nil, rows, WriteOptions{Compression: codec, RowGroupRows: 2})
		if err != nil {
			t.Fatalf("%s: write: %v", codec, err)
		}
		got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil {
			t.Fatalf("%s: read: %v", codec, err)
		}
		rowstest.AssertSameRows(t, codec, got, rows)
		pr, err := file.OpenParquetFile(filepath.Join(dir, add.Path), false)
		if err != nil {
			t.Fatal(err)
		}
		if pr.NumRowGroups() != 2 {
			t.Errorf("%s: %d row groups, want 2", codec, pr.NumRowGroups())
		}
		pr.Close()
	}
}

// writeAndOpen writes rows to a data file of schema st with the default
// options and opens it with arrow-go's Parquet reader, which the test's end
// closes.
func writeAndOpen(t *testing.T, st *types.StructType, rows []types.Row) *file.Reader {
	t.Helper()
	dir := t.TempDir()
	add, err := writeDataFile(context.Background(), dir, st, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := file.OpenParquetFile(filepath.Join(dir, add.Path), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	return pr
}

func TestParquetPhysicalTypes(t *testing.T) {
	st := allTypesSchema()
	pr := writeAndOpen(t, st, allTypesRows(t))
	sch := pr.MetaData().Schema
	type want struct {
		phys    parquet.Type
		logical string
		flba    int
	}
	wants := map[string]want{
		"b":                {parquet.Types.Boolean, "", 0},
		"i8":               {parquet.Types.Int32, "Int(bitWidth=8, isSigned=true)", 0},
		"i16":              {parquet.Types.Int32, "Int(bitWidth=16, isSigned=true)", 0},
		"i32":              {parquet.Types.Int32, "Int(bitWidth=32, isSigned=true)", 0},
		"i64":              {parquet.Types.Int64, "Int(bitWidth=64, isSigned=true)", 0},
		"f32":              {parquet.Types.Float, "", 0},
		"f64":              {parquet.Types.Double, "", 0},
		"d9":               {parquet.Types.Int32, "Decimal(precision=9, scale=2)", 0},
		"d18":              {parquet.Types.Int64, "Decimal(precision=18, scale=4)", 0},
		"d38":              {parquet.Types.FixedLenByteArray, "Decimal(precision=38, scale=10)", 16},
		"s":                {parquet.Types.ByteArray, "String", 0},
		"bin":              {parquet.Types.ByteArray, "", 0},
		"date":             {parquet.Types.Int32, "Date", 0},
		"ts":               {parquet.Types.Int64, "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)", 0},
		"ntz":              {parquet.Types.Int64, "Timestamp(isAdjustedToUTC=false, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)", 0},
		"arr.list.element": {parquet.Types.Int64, "Int(bitWidth=64, isSigned=true)", 0},
	}
	seen := map[string]bool{}
	for i := 0; i < sch.NumColumns(); i++ {
		c := sch.Column(i)
		path := c.Path()
		w, ok := wants[path]
		if !ok {
			continue
		}
		seen[path] = true
		if c.PhysicalType() != w.phys {
			t.Errorf("%s: physical %s, want %s", path, c.PhysicalType(), w.phys)
		}
		lt := ""
		if c.LogicalType() != nil && !c.LogicalType().IsNone() {
			lt = c.LogicalType().String()
		}
		if lt != w.logical {
			t.Errorf("%s: logical %q, want %q", path, lt, w.logical)
		}
		if w.flba > 0 && c.TypeLength() != w.flba {
			t.Errorf("%s: length %d, want %d", path, c.TypeLength(), w.flba)
		}
	}
	for p := range wants {
		if !seen[p] {
			t.Errorf("column %s not found", p)
		}
	}
	// timestamp_ntz carries no legacy TIMESTAMP_MICROS annotation, and the
	// FIXED_LEN_BYTE_ARRAY decimal has no min/max (parquet-go would order it
	// as unsigned bytes) while the INT64 decimal has them.
	rg := pr.MetaData().RowGroup(0)
	for i := 0; i < sch.NumColumns(); i++ {
		c := sch.Column(i)
		if c.Path() == "ntz" && c.ConvertedType() != schema.ConvertedTypes.None {
			t.Errorf("ntz converted type %s", c.ConvertedType())
		}
		if c.Path() != "d38" && c.Path() != "d18" {
			continue
		}
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := cc.Statistics()
		if err != nil {
			t.Fatal(err)
		}
		hasMinMax := stats != nil && stats.HasMinMax()
		if hasMinMax != (c.Path() == "d18") {
			t.Errorf("%s: has min/max = %v", c.Path(), hasMinMax)
		}
		if c.Path() == "d38" {
			// The page index bounds span the whole signed range.
			rgi, err := pr.GetPageIndexReader().RowGroup(0)
			if err != nil {
				t.Fatal(err)
			}
			ci, err := rgi.GetColumnIndex(i)
			if err != nil || ci == nil {
				t.Fatalf("d38 column index: %v", err)
			}
			for p, null := range ci.GetNullPages() {
				lo, hi := ci.GetMinValues()[p], ci.GetMaxValues()[p]
				if !null && (len(lo) != 16 || lo[0] != 0x80 || hi[0] != 0x7f) {
					t.Errorf("d38 page %d bounds %x %x", p, lo, hi)
				}
			}
		}
	}
	// The array column uses the standard 3-level LIST layout.
	root := sch.Root()
	arr := root.Field(root.FieldIndexByName("arr")).(*schema.GroupNode)
	if arr.LogicalType().String() != "List" || arr.RepetitionType() != parquet.Repetitions.Optional {
		t.Errorf("arr: %s %s", arr.LogicalType(), arr.RepetitionType())
	}
	list := arr.Field(0).(*schema.GroupNode)
	if list.Name() != "list" || list.RepetitionType() != parquet.Repetitions.Repeated {
		t.Errorf("arr.list: %s %s", list.Name(), list.RepetitionType())
	}
	el := list.Field(0)
	if el.Name() != "element" || el.RepetitionType() != parquet.Repetitions.Optional {
		t.Errorf("arr.list.element: %s %s", el.Name(), el.RepetitionType())
	}
	// Field order is the schema order.
	var names []string
	for i := 0; i < root.NumFields(); i++ {
		names = append(names, root.Field(i).Name())
	}
	if strings.Join(names, ",") != strings.Join(st.FieldNames(), ",") {
		t.Errorf("field order %v, want %v", names, st.FieldNames())
	}
}

func TestDecimalWidths(t *testing.T) {
	for p := 1; p <= 38; p++ {
		n := decimalByteLen(p)
		maxv := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil)
		maxv.Sub(maxv, big.NewInt(1))
		lim := new(big.Int).Lsh(big.NewInt(1), uint(8*n-1))
		if maxv.Cmp(lim) >= 0 {
			t.Errorf("p=%d: %d bytes too small", p, n)
		}
		if n > 1 {
			lim2 := new(big.Int).Lsh(big.NewInt(1), uint(8*(n-1)-1))
			if maxv.Cmp(lim2) < 0 {
				t.Errorf("p=%d: %d bytes not minimal", p, n)
			}
		}
	}
	if decimalByteLen(38) != 16 || decimalByteLen(19) != 9 {
		t.Errorf("byte lengths %d %d", decimalByteLen(38), decimalByteLen(19))
	}
}

func TestStatsMatchData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := allTypesSchema()
	add, err := writeDataFile(ctx, dir, st, nil, allTypesRows(t), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseStats(add.Stats)
	if err != nil {
		t.Fatal(err)
	}
	if s.NumRecords != 4 {
		t.Errorf("numRecords %d", s.NumRecords)
	}
	str := func(m map[string]any, k string) string {
		v, ok := m[k]
		if !ok {
			return "<absent>"
		}
		switch x := v.(type) {
		case string:
			return x
		case map[string]any:
			return "obj"
		}
		return strings.TrimSpace(strings.Trim(canonJSON(v), `"`))
	}
	checks := []struct{ key, min, max string }{
		{"i8", "-128", "127"},
		{"i16", "-32768", "32767"},
		{"i32", "-2147483648", "2147483647"},
		{"i64", "-9223372036854775808", "9223372036854775807"},
		{"f32", "-0.25", "1.5"},
		{"f64", "-1e+300", "2.25"},
		{"d9", "-0.01", "1234567.89"},
		{"d18", "-12345678901234.5678", "0.0001"},
		{"d38", "-9999999999999999999999999999.9999999999", "9999999999999999999999999999.9999999999"},
		{"s", "", strings.Repeat("z", 32) + string(maxRune)},
		{"date", "1967-04-07", "2022-01-08"},
		{"ts", "1969-07-20T20:17:40.000Z", "2024-02-29T12:34:56.123Z"},
		{"ntz", "1900-01-01T00:00:00.000", "2262-04-11T23:47:16.854"},
		{"b", "<absent>", "<absent>"},
		{"bin", "<absent>", "<absent>"},
		{"arr", "<absent>", "<absent>"},
		{"m", "<absent>", "<absent>"},
	}
	for _, c := range checks {
		if got := str(s.MinValues, c.key); got != c.min {
			t.Errorf("min %s = %q, want %q", c.key, got, c.min)
		}
		if got := str(s.MaxValues, c.key); got != c.max {
			t.Errorf("max %s = %q, want %q", c.key, got, c.max)
		}
	}
	for _, f := range st.Fields {
		if _, ok := s.NullCount[f.Name]; !ok {
			t.Errorf("no nullCount for %s", f.Name)
		}
	}
	if got := canonJSON(s.NullCount["s"]); got != "1" {
		t.Errorf("nullCount s = %s", got)
	}
	if got := canonJSON(s.NullCount["st"]); got != `{"x":2,"y":2}` {
		t.Errorf("nullCount st = %s", got)
	}
	if got := canonJSON(s.MinValues["st"]); got != `{"x":-1,"y":"seven"}` {
		t.Errorf("minValues st = %s", got)
	}
	if got := canonJSON(s.NullCount["arr"]); got != "1" {
		t.Errorf("nullCount arr = %s", got)
	}
}

// TestParquetBoundsInTheIndexNotInPageHeaders checks where a data file's
// bounds are: each column chunk's statistics and column index hold them,
// as readers look for them, and no data page header repeats them (a copy
// that cost a second pass over each page's values).
func TestParquetBoundsInTheIndexNotInPageHeaders(t *testing.T) {
	st, rows := benchOrdersRows(50_000)
	pr := writeAndOpen(t, st, rows)
	rg := pr.RowGroup(0)
	index, err := pr.GetPageIndexReader().RowGroup(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rg.NumColumns() {
		name := pr.MetaData().Schema.Column(i).Path()
		cc, err := rg.MetaData().ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if stats, err := cc.Statistics(); err != nil || stats == nil || !stats.HasMinMax() {
			t.Errorf("%s: column chunk has no bounds (%v)", name, err)
		}
		ci, err := index.GetColumnIndex(i)
		if err != nil || ci == nil {
			t.Fatalf("%s: no column index (%v)", name, err)
		}
		pages, err := rg.GetColumnPageReader(i)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for pages.Next() {
			p, ok := pages.Page().(file.DataPage)
			if !ok {
				continue
			}
			if s := p.Statistics(); s.HasMin || s.HasMax {
				t.Errorf("%s: page %d header holds bounds", name, n)
			}
			if len(ci.GetMinValues()[n]) == 0 && !ci.GetNullPages()[n] {
				t.Errorf("%s: page %d has no bounds in the column index", name, n)
			}
			n++
		}
		if err := pages.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 || n != len(ci.GetNullPages()) {
			t.Errorf("%s: %d data pages, %d in the column index", name, n, len(ci.GetNullPages()))
		}
	}
}
