package applier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// The spill codec writes converted rows (Go values of Delta types) to the
// temporary run files of a large merge (see pending.go). It is private to
// one flush: nothing written with it outlives the process.

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
)

func appendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendRowValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, tagNil)
	case unchangedValue:
		return append(dst, tagUnchanged)
	case bool:
		if x {
			return append(dst, tagTrue)
		}
		return append(dst, tagFalse)
	case int8:
		return binary.AppendVarint(append(dst, tagInt8), int64(x))
	case int16:
		return binary.AppendVarint(append(dst, tagInt16), int64(x))
	case int32:
		return binary.AppendVarint(append(dst, tagInt32), int64(x))
	case int64:
		return binary.AppendVarint(append(dst, tagInt64), x)
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, tagFloat32), math.Float32bits(x))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, tagFloat64), math.Float64bits(x))
	case string:
		return appendBytes(append(dst, tagString), []byte(x))
	case []byte:
		return appendBytes(append(dst, tagBytes), x)
	case delta.Decimal:
		return appendBytes(append(dst, tagDecimal), []byte(x.String()))
	case time.Time:
		return binary.AppendVarint(append(dst, tagTime), x.UnixMicro())
	case []any:
		dst = binary.AppendUvarint(append(dst, tagArray), uint64(len(x)))
		for _, e := range x {
			dst = appendRowValue(dst, e)
		}
		return dst
	}
	panic(fmt.Sprintf("applier: cannot spill a %T", v))
}

// spillReader decodes values written by appendRowValue.
type spillReader struct {
	r *bufio.Reader
}

var errSpillCorrupt = errors.New("corrupt spill file")

func (s *spillReader) uvarint() (uint64, error) { return binary.ReadUvarint(s.r) }

func (s *spillReader) bytes() ([]byte, error) {
	n, err := s.uvarint()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(s.r, b)
	return b, err
}

func (s *spillReader) value() (any, error) {
	tag, err := s.r.ReadByte()
	if err != nil {
		return nil, err
	}
	switch tag {
	case tagNil:
		return nil, nil
	case tagUnchanged:
		return unchanged, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagInt8, tagInt16, tagInt32, tagInt64, tagTime:
		v, err := binary.ReadVarint(s.r)
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
		var b [4]byte
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return nil, err
		}
		return math.Float32frombits(binary.BigEndian.Uint32(b[:])), nil
	case tagFloat64:
		var b [8]byte
		if _, err := io.ReadFull(s.r, b[:]); err != nil {
			return nil, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b[:])), nil
	case tagString:
		b, err := s.bytes()
		return string(b), err
	case tagBytes:
		return s.bytes()
	case tagDecimal:
		b, err := s.bytes()
		if err != nil {
			return nil, err
		}
		return delta.ParseDecimal(string(b))
	case tagArray:
		n, err := s.uvarint()
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = s.value(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tag %d", errSpillCorrupt, tag)
}
