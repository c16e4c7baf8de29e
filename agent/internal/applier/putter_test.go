package applier

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

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
		var convs []converter
		var puts []putter
		for _, c := range columns {
			conv := converterFor(c.typ, "t.c", &warned)
			convs, puts = append(convs, conv), append(puts, putterFor(c.typ, conv))
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

// TestQueuedKeyIsTheConvertedRowsKey checks that the mirror key of an
// inserted row read from its queued values is the key of its converted
// values, for keys of every kind of column (integers read as they are,
// others converted), with nulls and values of another kind than the
// column's, and for a schema version older than the table's columns.
func TestQueuedKeyIsTheConvertedRowsKey(t *testing.T) {
	cols := newColumns(newTypeMapper(), slog.New(slog.NewTextHandler(io.Discard, nil)), &countWarner{})
	key := func(name string, oid uint32, typmod int32) store.Column {
		return store.Column{Name: name, TypeOID: oid, TypeMod: typmod, Key: true}
	}
	older := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 1}, Schema: "public", Name: "k", Columns: []store.Column{
		key("s", oidInt2, -1), key("i", oidInt4, -1), key("l", oidInt8, -1), key("t", 25, -1),
		key("n", oidNumeric, (10<<16|2)+4), key("at", oidTimestamptz, -1), {Name: "v", TypeOID: oidInt4, TypeMod: -1}}}
	mOld := cols.mapping(older)
	newer := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 2}, Schema: "public", Name: "k",
		Columns: append(slices.Clone(older.Columns), key("added", oidInt8, -1))}
	mNew := cols.mapping(newer)
	m := &mirror{cols: cols}
	for _, n := range mNew.keyNames {
		m.keyIdx = append(m.keyIdx, cols.idx[n])
	}

	iv := func(k store.Kind, v int64) store.Value { return store.Value{Kind: k, Int: v} }
	bv := func(k store.Kind, s string) store.Value { return store.Value{Kind: k, Bytes: []byte(s)} }
	rows := [][]store.Value{
		{iv(store.KindInt16, -5), iv(store.KindInt32, 1<<30), iv(store.KindInt64, -1<<62), bv(store.KindString, "a\x00b"),
			bv(store.KindNumeric, "12.5"), iv(store.KindTimestamp, 1_700_000_000_000_000), iv(store.KindInt32, 3)},
		{{}, {}, {}, {}, {}, {}, {}},
		{iv(store.KindInt32, 1), iv(store.KindInt64, 2), iv(store.KindInt32, 3), iv(store.KindInt64, 4),
			bv(store.KindNumeric, "NaN"), iv(store.KindTimestamp, store.InfinityInt), {}},
		{iv(store.KindInt16, 0), iv(store.KindInt32, -1), iv(store.KindTime, 86399), bv(store.KindString, ""),
			bv(store.KindNumeric, "-0.01"), iv(store.KindDate, 3), {}},
	}
	for i, vals := range rows {
		for _, mp := range []*relMapping{mOld, mNew} {
			if mp == mNew {
				vals = append(slices.Clone(vals), iv(store.KindInt64, int64(i)))
			}
			ins := &insertRow{m: mp, vals: vals, cols: &mp.quietOnAdder}
			got := m.appendQueuedKey(nil, ins)
			want := m.appendKey(nil, mp.onAdder.convert(mp, vals, len(cols.cols)))
			if !bytes.Equal(got, want) {
				t.Errorf("row %d, schema version %s: key %x from the queued values, %x from the converted row", i, mp.rel.Key.LSN, got, want)
			}
		}
	}
}
