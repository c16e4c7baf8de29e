package typemap

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// countWarner counts the warnings of a conversion.
type countWarner struct{ n int }

func (w *countWarner) Warn(string, string) { w.n++ }

// generalDecimal is the general path of the decimal conversion: what the
// fast path must agree with.
func generalDecimal(text string, p, s int) (delta.Decimal, bool) {
	d, err := delta.ParseDecimal(text)
	if err == nil {
		d, err = d.Rescale(int32(s))
	}
	if err != nil || decimalDigits(d) > p {
		return delta.Decimal{}, false
	}
	return d, true
}

func TestDecimalConversionAgreesWithTheGeneralPath(t *testing.T) {
	texts := []string{"0", "-0", "0.00", "-0.00", "1", "-1", "12.5", "12.50", "12.55", "12.", ".5", "-.5", ".", "-", "",
		"007", "0.05", "99.99", "100.00", "999999999999999999", "9999999999999999999", "-999999999999999999",
		"123456789012345678.9", "0.000000000000000001", "1e3", "1.5E+3", "NaN", "Infinity", "-Infinity", "+1", " 1",
		"1.2.3", "12a", "1234567890123456789012345678901234567890.0123456789"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		intDigits, fracDigits := rng.IntN(20), rng.IntN(6)
		s := ""
		if rng.IntN(3) == 0 {
			s = "-"
		}
		for range intDigits {
			s += fmt.Sprint(rng.IntN(10))
		}
		if fracDigits > 0 || rng.IntN(4) == 0 {
			s += "."
			for range fracDigits {
				s += fmt.Sprint(rng.IntN(10))
			}
		}
		texts = append(texts, s)
	}
	types := []delta.DecimalType{{Precision: 1, Scale: 0}, {Precision: 5, Scale: 2}, {Precision: 12, Scale: 2},
		{Precision: 18, Scale: 0}, {Precision: 18, Scale: 4}, {Precision: 19, Scale: 2}, {Precision: 38, Scale: 10},
		{Precision: 3, Scale: 3}}
	for _, dt := range types {
		for _, text := range texts {
			want, wantOK := generalDecimal(text, dt.Precision, dt.Scale)
			w := &countWarner{}
			got := ConverterFor(dt, "c", w)(&store.Value{Kind: store.KindNumeric, Bytes: []byte(text)})
			if !wantOK {
				if got != nil || w.n != 1 {
					t.Errorf("%s as %s: got %v with %d warnings, want null and one warning", text, dt, got, w.n)
				}
				continue
			}
			d, ok := got.(delta.Decimal)
			if !ok || d.Scale != want.Scale || d.Unscaled.Cmp(want.Unscaled) != 0 || w.n != 0 {
				t.Errorf("%s as %s: got %v with %d warnings, want %s", text, dt, got, w.n, want)
			}
		}
	}
}

