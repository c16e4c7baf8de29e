package parquet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// flatTypesSchema has a column of every primitive and decimal width, all
// nullable but one.
func flatTypesSchema() *types.StructType {
	return types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("b", types.TypeBoolean, true),
		types.NewField("i8", types.TypeByte, true),
		types.NewField("i16", types.TypeShort, true),
		types.NewField("i32", types.TypeInteger, true),
		types.NewField("i64", types.TypeLong, true),
		types.NewField("f32", types.TypeFloat, true),
		types.NewField("f64", types.TypeDouble, true),
		types.NewField("d9", types.DecimalType{Precision: 9, Scale: 2}, true),
		types.NewField("d18", types.DecimalType{Precision: 18, Scale: 4}, true),
		types.NewField("d38", types.DecimalType{Precision: 38, Scale: 10}, true),
		types.NewField("d20", types.DecimalType{Precision: 20, Scale: 0}, true),
		types.NewField("s", types.TypeString, true),
		types.NewField("bin", types.TypeBinary, true),
		types.NewField("date", types.TypeDate, true),
		types.NewField("ts", types.TypeTimestamp, true),
		types.NewField("ntz", types.TypeTimestampNTZ, true),
	)
}

// flatTypesRow returns row i of a table of flatTypesSchema: nulls in
// changing patterns (whole runs of them too), extreme and ordinary values,
// and values of other Go types than readers return, which the writer
// converts.
func flatTypesRow(t *testing.T, i int) types.Row {
	wide := new(big.Int).Exp(big.NewInt(10), big.NewInt(38), nil)
	wide.Sub(wide, big.NewInt(int64(i+1)))
	if i%2 == 1 {
		wide.Neg(wide)
	}
	d20 := new(big.Int).Mul(big.NewInt(int64(i-50)), big.NewInt(1_000_000_007_000))
	paris := time.FixedZone("CET", 3600)
	at := time.Date(1969, 12, 31, 23, 59, 59, 999_000, time.UTC).Add(time.Duration(i*i) * 997 * time.Millisecond)
	strs := []string{"", "héllo wörld 😈", "ascii", "日本語のテキスト", strings.Repeat("z", 40), "a\x00b"}
	r := types.Row{
		int64(i),
		i%3 == 0,
		int8(i%256 - 128),
		int16(i*331%65536 - 32768),
		int32(i*7919) - 1_000_000,
		int64(i) * -922337203685477,
		float32(i) / 4,
		float64(i) * -1.5e300 / 1000,
		types.NewDecimal(int64(i*12345)%999_999_999-499_999_999, 2),
		types.NewDecimal(int64(i)*-99_999_999_999_999+999_999_999_999_999_999/2, 4),
		types.Decimal{Unscaled: wide, Scale: 10},
		types.Decimal{Unscaled: d20, Scale: 0},
		strs[i%len(strs)],
		[]byte{byte(i), 0, 255, byte(i >> 8)}[:i%5],
		types.DateFromDays(int32(i*37 - 20000)),
		at,
		at.Add(time.Hour),
	}
	switch i % 5 {
	case 1: // other Go types, converted by the writer
		r[4], r[5], r[6], r[7] = int(r[4].(int32)), int32(i), float64(r[6].(float32)), float32(i)
		r[8] = r[8].(types.Decimal).String()
		r[9] = types.NewDecimal(int64(i), 0)
		r[12], r[13] = []byte(r[12].(string)), string(r[13].([]byte))
		r[14], r[15], r[16] = types.DateFromDays(int32(i)).In(paris).Add(5*time.Hour), at.In(paris), at.In(paris)
	case 2:
		r[15], r[16] = at.Add(1500*time.Nanosecond), at.UnixMicro()
	}
	// Nulls: a column is null in rows whose number it divides, and every
	// nullable column is null from row 200 to 299.
	for c := 1; c < len(r); c++ {
		if i%(c+2) == 0 || i >= 200 && i < 300 {
			r[c] = nil
		}
	}
	return r
}

