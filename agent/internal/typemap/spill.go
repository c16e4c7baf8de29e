package typemap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/lakeside/lakeside/delta"
)

// The spill codec encodes converted rows (Go values of Delta types, with
// Unchanged) for the pending set of a merge, in memory and in the temporary
// run files of a large merge. It is private to one flush: nothing written
// with it outlives the process.

const (
	tagNil byte = iota
	tagUnchanged
	tagFalse
	tagTrue
	tagInt8
	tagInt16
	tagInt32
	tagInt64
	tagFloat32
	tagFloat64
	tagString
	tagBytes
	tagDecimal
	tagTime
	tagArray
	tagDecimal64
)

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendRow appends the encoding of row to dst. A value of a Go type the
// codec has no encoding for (not one of the Delta types', which no
// converter or reader should make) is an error wrapping ErrSpillType, for
// the caller to fail what it was doing (the applier: the table's flush)
// rather than the process.
func AppendRow(dst []byte, row []any) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(row)))
	for i, v := range row {
		var err error
		if dst, err = appendRowValue(dst, v); err != nil {
			return dst, fmt.Errorf("spill: column %d: %w", i, err)
		}
	}
	return dst, nil
}

// ErrSpillType is returned by AppendRow for a value of a Go type it cannot
// encode.
var ErrSpillType = errors.New("no encoding for Go type")

// DecodeRow decodes a row written by AppendRow at the start of b into row's
// memory, and returns it with the bytes after it; decimals makes its
// decimals.
func DecodeRow(row []any, b []byte, decimals *DecimalSlab) ([]any, []byte, error) {
	return decodeRow(valueDecoder{b: b, decimals: decimals}, row)
}

// DecodeOwnedRow is DecodeRow for bytes b that the caller hands over and
// never writes again: a string of ownedStringBytes or more is then a view
// of b, not a copy, so that a huge value read back is not held twice.
func DecodeOwnedRow(row []any, b []byte, decimals *DecimalSlab) ([]any, []byte, error) {
	return decodeRow(valueDecoder{b: b, decimals: decimals, owned: true}, row)
}

// ownedStringBytes is the length from which DecodeOwnedRow makes a string
// a view of its bytes.
const ownedStringBytes = 1 << 20

func decodeRow(d valueDecoder, row []any) ([]any, []byte, error) {
	n, err := d.uvarint()
	if err != nil || n > uint64(len(d.b)) {
		return nil, nil, ErrSpillCorrupt
	}
	row = slices.Grow(row[:0], int(n))[:n]
	for i := range row {
		if row[i], err = d.value(); err != nil {
			return nil, nil, err
		}
	}
	return row, d.b, nil
}

func appendRowValue(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, tagNil), nil
	case unchangedValue:
		return append(dst, tagUnchanged), nil
	case bool:
		if x {
			return append(dst, tagTrue), nil
		}
		return append(dst, tagFalse), nil
	case int8:
		return binary.AppendVarint(append(dst, tagInt8), int64(x)), nil
	case int16:
		return binary.AppendVarint(append(dst, tagInt16), int64(x)), nil
	case int32:
		return binary.AppendVarint(append(dst, tagInt32), int64(x)), nil
	case int64:
		return binary.AppendVarint(append(dst, tagInt64), x), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, tagFloat32), math.Float32bits(x)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, tagFloat64), math.Float64bits(x)), nil
	case string:
		return appendBytes(append(dst, tagString), []byte(x)), nil
	case []byte:
		return appendBytes(append(dst, tagBytes), x), nil
	case delta.Decimal:
		if x.Unscaled != nil && x.Unscaled.IsInt64() {
			dst = binary.AppendVarint(append(dst, tagDecimal64), int64(x.Scale))
			return binary.AppendVarint(dst, x.Unscaled.Int64()), nil
		}
		return appendBytes(append(dst, tagDecimal), []byte(x.String())), nil
	case time.Time:
		return binary.AppendVarint(append(dst, tagTime), x.UnixMicro()), nil
	case []any:
		dst = binary.AppendUvarint(append(dst, tagArray), uint64(len(x)))
		for _, e := range x {
			var err error
			if dst, err = appendRowValue(dst, e); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%w %T", ErrSpillType, v)
}

// valueDecoder decodes values written by appendRowValue from b.
type valueDecoder struct {
	b []byte
	// decimals makes the decimals (see DecimalSlab).
	decimals *DecimalSlab
	// owned says that b is never written again (DecodeOwnedRow).
	owned bool
}

// ErrSpillCorrupt is returned for spilled bytes that AppendRow did not
// write.
var ErrSpillCorrupt = errors.New("corrupt spill data")

func (d *valueDecoder) byte1() (byte, error) {
	if len(d.b) == 0 {
		return 0, ErrSpillCorrupt
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, nil
}

func (d *valueDecoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		return 0, ErrSpillCorrupt
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *valueDecoder) varint() (int64, error) {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		return 0, ErrSpillCorrupt
	}
	d.b = d.b[n:]
	return v, nil
}

// bytes returns the next length-prefixed bytes, which share d's memory.
func (d *valueDecoder) bytes() ([]byte, error) {
	n, err := d.uvarint()
	if err != nil || n > uint64(len(d.b)) {
		return nil, ErrSpillCorrupt
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b, nil
}

func (d *valueDecoder) value() (any, error) {
	tag, err := d.byte1()
	if err != nil {
		return nil, err
	}
	switch tag {
	case tagNil:
		return nil, nil
	case tagUnchanged:
		return Unchanged, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt8, tagInt16, tagInt32, tagInt64, tagTime:
		v, err := d.varint()
		if err != nil {
			return nil, err
		}
		switch tag {
		case tagInt8:
			return int8(v), nil
		case tagInt16:
			return int16(v), nil
		case tagInt32:
			return int32(v), nil
		case tagTime:
			return delta.TimeFromMicros(v), nil
		}
		return v, nil
	case tagFloat32:
		if len(d.b) < 4 {
			return nil, ErrSpillCorrupt
		}
		v := math.Float32frombits(binary.BigEndian.Uint32(d.b))
		d.b = d.b[4:]
		return v, nil
	case tagFloat64:
		if len(d.b) < 8 {
			return nil, ErrSpillCorrupt
		}
		v := math.Float64frombits(binary.BigEndian.Uint64(d.b))
		d.b = d.b[8:]
		return v, nil
	case tagString:
		b, err := d.bytes()
		if err == nil && d.owned && len(b) >= ownedStringBytes {
			return unsafe.String(&b[0], len(b)), nil
		}
		return string(b), err
	case tagBytes:
		b, err := d.bytes()
		return bytes.Clone(b), err
	case tagDecimal:
		b, err := d.bytes()
		if err != nil {
			return nil, err
		}
		return delta.ParseDecimal(string(b))
	case tagDecimal64:
		scale, err := d.varint()
		if err != nil {
			return nil, err
		}
		u, err := d.varint()
		if err != nil {
			return nil, err
		}
		return d.decimals.decimal(u, int32(scale)), nil
	case tagArray:
		n, err := d.uvarint()
		if err != nil || n > uint64(len(d.b)) {
			return nil, ErrSpillCorrupt
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = d.value(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tag %d", ErrSpillCorrupt, tag)
}
