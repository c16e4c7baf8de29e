package source

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// decodeFunc turns one column's text output into a typed value. It may keep
// src: callers pass bytes that nothing else uses afterwards.
type decodeFunc func(src []byte) (store.Value, error)

// typeDecoders builds decoders for column types from PostgreSQL's text
// output (pgoutput and COPY both use the types' output functions). The text
// is parsed by pgtype, except the commonest integers, booleans and
// timestamps, which text_parse.go reads first as the session prints them;
// the mapping follows docs/architecture.md, and a type with no mapping keeps its text
// form.
type typeDecoders struct {
	m *pgtype.Map
}

func newTypeDecoders() *typeDecoders { return &typeDecoders{m: pgtype.NewMap()} }

// scanner returns a decodeFunc that scans text into a T with pgtype and
// converts it with conv.
func scanner[T any](m *pgtype.Map, oid uint32, conv func(T) store.Value) decodeFunc {
	var probe T
	plan := m.PlanScan(oid, pgtype.TextFormatCode, &probe)
	return func(src []byte) (store.Value, error) {
		var v T
		if err := plan.Scan(src, &v); err != nil {
			return store.Value{}, err
		}
		return conv(v), nil
	}
}

// fastOr returns a decoder that reads a text with fast, which takes the
// text as the session prints it (text_parse.go) and gives the value of a
// kind k, and with general when fast does not take it.
func fastOr(k store.Kind, fast func(src []byte) (int64, bool), general decodeFunc) decodeFunc {
	return func(src []byte) (store.Value, error) {
		if v, ok := fast(src); ok {
			return store.Value{Kind: k, Int: v}, nil
		}
		return general(src)
	}
}

func textValue(src []byte) (store.Value, error) {
	return store.Value{Kind: store.KindString, Bytes: src}, nil
}

func numericValue(src []byte) (store.Value, error) {
	return store.Value{Kind: store.KindNumeric, Bytes: src}, nil
}

// The type OIDs of money and money[], which pgtype does not read.
const (
	oidMoney      = 790
	oidMoneyArray = 791
)

// moneyValue reads money as the session prints it (lc_monetary C:
// "-$1,234.56") into the exact decimal it is.
func moneyValue(src []byte) (store.Value, error) {
	out := make([]byte, 0, len(src))
	for _, c := range src {
		switch {
		case c == '$' || c == ',':
		case c == '-' || c == '.' || c >= '0' && c <= '9':
			out = append(out, c)
		default:
			return store.Value{}, fmt.Errorf("money %q is not in the C locale's format", src)
		}
	}
	return store.Value{Kind: store.KindNumeric, Bytes: out}, nil
}

func infinityInt(m pgtype.InfinityModifier, finite int64) int64 {
	switch m {
	case pgtype.Infinity:
		return store.InfinityInt
	case pgtype.NegativeInfinity:
		return store.NegativeInfinityInt
	}
	return finite
}

// timestampValue is the queued value of a timestamp: microseconds since the
// epoch, or, for a time too far from it for an int64 to count them (past
// 294246 AD or before 290307 BC), KindString, whose text microsOrText
// fills in.
func timestampValue(m pgtype.InfinityModifier, t time.Time) store.Value {
	if m == pgtype.Finite && (t.Unix() > math.MaxInt64/1_000_000-1 || t.Unix() < math.MinInt64/1_000_000+1) {
		return store.Value{Kind: store.KindString}
	}
	return store.Value{Kind: store.KindTimestamp, Int: infinityInt(m, t.UnixMicro())}
}

// microsOrText keeps the text of a timestamp that general found too far
// from the epoch to count in microseconds: never a wrapped number.
func microsOrText(general decodeFunc) decodeFunc {
	return func(src []byte) (store.Value, error) {
		v, err := general(src)
		if err == nil && v.Kind == store.KindString {
			v.Bytes = src
		}
		return v, err
	}
}

func daysSinceEpoch(t time.Time) int64 {
	secs := t.Unix()
	days := secs / 86400
	if secs%86400 < 0 {
		days--
	}
	return days
}