// normalizedRows returns the rows as readers return them.
func normalizedRows(t *testing.T, st *types.StructType, rows []types.Row) []types.Row {
	t.Helper()
	out := make([]types.Row, len(rows))
	for i, r := range rows {
		n, err := types.Normalize(st, r)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		out[i] = n.(types.Row)
	}
	return out
}

// referenceStats computes the stats of rows value by value, with the
// statistics collector the writer used to feed row by row.
func referenceStats(t *testing.T, st *types.StructType, rows []types.Row) string {
	t.Helper()
	s := newStatsCollector(st)
	for _, r := range normalizedRows(t, st, rows) {
		s.add(r)
	}
	js, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// assertSameRowsInOrder compares rows in order.
func assertSameRowsInOrder(t *testing.T, what string, got, want []types.Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d rows, want %d", what, len(got), len(want))
	}
	for i := range got {
		if g, w := rowstest.Canon(got[i]), rowstest.Canon(want[i]); g != w {
			t.Fatalf("%s: row %d differs\n got: %s\nwant: %s", what, i, g, w)
		}
	}
}

// closeAndRead closes a writer of a file under dir and returns its add
// action and the rows read back from it.
func closeAndRead(t *testing.T, w *testWriter, dir string, st *types.StructType) (*testAdd, []types.Row) {
	t.Helper()
	add, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadFile(context.Background(), filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	return add, rows
}

// checkRowGroups checks, with arrow-go, the number of row groups of a file
// and the null count of every column chunk against the rows.
func checkRowGroups(t *testing.T, path string, st *types.StructType, want []types.Row, rowGroupRows int) {
	t.Helper()
	pr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if n, w := pr.NumRowGroups(), (len(want)+rowGroupRows-1)/rowGroupRows; n != w {
		t.Errorf("%d row groups, want %d", n, w)
	}
	start := 0
	for rg := 0; rg < pr.NumRowGroups(); rg++ {
		meta := pr.MetaData().RowGroup(rg)
		n := int(meta.NumRows())
		if rg < pr.NumRowGroups()-1 && n != rowGroupRows {
			t.Errorf("row group %d has %d rows, want %d", rg, n, rowGroupRows)
		}
		for c, f := range st.Fields {
			cc, err := meta.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			stats, err := cc.Statistics()
			if err != nil || stats == nil {
				t.Fatalf("row group %d column %s: no statistics (%v)", rg, f.Name, err)
			}
			nulls := 0
			for _, r := range want[start : start+n] {
				if r[c] == nil {
					nulls++
				}
			}
			if stats.NullCount() != int64(nulls) {
				t.Errorf("row group %d column %s: null count %d, want %d", rg, f.Name, stats.NullCount(), nulls)
			}
			what := fmt.Sprintf("row group %d column %s", rg, f.Name)
			checkChunkBounds(t, what, stats, nulls == n)
			if stats.HasMinMax() {
				lo, hi := physicalBounds(t, f, want[start:start+n], c)
				if got := stats.EncodeMin(); !bytes.Equal(got, lo) {
					t.Errorf("%s: min %x, want %x", what, got, lo)
				}
				if got := stats.EncodeMax(); !bytes.Equal(got, hi) {
					t.Errorf("%s: max %x, want %x", what, got, hi)
				}
			}
		}
		start += n
	}
	if start != len(want) {
		t.Errorf("row groups hold %d rows, want %d", start, len(want))
	}
}

// physicalBounds returns the plain encodings of the smallest and largest
// non-null values of column c of rows, in the order of the column's Parquet
// type.
func physicalBounds(t *testing.T, f *types.StructField, rows []types.Row, c int) (lo, hi []byte) {
	t.Helper()
	node, err := parquetNode(f.Type, f.Nullable)
	if err != nil {
		t.Fatal(err)
	}
	typ := node.Type()
	col := newFlatColumn(f, 0, 0)
	for _, r := range rows {
		if r[c] != nil {
			if !col.put(r[c]) {
				t.Fatalf("column %s refuses %#v", f.Name, r[c])
			}
			col.addValue()
		}
	}
	vals, _ := col.appendValues(nil, 0, col.count, 0)
	min, max := vals[0], vals[0]
	for _, v := range vals[1:] {
		if typ.Compare(v, min) < 0 {
			min = v
		}
		if typ.Compare(v, max) > 0 {
			max = v
		}
	}
	return min.Bytes(), max.Bytes()
}

// checkChunkBounds checks that a column chunk has min and max statistics
// unless all its values are null or it is a FIXED_LEN_BYTE_ARRAY decimal,
// whose bounds parquet-go would get wrong.
func checkChunkBounds(t *testing.T, what string, stats metadata.TypedStatistics, allNull bool) {
	t.Helper()
	flba := stats.Descr().PhysicalType().String() == "FIXED_LEN_BYTE_ARRAY"
	if want := !allNull && !flba; stats.HasMinMax() != want {
		t.Errorf("%s: has min/max %v, want %v", what, stats.HasMinMax(), want)
	}
}

// TestColumnarWriteReadBack writes every flat column type column by column,
// in uneven Write calls over several row groups, and checks that arrow-go
// reads back every value and null, that each row group has the right rows
// and null counts, and that the Delta stats are those of the values one by
// one; with row groups encoded on goroutines of their own and inline.
func TestColumnarWriteReadBack(t *testing.T) {
	st := flatTypesSchema()
	var rows []types.Row
	for i := range 2500 {
		rows = append(rows, flatTypesRow(t, i))
	}
	want := normalizedRows(t, st, rows)
	for _, inline := range []bool{false, true} {
		for _, rg := range []int{2500, 1111, 333, 7} {
			t.Run(fmt.Sprintf("row groups of %d, inline %t", rg, inline), func(t *testing.T) {
				writeReadBack(t, st, rows, want, WriteOptions{RowGroupRows: int64(rg), Inline: inline})
			})
		}
	}
}

// writeReadBack writes rows in uneven Write calls with opts and checks
// what TestColumnarWriteReadBack says.
func writeReadBack(t *testing.T, st *types.StructType, rows, want []types.Row, opts WriteOptions) {
	t.Helper()
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := 0, 1; i < len(rows); i, n = i+n, n*3%101+1 {
		if err := w.Write(rows[i:min(i+n, len(rows))]); err != nil {
			t.Fatal(err)
		}
	}
	if w.NumRows() != int64(len(rows)) {
		t.Errorf("NumRows %d, want %d", w.NumRows(), len(rows))
	}
	add := closeReadBack(t, w, dir, st, want, int(opts.RowGroupRows))
	if ref := referenceStats(t, st, rows); add.Stats != ref {
		t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref)
	}
}