// TestPuttersWriteWhatConvertersWrite writes queued values of every mapped
// type, ordinary and odd (infinities, NaN and oversized numerics, values
// of another kind than the column's, nulls), once converted to Go values
// and written as rows, once given to a RowBuilder by the columns' putters,
// and checks that both files hold the same rows and stats, and that both
// ways count the same warnings.
func TestPuttersWriteWhatConvertersWrite(t *testing.T) {
	i := func(k store.Kind, v int64) store.Value { return store.Value{Kind: k, Int: v} }
	b := func(k store.Kind, s string) store.Value { return store.Value{Kind: k, Bytes: []byte(s)} }
	null := store.Value{}
	text := b(store.KindString, "héllo")
	columns := []struct {
		typ  delta.DataType
		vals []store.Value
	}{
		{delta.TypeBoolean, []store.Value{i(store.KindBool, 1), i(store.KindBool, 0), null, text}},
		{delta.TypeShort, []store.Value{i(store.KindInt16, -32768), i(store.KindInt16, 7), null, i(store.KindInt32, 1)}},
		{delta.TypeInteger, []store.Value{i(store.KindInt32, math.MaxInt32), null, i(store.KindInt64, 5), text}},
		{delta.TypeLong, []store.Value{i(store.KindInt64, math.MinInt64), i(store.KindInt32, -3), i(store.KindInt16, 4),
			i(store.KindTime, 86399999999), null, text}},
		{delta.TypeFloat, []store.Value{i(store.KindFloat32, int64(math.Float32bits(-1.5))),
			i(store.KindFloat32, int64(math.Float32bits(float32(math.Inf(1))))), null, i(store.KindFloat64, 0)}},
		{delta.TypeDouble, []store.Value{i(store.KindFloat64, int64(math.Float64bits(math.NaN()))),
			i(store.KindFloat64, int64(math.Float64bits(2.25))), null, text}},
		{delta.DecimalType{Precision: 5, Scale: 2}, []store.Value{b(store.KindNumeric, "-123.45"), b(store.KindNumeric, "1.5"),
			b(store.KindNumeric, "1234.5"), b(store.KindNumeric, "NaN"), b(store.KindNumeric, "0.001"), null}},
		{delta.DecimalType{Precision: 18, Scale: 4}, []store.Value{b(store.KindNumeric, "99999999999999.9999"),
			b(store.KindNumeric, "-0.0001"), b(store.KindNumeric, "1e3"), b(store.KindNumeric, "Infinity"), null}},
		{delta.DecimalType{Precision: 30, Scale: 3}, []store.Value{b(store.KindNumeric, "123456789012345678901234567.891"),
			b(store.KindNumeric, "-42.5"), b(store.KindNumeric, "7"), null}},
		{delta.TypeString, []store.Value{text, b(store.KindNumeric, "12.50"), i(store.KindInt64, -9), b(store.KindBytes, "\x00\xff"),
			i(store.KindTimestamp, 1_700_000_000_000_000), null,
			{Kind: store.KindArray, Elems: []store.Value{text, null}}}},
		{delta.TypeBinary, []store.Value{b(store.KindBytes, "\x00\x01\xfe"), b(store.KindBytes, ""), null, text}},
		{delta.TypeDate, []store.Value{i(store.KindDate, -719162), i(store.KindDate, store.InfinityInt),
			i(store.KindDate, store.NegativeInfinityInt), i(store.KindDate, 20000), null, text}},
		{delta.TypeTimestamp, []store.Value{i(store.KindTimestamp, 1_700_000_000_123_456), i(store.KindTimestamp, store.InfinityInt),
			i(store.KindTimestamp, store.NegativeInfinityInt), null, i(store.KindDate, 3)}},
		{&delta.ArrayType{ElementType: delta.TypeInteger, ContainsNull: true}, []store.Value{
			{Kind: store.KindArray, Elems: []store.Value{i(store.KindInt32, 1), null}}, {Kind: store.KindArray}, null}},
	}
	var fields []*delta.StructField
	rows := 0
	for k, c := range columns {
		fields = append(fields, delta.NewField(string(rune('a'+k)), c.typ, true))
		rows = max(rows, len(c.vals))
	}
	rows *= 3
	st := delta.NewStructType(fields...)
	value := func(k, r int) *store.Value { return &columns[k].vals[r%len(columns[k].vals)] }

	ctx := context.Background()
	write := func(typed bool) (*delta.Add, []delta.Row, int) {
		t.Helper()
		dir := t.TempDir()
		w, err := delta.NewDataWriter(dir, st, nil, nil, delta.WriteOptions{RowGroupRows: 8})
		if err != nil {
			t.Fatal(err)
		}
		var warned countWarner
		var convs []Converter
		var puts []Putter
		for _, c := range columns {
			conv := ConverterFor(c.typ, "t.c", &warned)
			convs, puts = append(convs, conv), append(puts, PutterFor(c.typ, conv))
		}
		for r := range rows {
			if typed {
				b := w.Row()
				for k := range columns {
					puts[k](value(k, r), b, k)
				}
				if err := b.End(); err != nil {
					t.Fatalf("row %d: %v", r, err)
				}
				continue
			}
			row := make(delta.Row, len(columns))
			for k := range columns {
				row[k] = convs[k](value(k, r))
			}
			if err := w.Write([]delta.Row{row}); err != nil {
				t.Fatalf("row %d: %v", r, err)
			}
		}
		add, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := delta.ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil {
			t.Fatal(err)
		}
		return add, got, warned.n
	}
	convAdd, convRows, convWarned := write(false)
	putAdd, putRows, putWarned := write(true)
	if putAdd.Stats != convAdd.Stats {
		t.Errorf("stats\n putters: %s\n  converters: %s", putAdd.Stats, convAdd.Stats)
	}
	if putWarned != convWarned || convWarned == 0 {
		t.Errorf("putters counted %d warnings, converters %d (want the same, not none)", putWarned, convWarned)
	}
	for r := range convRows {
		if g, w := fmt.Sprint(putRows[r]), fmt.Sprint(convRows[r]); g != w {
			t.Errorf("row %d\n putters: %s\n  converters: %s", r, g, w)
		}
	}
}

