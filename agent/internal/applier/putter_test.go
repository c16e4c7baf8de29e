package applier

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// TestQueuedKeyIsTheConvertedRowsKey checks that the mirror key of an
// inserted row read from its queued values is the key of its converted
// values, for keys of every kind of column (integers read as they are,
// others converted), with nulls and values of another kind than the
// column's, and for a schema version older than the table's columns.
func TestQueuedKeyIsTheConvertedRowsKey(t *testing.T) {
	cols := newColumns(typemap.New(), slog.New(slog.NewTextHandler(io.Discard, nil)), &countWarner{})
	key := func(name string, oid uint32, typmod int32) store.Column {
		return store.Column{Name: name, TypeOID: oid, TypeMod: typmod, Key: true}
	}
	older := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 1}, Schema: "public", Name: "k", Columns: []store.Column{
		key("s", pgtype.Int2OID, -1), key("i", pgtype.Int4OID, -1), key("l", pgtype.Int8OID, -1), key("t", 25, -1),
		key("n", pgtype.NumericOID, (10<<16|2)+4), key("at", pgtype.TimestamptzOID, -1), {Name: "v", TypeOID: pgtype.Int4OID, TypeMod: -1}}}
	newer := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 2}, Schema: "public", Name: "k",
		Columns: append(slices.Clone(older.Columns), key("added", pgtype.Int8OID, -1))}
	cols.evolve(newer)
	mOld := cols.mapping(older)
	mNew := cols.mapping(newer)
	m := &mirror{cols: cols, keyIdx: mNew.keys}

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