// closeReadBack closes w, writing into dir, and checks that the file reads
// back as want, in row groups of rowGroupRows rows (see checkRowGroups).
func closeReadBack(t *testing.T, w *testWriter, dir string, st *types.StructType, want []types.Row, rowGroupRows int) *testAdd {
	t.Helper()
	add, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, add.Path)
	got, err := ReadFile(context.Background(), path, st)
	if err != nil {
		t.Fatal(err)
	}
	assertSameRowsInOrder(t, "read back", got, want)
	checkRowGroups(t, path, st, want, rowGroupRows)
	return add
}

// TestColumnarStatsEdgeCases checks the Delta stats of columns whose bounds
// are special: NaN and infinities, strings that are not UTF-8 or longer
// than the prefix kept, negative zero, all-null columns, a single row.
func TestColumnarStatsEdgeCases(t *testing.T) {
	ctx := context.Background()
	st := types.NewStructType(
		types.NewField("f32", types.TypeFloat, true),
		types.NewField("f64", types.TypeDouble, true),
		types.NewField("s", types.TypeString, true),
		types.NewField("long", types.TypeString, true),
		types.NewField("none", types.TypeLong, true),
		types.NewField("z", types.TypeDouble, true),
		types.NewField("d38", types.DecimalType{Precision: 38, Scale: 0}, true),
	)
	maxRuneStr := strings.Repeat("é", 31) + string(maxRune) + string(maxRune) + "x"
	cases := map[string][]types.Row{
		"nan": {
			{float32(1), 2.0, "b", "x", nil, 0.0, types.NewDecimal(-1, 0)},
			{float32(math.NaN()), math.Inf(-1), "\xff\xfe", strings.Repeat("y", 40), nil, math.Copysign(0, -1), types.NewDecimal(1, 0)},
			{float32(-1), -2.0, "a", maxRuneStr, nil, 0.0, types.NewDecimal(0, 0)},
		},
		"one row":  {{float32(3), 4.0, "", "", nil, math.Copysign(0, -1), types.NewDecimal(-5, 0)}},
		"all null": {{nil, nil, nil, nil, nil, nil, nil}, {nil, nil, nil, nil, nil, nil, nil}},
		"inf in a later row group": {
			{float32(1), 1.0, "a", "a", int64(1), 1.0, types.NewDecimal(7, 0)},
			{float32(2), 2.0, "b", "b", int64(2), 2.0, types.NewDecimal(-7, 0)},
			{float32(math.Inf(1)), math.NaN(), "c", "c", int64(3), 3.0, nil},
		},
	}
	for name, rows := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			add, err := writeDataFile(ctx, dir, st, nil, rows, WriteOptions{RowGroupRows: 2})
			if err != nil {
				t.Fatal(err)
			}
			if ref := referenceStats(t, st, rows); add.Stats != ref {
				t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref)
			}
			got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
			if err != nil {
				t.Fatal(err)
			}
			assertSameRowsInOrder(t, name, got, normalizedRows(t, st, rows))
		})
	}
}

