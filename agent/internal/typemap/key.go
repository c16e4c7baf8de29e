package typemap

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Mirror rows are identified and ordered by a byte key: the order-preserving
// encoding of their key columns (the replica identity's columns; every column
// for tables compared as multisets). The order is not
// PostgreSQL's (decimals and strings compare as bytes) but it is a total
// order that is the same for a value converted from the queue and for the
// same value read back from a data file, which is all clustering needs.
//
// Each value is self-delimiting, so a key that extends another by trailing
// values sorts right after it.

// AppendKey appends the encoding of vals to dst.
func AppendKey(dst []byte, vals []any) []byte {
	for _, v := range vals {
		dst = AppendKeyValue(dst, v)
	}
	return dst
}

// AppendRowKey appends the key of a mirror row to dst: the encoding of the
// values at keyIdx (an index out of the row, or -1, encodes as null), or
// for a table compared as a multiset, of the values at keyIdx (its
// columns) up to the last that is not null.
func AppendRowKey(dst []byte, row []any, keyIdx []int, multiset bool) []byte {
	at := func(i int) any {
		if i >= 0 && i < len(row) {
			return row[i]
		}
		return nil
	}
	if multiset {
		n := len(keyIdx)
		for n > 0 && at(keyIdx[n-1]) == nil {
			n--
		}
		for _, i := range keyIdx[:n] {
			dst = AppendKeyValue(dst, at(i))
		}
		return dst
	}
	for _, i := range keyIdx {
		var v any
		if i >= 0 && i < len(row) {
			v = row[i]
		}
		dst = AppendKeyValue(dst, v)
	}
	return dst
}

// AppendKeyValue appends the encoding of one value to dst; Unchanged is
// encoded as null.
func AppendKeyValue(dst []byte, v any) []byte {
	if v == nil || v == Unchanged {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	switch x := v.(type) {
	case bool:
		if x {
			return append(dst, 1)
		}
		return append(dst, 0)
	case int8:
		return appendOrderedInt(dst, int64(x))
	case int16:
		return appendOrderedInt(dst, int64(x))
	case int32:
		return appendOrderedInt(dst, int64(x))
	case int64:
		return appendOrderedInt(dst, x)
	case float32:
		return appendOrderedFloat(dst, float64(x))
	case float64:
		return appendOrderedFloat(dst, x)
	case string:
		return appendEscaped(dst, []byte(x))
	case []byte:
		return appendEscaped(dst, x)
	case delta.Decimal:
		return appendEscaped(dst, []byte(x.String()))
	case time.Time:
		return appendOrderedInt(dst, x.UnixMicro())
	case []any:
		for _, e := range x {
			dst = append(dst, 2)
			dst = AppendKeyValue(dst, e)
		}
		return append(dst, 1)
	}
	// A Go type no converter makes: its printed form, with its type, so
	// that different values never share a key (their order is that of
	// the text).
	return appendEscaped(dst, fmt.Appendf(nil, "%T:%v", v, v))
}

// AppendQueuedKeyValue appends the encoding of a queued value of a column
// of Delta type dt: the encoding of the value conv converts it to. Integers
// are encoded as they are queued, without converting them.
func AppendQueuedKeyValue(dst []byte, dt delta.DataType, v *store.Value, conv Converter) []byte {
	switch {
	case v == nil || v.Kind == store.KindNull:
		return AppendKeyValue(dst, nil)
	case integerKind(dt, v.Kind):
		return appendOrderedInt(append(dst, 1), v.Int)
	}
	return AppendKeyValue(dst, conv(v))
}

// integerKind reports whether a queued value of kind k converts to an
// integer of column type t (see convertPlain).
func integerKind(t delta.DataType, k store.Kind) bool {
	switch t {
	case delta.TypeShort:
		return k == store.KindInt16
	case delta.TypeInteger:
		return k == store.KindInt32
	case delta.TypeLong:
		return k == store.KindInt64 || k == store.KindTime || k == store.KindInt32 || k == store.KindInt16
	}
	return false
}

func appendOrderedInt(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

// appendOrderedFloat appends f so that the bytes order as PostgreSQL
// orders floats: -0 as 0, and every NaN as one, above +Infinity.
func appendOrderedFloat(dst []byte, f float64) []byte {
	switch {
	case f == 0:
		f = 0
	case math.IsNaN(f):
		f = math.NaN()
	}
	b := math.Float64bits(f)
	if b&(1<<63) != 0 {
		b = ^b
	} else {
		b |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, b)
}

// appendEscaped writes b with 0x00 escaped as 0x00 0xff and terminated by
// 0x00 0x01, which keeps byte order and makes the encoding self-delimiting.
func appendEscaped(dst, b []byte) []byte {
	for _, c := range b {
		if c == 0 {
			dst = append(dst, 0, 0xff)
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, 0, 1)
}

// AppendValueKey appends an encoding of a queued value that is the same
// for equal values and differs for different ones, whatever their kind:
// for telling whether two rows captured from a table have the same key
// (capture's backfill), not for ordering them.
func AppendValueKey(dst []byte, v *store.Value) []byte {
	dst = append(dst, byte(v.Kind))
	dst = binary.AppendVarint(dst, v.Int)
	dst = binary.AppendUvarint(dst, uint64(len(v.Bytes)))
	dst = append(dst, v.Bytes...)
	dst = binary.AppendUvarint(dst, uint64(len(v.Elems)))
	for i := range v.Elems {
		dst = AppendValueKey(dst, &v.Elems[i])
	}
	return dst
}
