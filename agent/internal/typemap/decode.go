package typemap

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// DecodeFunc turns one column's text output into a typed value, which it
// sets dst to, whole (dst may hold an earlier value). It may keep src:
// callers pass bytes that nothing else uses afterwards. The value is set in
// place: a store.Value and an error are more words than Go returns in
// registers, and returning them went through the stack twice for each
// value decoded.
type DecodeFunc func(dst *store.Value, src []byte) error

// Value returns the value that f decodes from src.
func (f DecodeFunc) Value(src []byte) (store.Value, error) {
	var v store.Value
	err := f(&v, src)
	return v, err
}

// valueFunc is a decoder that returns the value: those of the rarer types,
// whose DecodeFunc is their method into.
type valueFunc func(src []byte) (store.Value, error)

// into sets dst to the value f decodes from src.
func (f valueFunc) into(dst *store.Value, src []byte) error {
	v, err := f(src)
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// scanner returns a valueFunc that scans text into a T with pgtype and
// converts it with conv.
func scanner[T any](m *pgtype.Map, oid uint32, conv func(T) store.Value) valueFunc {
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
// text as the session prints it (textparse.go) and gives the value of a
// kind k, and with general when fast does not take it.
func fastOr(k store.Kind, fast func(src []byte) (int64, bool), general valueFunc) DecodeFunc {
	return func(dst *store.Value, src []byte) error {
		if v, ok := fast(src); ok {
			*dst = store.Value{Kind: k, Int: v}
			return nil
		}
		return general.into(dst, src)
	}
}

func textValue(dst *store.Value, src []byte) error {
	*dst = store.Value{Kind: store.KindString, Bytes: src}
	return nil
}

func numericValue(dst *store.Value, src []byte) error {
	*dst = store.Value{Kind: store.KindNumeric, Bytes: src}
	return nil
}

// moneyValue reads money as the session prints it (lc_monetary C:
// "-$1,234.56") into the exact decimal it is.
func moneyValue(dst *store.Value, src []byte) error {
	out := make([]byte, 0, len(src))
	for _, c := range src {
		switch {
		case c == '$' || c == ',':
		case c == '-' || c == '.' || c >= '0' && c <= '9':
			out = append(out, c)
		default:
			return fmt.Errorf("money %q is not in the C locale's format", src)
		}
	}
	*dst = store.Value{Kind: store.KindNumeric, Bytes: out}
	return nil
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
func microsOrText(general valueFunc) valueFunc {
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

// The decoders of the rows of the type table (typemap.go): pgtype reads
// the text, after the fast parsers of textparse.go for the commonest
// values as the session prints them.

func decodeBool(pg *pgtype.Map) DecodeFunc {
	return fastOr(store.KindBool, parseBool, scanner(pg, pgtype.BoolOID, func(v bool) store.Value {
		var i int64
		if v {
			i = 1
		}
		return store.Value{Kind: store.KindBool, Int: i}
	}))
}

func decodeInt2(pg *pgtype.Map) DecodeFunc {
	return fastOr(store.KindInt16, parseIntegerIn(math.MinInt16, math.MaxInt16),
		scanner(pg, pgtype.Int2OID, func(v int16) store.Value { return store.Value{Kind: store.KindInt16, Int: int64(v)} }))
}

func decodeInt4(pg *pgtype.Map) DecodeFunc {
	return fastOr(store.KindInt32, parseIntegerIn(math.MinInt32, math.MaxInt32),
		scanner(pg, pgtype.Int4OID, func(v int32) store.Value { return store.Value{Kind: store.KindInt32, Int: int64(v)} }))
}

func decodeInt8(pg *pgtype.Map) DecodeFunc {
	return fastOr(store.KindInt64, parseInteger,
		scanner(pg, pgtype.Int8OID, func(v int64) store.Value { return store.Value{Kind: store.KindInt64, Int: v} }))
}

func decodeFloat4(pg *pgtype.Map) DecodeFunc {
	return scanner(pg, pgtype.Float4OID, func(v float32) store.Value {
		return store.Value{Kind: store.KindFloat32, Int: int64(math.Float32bits(v))}
	}).into
}

func decodeFloat8(pg *pgtype.Map) DecodeFunc {
	return scanner(pg, pgtype.Float8OID, func(v float64) store.Value {
		return store.Value{Kind: store.KindFloat64, Int: int64(math.Float64bits(v))}
	}).into
}

func decodeBytea(pg *pgtype.Map) DecodeFunc {
	return scanner(pg, pgtype.ByteaOID, func(v []byte) store.Value { return store.Value{Kind: store.KindBytes, Bytes: v} }).into
}

func decodeDate(pg *pgtype.Map) DecodeFunc {
	return scanner(pg, pgtype.DateOID, func(v pgtype.Date) store.Value {
		return store.Value{Kind: store.KindDate, Int: infinityInt(v.InfinityModifier, daysSinceEpoch(v.Time))}
	}).into
}

// decodeTimestamp returns the decode function of timestamptz (zone) or
// timestamp.
func decodeTimestamp(zone bool) func(pg *pgtype.Map) DecodeFunc {
	return func(pg *pgtype.Map) DecodeFunc {
		var general valueFunc
		if zone {
			general = scanner(pg, pgtype.TimestamptzOID, func(v pgtype.Timestamptz) store.Value {
				return timestampValue(v.InfinityModifier, v.Time)
			})
		} else {
			general = scanner(pg, pgtype.TimestampOID, func(v pgtype.Timestamp) store.Value {
				return timestampValue(v.InfinityModifier, v.Time)
			})
		}
		return fastOr(store.KindTimestamp, parseISOTimestampOf(zone), microsOrText(general))
	}
}

func decodeTime(pg *pgtype.Map) DecodeFunc {
	return scanner(pg, pgtype.TimeOID, func(v pgtype.Time) store.Value {
		return store.Value{Kind: store.KindTime, Int: v.Microseconds}
	}).into
}

// decodeArrayOf returns the decode function of arrays whose elements are of
// the row elem. The
// array literal is split by pgtype's text[] parser, and each element is then
// decoded like a column of the element type. An array that a list of
// elements would not hold exactly, one of more dimensions than one or with
// bounds other than from 1 ("{{1,2},{3,4}}", "[0:1]={1,2}"), is queued as
// its text (KindString), which the applier does not take for an array: it
// lists the column in _replaced.
func decodeArrayOf(elem *Type) func(pg *pgtype.Map) DecodeFunc {
	return func(pg *pgtype.Map) DecodeFunc {
		return decodeFlatArray(pg, elem.decode(pg))
	}
}

// decodeFlatArray returns the decoder of one-dimensional arrays whose
// elements elemDecode decodes.
func decodeFlatArray(pg *pgtype.Map, elemDecode DecodeFunc) DecodeFunc {
	var probe pgtype.FlatArray[pgtype.Text]
	plan := pg.PlanScan(pgtype.TextArrayOID, pgtype.TextFormatCode, &probe)
	return func(dst *store.Value, src []byte) error {
		if bytes.HasPrefix(src, []byte("{{")) || bytes.HasPrefix(src, []byte("[")) {
			*dst = store.Value{Kind: store.KindString, Bytes: src}
			return nil
		}
		var arr pgtype.FlatArray[pgtype.Text]
		if err := plan.Scan(src, &arr); err != nil {
			return err
		}
		elems := make([]store.Value, len(arr))
		for i, e := range arr {
			if !e.Valid {
				continue // KindNull
			}
			if err := elemDecode(&elems[i], []byte(e.String)); err != nil {
				return fmt.Errorf("element %d: %w", i+1, err)
			}
		}
		*dst = store.Value{Kind: store.KindArray, Elems: elems}
		return nil
	}
}

// decodeArrayOfDims returns the decoder of a column declared an array of
// dims dimensions (int[][] has 2), whose values keep their shape: arrays of
// arrays, as deep as dims. A value of other dimensions, or with bounds
// other than from 1, is queued as its text (see decodeFlatArray).
func decodeArrayOfDims(pg *pgtype.Map, elemDecode DecodeFunc, dims int) DecodeFunc {
	var probe pgtype.Array[pgtype.Text]
	plan := pg.PlanScan(pgtype.TextArrayOID, pgtype.TextFormatCode, &probe)
	return func(dst *store.Value, src []byte) error {
		var arr pgtype.Array[pgtype.Text]
		if err := plan.Scan(src, &arr); err != nil {
			return err
		}
		shaped := len(arr.Dims) == dims || len(arr.Elements) == 0 && len(arr.Dims) == 0
		for _, dim := range arr.Dims {
			shaped = shaped && dim.LowerBound == 1
		}
		if !shaped {
			*dst = store.Value{Kind: store.KindString, Bytes: src}
			return nil
		}
		elems := make([]store.Value, len(arr.Elements))
		for i, e := range arr.Elements {
			if !e.Valid {
				continue // KindNull
			}
			if err := elemDecode(&elems[i], []byte(e.String)); err != nil {
				return fmt.Errorf("element %d: %w", i+1, err)
			}
		}
		*dst = nest(elems, arr.Dims)
		return nil
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