// TestColumnarBadRows checks that a row the writer refuses leaves nothing of
// itself in the file, whichever column refuses it, and that the writer then
// goes on.
func TestColumnarBadRows(t *testing.T) {
	st := types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("s", types.TypeString, true),
		types.NewField("d", types.DecimalType{Precision: 5, Scale: 1}, true),
		types.NewField("w", types.DecimalType{Precision: 25, Scale: 1}, true),
		types.NewField("n", types.TypeInteger, false),
	)
	good := func(i int) types.Row {
		return types.Row{int64(i), fmt.Sprint("row ", i), types.NewDecimal(int64(i), 1), types.NewDecimal(int64(-i), 1), int32(i)}
	}
	bad := []types.Row{
		{int64(100), "x", types.NewDecimal(100000, 1), nil, int32(1)},  // 6 digits in decimal(5,1)
		{int64(101), "x", types.NewDecimal(1, 2), nil, int32(1)},       // loses a digit
		{int64(102), "x", nil, nil, nil},                               // null in a non-nullable column
		{int64(103), 5, nil, nil, int32(1)},                            // not a string
		{int64(104), "x", nil, types.NewDecimal(1, 0), int64(1) << 40}, // out of range for integer
		{nil, "x", nil, nil, int32(1)},                                 // null first column
		{int64(105), "x", nil, mustDec(t, "1e30"), int32(1)},           // too wide
	}
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	var want []types.Row
	for i, b := range bad {
		for j := range 2 {
			r := good(10*i + j)
			if err := w.Write([]types.Row{r}); err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
		}
		if err := w.Write([]types.Row{b}); !errors.Is(err, types.ErrInvalidValue) {
			t.Errorf("bad row %d: err %v, want ErrInvalidValue", i, err)
		}
	}
	add, got := closeAndRead(t, w, dir, st)
	assertSameRowsInOrder(t, "after bad rows", got, normalizedRows(t, st, want))
	if ref := referenceStats(t, st, want); add.Stats != ref {
		t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref)
	}
}