// TestDecimalSlabMakesTheSameDecimals checks decimals made from slab blocks
// against delta.NewDecimal, across block boundaries and the int64 range, and
// that a decimal keeps its value while later ones are made.
func TestDecimalSlabMakesTheSameDecimals(t *testing.T) {
	values := []int64{0, 1, -1, 42, -4200, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, 999999999999999999, -999999999999999999}
	for i := int64(0); i < 3*decimalSlabSize; i++ {
		values = append(values, i*7919-1_000_000)
	}
	var slab DecimalSlab
	made := make([]delta.Decimal, len(values))
	for i, v := range values {
		made[i] = slab.decimal(v, 2)
	}
	for i, v := range values {
		want := delta.NewDecimal(v, 2)
		if made[i].Scale != 2 || made[i].Unscaled.Cmp(want.Unscaled) != 0 || made[i].String() != want.String() {
			t.Fatalf("value %d: slab made %s, want %s", v, made[i], want)
		}
	}
	perDecimal := testing.AllocsPerRun(10, func() {
		for range 4 * decimalSlabSize {
			slab.decimal(-12345, 2)
		}
	}) / (4 * decimalSlabSize)
	if perDecimal > 0.1 {
		t.Errorf("a decimal from the slab took %.3f allocations", perDecimal)
	}
}

// TestFitsDecimal checks fitsDecimal on texts PostgreSQL prints and on
// odd ones, against the reading that splits the text at its point.
func TestFitsDecimal(t *testing.T) {
	for _, c := range []struct {
		text string
		p, s int
		want bool
	}{
		{"12.50", 4, 2, true},
		{"-12.50", 4, 2, true},
		{"+0012.5", 4, 2, true},
		{"123.5", 4, 2, false},
		{"12.505", 4, 2, false},
		{"0.00", 1, 1, false},
		{"0.0", 1, 1, true},
		{".5", 1, 1, true},
		{"5.", 1, 0, true},
		{"000", 2, 0, true},
		{"", 4, 2, false},
		{"-", 4, 2, false},
		{"NaN", 4, 2, false},
		{"Infinity", 38, 0, false},
		{"1e5", 10, 0, false},
		{"99999999999999999999999999999999999999", 38, 0, true},
		{"100000000000000000000000000000000000000", 38, 0, false},
	} {
		if got := fitsDecimal([]byte(c.text), c.p, c.s); got != c.want {
			t.Errorf("fitsDecimal(%q, %d, %d) = %v, want %v", c.text, c.p, c.s, got, c.want)
		}
		if got := splitFitsDecimal([]byte(c.text), c.p, c.s); got != c.want {
			t.Errorf("the split reading of %q, %d, %d = %v, want %v", c.text, c.p, c.s, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789.+-eN"
	for range 200000 {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		s := rng.IntN(4)
		p := s + rng.IntN(5)
		if got, want := fitsDecimal(b, p, s), splitFitsDecimal(b, p, s); got != want {
			t.Fatalf("fitsDecimal(%q, %d, %d) = %v, the split reading %v", b, p, s, got, want)
		}
	}
}

// splitFitsDecimal is fitsDecimal read as its doc comment says: the text
// split at its first point, the integer part without its leading zeros.
func splitFitsDecimal(text []byte, p, s int) bool {
	t := bytes.TrimLeft(text, "+-")
	intPart, frac, _ := bytes.Cut(t, []byte("."))
	intPart = bytes.TrimLeft(intPart, "0")
	if len(intPart) > p-s || len(frac) > s || len(t) == 0 {
		return false
	}
	for _, c := range t {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}