// known reports whether capture reads the type oid as itself: a type
// pgtype knows, or money (see resolveTypes).
func (d *typeDecoders) known(oid uint32) bool {
	if oid == oidMoney || oid == oidMoneyArray {
		return true
	}
	_, ok := d.m.TypeForOID(oid)
	return ok
}

// forType returns the decoder for a column of the given type.
func (d *typeDecoders) forType(oid uint32) decodeFunc {
	m := d.m
	switch oid {
	case pgtype.BoolOID:
		return fastOr(store.KindBool, parseBool, scanner(m, oid, func(v bool) store.Value {
			var i int64
			if v {
				i = 1
			}
			return store.Value{Kind: store.KindBool, Int: i}
		}))
	case pgtype.Int2OID:
		return fastOr(store.KindInt16, parseIntegerIn(math.MinInt16, math.MaxInt16),
			scanner(m, oid, func(v int16) store.Value { return store.Value{Kind: store.KindInt16, Int: int64(v)} }))
	case pgtype.Int4OID:
		return fastOr(store.KindInt32, parseIntegerIn(math.MinInt32, math.MaxInt32),
			scanner(m, oid, func(v int32) store.Value { return store.Value{Kind: store.KindInt32, Int: int64(v)} }))
	case pgtype.Int8OID:
		return fastOr(store.KindInt64, parseInteger,
			scanner(m, oid, func(v int64) store.Value { return store.Value{Kind: store.KindInt64, Int: v} }))
	case pgtype.Float4OID:
		return scanner(m, oid, func(v float32) store.Value {
			return store.Value{Kind: store.KindFloat32, Int: int64(math.Float32bits(v))}
		})
	case pgtype.Float8OID:
		return scanner(m, oid, func(v float64) store.Value {
			return store.Value{Kind: store.KindFloat64, Int: int64(math.Float64bits(v))}
		})
	case pgtype.NumericOID:
		// PostgreSQL prints numeric exactly; the text is the value.
		return numericValue
	case oidMoney:
		return moneyValue
	case oidMoneyArray:
		return d.arrayOf(oidMoney)
	case pgtype.ByteaOID:
		return scanner(m, oid, func(v []byte) store.Value { return store.Value{Kind: store.KindBytes, Bytes: v} })
	case pgtype.DateOID:
		return scanner(m, oid, func(v pgtype.Date) store.Value {
			return store.Value{Kind: store.KindDate, Int: infinityInt(v.InfinityModifier, daysSinceEpoch(v.Time))}
		})
	case pgtype.TimestamptzOID:
		return fastOr(store.KindTimestamp, parseISOTimestampOf(true), microsOrText(scanner(m, oid, func(v pgtype.Timestamptz) store.Value {
			return timestampValue(v.InfinityModifier, v.Time)
		})))
	case pgtype.TimestampOID:
		// The wall clock is read as UTC (docs/architecture.md, type mapping).
		return fastOr(store.KindTimestamp, parseISOTimestampOf(false), microsOrText(scanner(m, oid, func(v pgtype.Timestamp) store.Value {
			return timestampValue(v.InfinityModifier, v.Time)
		})))
	case pgtype.TimeOID:
		return scanner(m, oid, func(v pgtype.Time) store.Value {
			return store.Value{Kind: store.KindTime, Int: v.Microseconds}
		})
	}
	if t, ok := m.TypeForOID(oid); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
			return d.arrayOf(ac.ElementType.OID)
		}
	}
	// text, varchar, char, name, uuid, json, jsonb, interval, inet, enums
	// and every type without a mapping: the text form.
	return textValue
}

// arrayOf returns a decoder for arrays whose elements have type elem. The
// array literal is split by pgtype's text[] parser, and each element is then
// decoded like a column of the element type. An array that a list of
// elements would not hold exactly, one of more dimensions than one or with
// bounds other than from 1 ("{{1,2},{3,4}}", "[0:1]={1,2}"), is queued as
// its text (KindString), which the applier does not take for an array: it
// lists the column in _replaced.
func (d *typeDecoders) arrayOf(elem uint32) decodeFunc {
	elemDecode := d.forType(elem)
	var probe pgtype.FlatArray[pgtype.Text]
	plan := d.m.PlanScan(pgtype.TextArrayOID, pgtype.TextFormatCode, &probe)
	return func(src []byte) (store.Value, error) {
		if bytes.HasPrefix(src, []byte("{{")) || bytes.HasPrefix(src, []byte("[")) {
			return store.Value{Kind: store.KindString, Bytes: src}, nil
		}
		var arr pgtype.FlatArray[pgtype.Text]
		if err := plan.Scan(src, &arr); err != nil {
			return store.Value{}, err
		}
		out := store.Value{Kind: store.KindArray, Elems: make([]store.Value, len(arr))}
		for i, e := range arr {
			if !e.Valid {
				continue // KindNull
			}
			v, err := elemDecode([]byte(e.String))
			if err != nil {
				return store.Value{}, fmt.Errorf("element %d: %w", i+1, err)
			}
			out.Elems[i] = v
		}
		return out, nil
	}
}