// TestColumnarEmptyAndAbort writes a file of no rows, which reads back
// empty, and aborts a writer while a row group may still be encoding,
// which leaves no file.
func TestColumnarEmptyAndAbort(t *testing.T) {
	ctx := context.Background()
	st := types.NewStructType(types.NewField("id", types.TypeLong, true), types.NewField("s", types.TypeString, true))
	dir := t.TempDir()
	add, err := writeDataFile(ctx, dir, st, nil, nil, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty file: %d rows, %v", len(got), err)
	}
	if add.Stats != `{"numRecords":0,"minValues":{},"maxValues":{},"nullCount":{"id":0,"s":0}}` {
		t.Errorf("empty file stats %s", add.Stats)
	}

	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	var rows []types.Row
	for i := range 95 {
		rows = append(rows, types.Row{int64(i), "abc"})
	}
	if err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if _, err := os.Stat(filepath.Join(dir, w.Path())); !os.IsNotExist(err) {
		t.Errorf("aborted file: %v", err)
	}
	if _, err := w.Close(); err == nil {
		t.Error("Close after Abort succeeded")
	}
}

// TestColumnarNestedFields writes a changelog-like schema, whose struct,
// array and map columns are shredded apart from its leaf columns, over
// several row groups with refused rows in between and a run of rows whose
// nested fields are null (as inserts have no before image), and checks the values
// arrow-go reads back and the stats against those of the values one by one.
func TestColumnarNestedFields(t *testing.T) {
	ctx := context.Background()
	data := []*types.StructField{types.NewField("id", types.TypeLong, true), types.NewField("name", types.TypeString, true),
		types.NewField("amount", types.DecimalType{Precision: 30, Scale: 2}, true)}
	st := types.NewStructType(append(append([]*types.StructField{}, data...),
		types.NewField("_op", types.TypeString, false),
		types.NewField("_before", types.NewStructType(data...), true),
		types.NewField("_unchanged", &types.ArrayType{ElementType: types.TypeString}, true),
		types.NewField("m", &types.MapType{KeyType: types.TypeString, ValueType: types.TypeLong, ValueContainsNull: true}, true),
		types.NewField("grid", &types.ArrayType{ElementType: &types.ArrayType{ElementType: types.TypeInteger, ContainsNull: true}, ContainsNull: true}, false),
		types.NewField("tail", types.TypeBoolean, true))...)
	row := func(i int) types.Row {
		if i >= 1000 && i < 2500 {
			// A run of inserts: whole row groups, and slices of others,
			// in which the nested fields are null throughout.
			return types.Row{int64(i), fmt.Sprintf("n%d", i), nil, "insert", nil, nil, nil, []any{}, nil}
		}
		var before, unchanged, m any
		switch i % 4 {
		case 1:
			before, unchanged, m = types.Row{int64(-i), "old", types.NewDecimal(int64(i)*-101, 2)}, []any{}, []types.MapEntry{}
		case 2:
			before, unchanged = types.Row{nil, nil, nil}, []any{"name", "id"}
			m = map[string]any{"b": int64(i), "a": nil}
		case 3:
			before, m = types.Row{int64(i), fmt.Sprint(i), nil}, map[string]any{"k": 7}
		}
		grid := []any{[]any{int32(i), nil}, nil, []any{}}[:i%4]
		return types.Row{int64(i), fmt.Sprintf("n%d", i), types.NewDecimal(int64(i)*1001, 2), "update", before, unchanged, m, grid, i%3 == 0}
	}
	bad := []types.Row{
		{int64(1), "x", nil, "insert", types.Row{"not a long", nil, nil}, nil, nil, []any{}, nil},
		{int64(1), "x", nil, "insert", nil, []any{nil}, nil, []any{}, nil}, // null element, not allowed
		{int64(1), "x", nil, "insert", nil, nil, nil, nil, nil},            // null grid
		{int64(1), "x", nil, "insert", nil, nil, map[string]any{"k": "v"}, []any{}, nil},
		{int64(1), 5, nil, "insert", nil, nil, nil, []any{}, nil}, // a leaf column refuses it
	}
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 700})
	if err != nil {
		t.Fatal(err)
	}
	var want []types.Row
	for i := range 3000 {
		r := row(i)
		if err := w.Write([]types.Row{r}); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
		if i%600 == 5 {
			b := bad[i/600]
			if err := w.Write([]types.Row{b}); !errors.Is(err, types.ErrInvalidValue) {
				t.Errorf("bad row %d: err %v, want ErrInvalidValue", i/600, err)
			}
		}
	}
	add, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, add.Path)
	got, err := ReadFile(ctx, path, st)
	if err != nil {
		t.Fatal(err)
	}
	norm := normalizedRows(t, st, want)
	assertSameRowsInOrder(t, "nested", got, norm)
	if ref := referenceStats(t, st, want); add.Stats != ref {
		t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref)
	}
	pr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if pr.NumRowGroups() != 5 {
		t.Errorf("%d row groups, want 5", pr.NumRowGroups())
	}
}

