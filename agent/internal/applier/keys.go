package applier

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// Mirror rows are identified and ordered by a byte key: the order-preserving
// encoding of their key columns (the replica identity's columns; every column
// for tables compared as multisets, see mirror.go). The order is not
// PostgreSQL's (decimals and strings compare as bytes) but it is a total
// order that is the same for a value converted from the queue and for the
// same value read back from a data file, which is all clustering needs.
//
// Each value is self-delimiting, so a key that extends another by trailing
// values sorts right after it.

// appendKey appends the encoding of vals to dst.
func appendKey(dst []byte, vals []any) []byte {
	for _, v := range vals {
		dst = appendKeyValue(dst, v)
	}
	return dst
}

func appendKeyValue(dst []byte, v any) []byte {
	if v == nil || v == unchanged {
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
			dst = appendKeyValue(dst, e)
		}
		return append(dst, 1)
	}
	return dst
}

func appendOrderedInt(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func appendOrderedFloat(dst []byte, f float64) []byte {
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