// arrayOfDims returns a decoder for a column declared an array of dims
// dimensions (int[][] has 2), whose values keep their shape: arrays of
// arrays, as deep as dims. A value of other dimensions, or with bounds
// other than from 1, is queued as its text (see arrayOf).
func (d *typeDecoders) arrayOfDims(elem uint32, dims int) decodeFunc {
	elemDecode := d.forType(elem)
	var probe pgtype.Array[pgtype.Text]
	plan := d.m.PlanScan(pgtype.TextArrayOID, pgtype.TextFormatCode, &probe)
	return func(src []byte) (store.Value, error) {
		var arr pgtype.Array[pgtype.Text]
		if err := plan.Scan(src, &arr); err != nil {
			return store.Value{}, err
		}
		shaped := len(arr.Dims) == dims || len(arr.Elements) == 0 && len(arr.Dims) == 0
		for _, dim := range arr.Dims {
			shaped = shaped && dim.LowerBound == 1
		}
		if !shaped {
			return store.Value{Kind: store.KindString, Bytes: src}, nil
		}
		elems := make([]store.Value, len(arr.Elements))
		for i, e := range arr.Elements {
			if !e.Valid {
				continue // KindNull
			}
			v, err := elemDecode([]byte(e.String))
			if err != nil {
				return store.Value{}, fmt.Errorf("element %d: %w", i+1, err)
			}
			elems[i] = v
		}
		return nest(elems, arr.Dims), nil
	}
}

// nest builds arrays of arrays from elems, the elements of an array of the
// given dimensions in row-major order.
func nest(elems []store.Value, dims []pgtype.ArrayDimension) store.Value {
	if len(dims) <= 1 {
		return store.Value{Kind: store.KindArray, Elems: elems}
	}
	n := int(dims[0].Length)
	size := len(elems) / max(n, 1)
	out := store.Value{Kind: store.KindArray, Elems: make([]store.Value, n)}
	for i := range n {
		out.Elems[i] = nest(elems[i*size:(i+1)*size], dims[1:])
	}
	return out
}

// relationDecoder decodes the tuples of one schema version of a table.
type relationDecoder struct {
	rel  *store.Relation
	cols []decodeFunc
}

func (d *typeDecoders) forRelation(rel *store.Relation) *relationDecoder {
	rd := &relationDecoder{rel: rel, cols: make([]decodeFunc, len(rel.Columns))}
	for i, c := range rel.Columns {
		rd.cols[i] = d.forType(c.TypeOID)
		if c.Dims > 1 {
			if t, ok := d.m.TypeForOID(c.TypeOID); ok {
				if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
					rd.cols[i] = d.arrayOfDims(ac.ElementType.OID, c.Dims)
				}
			}
		}
	}
	return rd
}

// valueSlab hands out value slices carved from larger allocations: one
// allocation serves thousands of rows instead of one per row.
type valueSlab struct{ buf []store.Value }

func (s *valueSlab) take(n int) []store.Value {
	if len(s.buf) < n {
		s.buf = make([]store.Value, max(n, 4096))
	}
	v := s.buf[:n:n]
	s.buf = s.buf[n:]
	return v
}

func (rd *relationDecoder) columnError(i int, src []byte, err error) error {
	const max = 64
	s := string(src)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Errorf("decode %s.%s (type oid %d) from %q: %w", rd.rel.QualifiedName(), rd.rel.Columns[i].Name, rd.rel.Columns[i].TypeOID, s, err)
}