// TestColumnarEncodeError checks that a row group that fails to reach the
// file fails the writes after it and Close, which removes the file.
func TestColumnarEncodeError(t *testing.T) {
	st := types.NewStructType(types.NewField("id", types.TypeLong, true), types.NewField("s", types.TypeString, true))
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 10})
	if err != nil {
		t.Fatal(err)
	}
	w.file.Close() // the row groups cannot be written
	var werr error
	long := strings.Repeat("x", 1000)
	for i := 0; i < 10000 && werr == nil; i++ {
		werr = w.Write([]types.Row{{int64(i), fmt.Sprint(long, i)}})
	}
	if werr == nil {
		t.Error("writes after a failed row group succeeded")
	}
	if err := w.Write([]types.Row{{int64(1), "x"}}); err == nil {
		t.Errorf("a write after the error %v succeeded", werr)
	}
	if _, err := w.Close(); err == nil {
		t.Error("Close succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, w.Path())); !os.IsNotExist(err) {
		t.Errorf("file of a failed writer: %v", err)
	}
}

// TestCloseRefusesAFileMissingRows checks that Close compares the rows the
// file holds with the rows written: a row that did not reach the file (here
// counted without being written) fails the close and leaves no file.
func TestCloseRefusesAFileMissingRows(t *testing.T) {
	st := types.NewStructType(types.NewField("id", types.TypeLong, false))
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if err := w.Write([]types.Row{{int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	w.stats.numRecords++
	if _, err := w.Close(); !errors.Is(err, ErrRowsLost) || !strings.Contains(err.Error(), "8 rows written, the file holds 7") {
		t.Fatalf("close: %v, want ErrRowsLost: 8 rows written, the file holds 7", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused file was left behind: %v", entries)
	}
}

// TestStringBoundsSplitCharacter checks that a string column whose values
// are not UTF-8 one by one, although their bytes together are ("\xc3" and
// "\xa9" make "é"), has no bounds, the first such value saying why; the
// bounds then are not those of the valid values around them.
func TestStringBoundsSplitCharacter(t *testing.T) {
	c := newFlatColumn(types.NewField("s", types.TypeString, true), 0, 0)
	values := []any{"a", "\xc3", "\xa9", "\U0001F600", nil}
	for _, v := range values {
		if err := c.add(v); err != nil {
			t.Fatal(err)
		}
	}
	b := c.bounds(len(values))
	if b.unbounded != "\xc3" || b.lo != nil || b.hi != nil || b.nulls != 1 {
		t.Errorf("bounds %+v, want none, unbounded by %q, 1 null", b, "\xc3")
	}
	c.truncate(1)
	for _, v := range []any{"b", "\U0001F600"} {
		if err := c.add(v); err != nil {
			t.Fatal(err)
		}
	}
	if b := c.bounds(3); b.unbounded != nil || b.lo != "a" || b.hi != "\U0001F600" {
		t.Errorf("bounds %+v, want a to \U0001F600", b)
	}
}

// TestFlatColumnKeepsNullsFromTheFirst checks a column that keeps which
// rows are null only from its first null on: values, a first null after
// them, truncations on either side of it, and reuse once emptied, give the
// Parquet values of the rows in order.
func TestFlatColumnKeepsNullsFromTheFirst(t *testing.T) {
	c := newFlatColumn(types.NewField("n", types.TypeLong, true), 0, 0)
	var want []any
	add := func(vs ...any) {
		for _, v := range vs {
			if err := c.add(v); err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
	}
	truncate := func(rows int) {
		c.truncate(rows)
		want = want[:rows]
	}
	check := func(when string) {
		t.Helper()
		vals, k := c.appendValues(nil, 0, c.rows(), 0)
		var got []any
		for _, v := range vals {
			if v.IsNull() {
				got = append(got, nil)
			} else {
				got = append(got, v.Int64())
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || k != c.count {
			t.Fatalf("%s: values %v (%d not null), want %v", when, got, k, want)
		}
	}
	add(int64(1), int64(2), int64(3))
	check("values only")
	truncate(2)
	add(nil, int64(4))
	check("a first null after values")
	truncate(2)
	check("truncated before the first null")
	add(int64(5), nil)
	truncate(3)
	add(int64(6))
	check("truncated after a null")
	truncate(0)
	add(int64(7), int64(8))
	check("reused once emptied")
}

// TestRowGroupsEndAtTheBytesOfEachByteArrayType writes rows of a long
// and a column of each type whose values are byte arrays (a string, a
// binary, a decimal too wide for an INT64): each row group ends with the
// row that brings its bytes to RowGroupBytes.
func TestRowGroupsEndAtTheBytesOfEachByteArrayType(t *testing.T) {
	const budget, rows = 4 << 10, 1000
	for _, tc := range []struct {
		typ   types.DataType
		bytes int
		value func(i int64) any
	}{
		{types.TypeString, 100, func(i int64) any { return strings.Repeat(string(rune('a'+i%26)), 100) }},
		{types.TypeBinary, 100, func(i int64) any { return []byte(strings.Repeat(string(rune('a'+i%26)), 100)) }},
		{types.DecimalType{Precision: 38, Scale: 0}, 16, func(i int64) any { return types.NewDecimal(i, 0) }},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			st := types.NewStructType(types.NewField("id", types.TypeLong, false), types.NewField("v", tc.typ, true))
			dir := t.TempDir()
			w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 1 << 20, RowGroupBytes: budget})
			if err != nil {
				t.Fatal(err)
			}
			var want []types.Row
			for i := range int64(rows) {
				want = append(want, types.Row{i, tc.value(i)})
			}
			if err := w.Write(want); err != nil {
				t.Fatal(err)
			}
			closeReadBack(t, w, dir, st, want, (budget+tc.bytes-1)/tc.bytes)
		})
	}
}

// TestRowGroupsEndAtTheirBytes writes rows of wide strings, by Write and by
// RowBuilder: each row group ends with the row that brings its string
// bytes to RowGroupBytes, long before RowGroupRows, and the columns never
// make room for much more than that, even when many rows are expected.
func TestRowGroupsEndAtTheirBytes(t *testing.T) {
	const budget = 64 << 10
	st := types.NewStructType(types.NewField("id", types.TypeLong, false), types.NewField("doc", types.TypeString, true))
	for _, tc := range []struct{ wide, written int }{{10_000, 200}, {50, 4000}} {
		perGroup := (budget + tc.wide - 1) / tc.wide
		var want []types.Row
		for i := range int64(tc.written) {
			want = append(want, types.Row{i, strings.Repeat(string(rune('a'+i%26)), tc.wide)})
		}
		for _, byBuilder := range []bool{false, true} {
			t.Run(fmt.Sprintf("wide=%d/builder=%v", tc.wide, byBuilder), func(t *testing.T) {
				dir := t.TempDir()
				w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 1 << 20, RowGroupBytes: budget, ExpectedRows: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range want {
					if byBuilder {
						b := w.Row()
						b.Int(0, r[0].(int64))
						b.Bytes(1, []byte(r[1].(string)))
						err = b.End()
					} else {
						err = w.Write([]types.Row{r})
					}
					if err != nil {
						t.Fatal(err)
					}
					if g := w.columns.filling; g != nil && cap(g.cols[1].data) > 2*budget {
						t.Fatalf("after row %d the row group has room for %d bytes of strings, want at most %d", r[0], cap(g.cols[1].data), 2*budget)
					}
				}
				closeReadBack(t, w, dir, st, want, perGroup)
			})
		}
	}
}
