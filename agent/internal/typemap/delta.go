package typemap

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// unchangedValue is the type of Unchanged.
type unchangedValue struct{}

// Unchanged marks an unchanged TOAST value inside a converted row. It never
// reaches a data file: the mirror fills it from the existing row, the
// changelog writes null and lists the column in _unchanged.
var Unchanged any = unchangedValue{}

// The range of Delta dates and timestamps (the protocol's, which Spark and
// the other engines keep to): 0001-01-01 to 9999-12-31, 23:59:59.999999
// for timestamps. A value outside, infinities included, is written as the
// nearer end (and listed in _replaced, see replaced.go).
var (
	maxDate      = delta.DaysSinceEpoch(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	minDate      = delta.DaysSinceEpoch(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))
	maxTimestamp = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
	minTimestamp = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
)

// TypeSuffix names a Delta type in a column name, for example
// "decimal_12_3" or "array_integer".
func TypeSuffix(dt delta.DataType) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r == ')' || r == '>':
			return -1
		}
		return '_'
	}, dt.String())
}

// Warner counts values that could not be represented and logs them once per
// flush and column.
type Warner interface {
	Warn(column, problem string)
}

// Converter turns a queued value into the Go value of its Delta type, the
// same Go type delta's readers return, so converted rows compare equal with
// rows read back from data files.
type Converter func(v *store.Value) any

// ConverterFor returns the Converter for a column of Delta type dt.
func ConverterFor(dt delta.DataType, column string, w Warner) Converter {
	var conv Converter
	switch t := dt.(type) {
	case delta.DecimalType:
		var decimals DecimalSlab
		conv = func(v *store.Value) any {
			if v.Kind != store.KindNumeric {
				return convertPlain(delta.TypeString, v)
			}
			if u, ok := smallDecimal(v.Bytes, t.Precision, t.Scale); ok {
				return decimals.decimal(u, int32(t.Scale))
			}
			d, err := delta.ParseDecimal(string(v.Bytes))
			if err == nil {
				d, err = d.Rescale(int32(t.Scale))
			}
			if err != nil || decimalDigits(d) > t.Precision {
				// NaN, Infinity and values that do not fit: null, logged.
				w.Warn(column, fmt.Sprintf("%q does not fit %s; written as null", v.Bytes, t))
				return nil
			}
			return d
		}
	case *delta.ArrayType:
		elem := ConverterFor(t.ElementType, column, w)
		conv = func(v *store.Value) any {
			if v.Kind != store.KindArray {
				// Not a list of elements (a multi-dimensional array
				// queued as its text): its text as the one element of
				// an array of strings, null otherwise; in _replaced.
				if t.ElementType == delta.TypeString {
					return []any{convertPlain(delta.TypeString, v)}
				}
				return nil
			}
			out := make([]any, len(v.Elems))
			for i := range v.Elems {
				out[i] = elem(&v.Elems[i])
			}
			return out
		}
	case delta.PrimitiveType:
		conv = func(v *store.Value) any { return convertPlain(t, v) }
	default:
		conv = func(v *store.Value) any { return convertPlain(delta.TypeString, v) }
	}
	return func(v *store.Value) any {
		switch v.Kind {
		case store.KindNull, store.KindTooLarge:
			return nil
		case store.KindUnchanged:
			return Unchanged
		}
		return conv(v)
	}
}

// Putter gives a queued value to a row being built (delta.RowBuilder), as
// field: the value its column's Converter would return, in the column's
// physical form and without boxing it, when the value is a common one;
// otherwise the Converter's value. It is the applier's typed path of
// inserted rows. KindUnchanged is never given to a Putter (an insert has
// no unchanged value).
type Putter func(v *store.Value, b *delta.RowBuilder, field int)

// PutterFor returns the Putter for a column of Delta type dt, which gives
// the values it does not put itself to conv, the column's Converter for
// the goroutine the Putter runs on (converters keep state).
func PutterFor(dt delta.DataType, conv Converter) Putter {
	general := func(v *store.Value, b *delta.RowBuilder, field int) { b.Value(field, conv(v)) }
	var put Putter
	switch t := dt.(type) {
	case delta.DecimalType:
		put = func(v *store.Value, b *delta.RowBuilder, field int) {
			if v.Kind == store.KindNumeric {
				if u, ok := smallDecimal(v.Bytes, t.Precision, t.Scale); ok {
					b.Decimal(field, u, int32(t.Scale))
					return
				}
			}
			general(v, b, field)
		}
	case delta.PrimitiveType:
		put = primitivePutter(t, general)
	default:
		put = general
	}
	// (A null goes to general, whose Converter makes it nil.)
	return put
}

// primitivePutter is the Putter of a primitive Delta type: convertPlain's
// values put as they are, and general for the rest.
func primitivePutter(t delta.PrimitiveType, general Putter) Putter {
	// when puts the values of the given kinds with put, the others with
	// general.
	when := func(put Putter, kinds ...store.Kind) Putter {
		var fast [256]bool
		for _, k := range kinds {
			fast[k] = true
		}
		return func(v *store.Value, b *delta.RowBuilder, field int) {
			if fast[v.Kind] {
				put(v, b, field)
				return
			}
			general(v, b, field)
		}
	}
	putInt := func(v *store.Value, b *delta.RowBuilder, field int) { b.Int(field, v.Int) }
	putBytes := func(v *store.Value, b *delta.RowBuilder, field int) { b.Bytes(field, v.Bytes) }
	switch t {
	case delta.TypeBoolean:
		return when(func(v *store.Value, b *delta.RowBuilder, field int) { b.Bool(field, v.Int != 0) }, store.KindBool)
	case delta.TypeShort:
		return when(putInt, store.KindInt16)
	case delta.TypeInteger:
		return when(putInt, store.KindInt32)
	case delta.TypeLong:
		return when(putInt, store.KindInt64, store.KindTime, store.KindInt32, store.KindInt16)
	case delta.TypeFloat:
		return when(func(v *store.Value, b *delta.RowBuilder, field int) {
			b.Float(field, math.Float32frombits(uint32(v.Int)))
		}, store.KindFloat32)
	case delta.TypeDouble:
		return when(func(v *store.Value, b *delta.RowBuilder, field int) {
			b.Double(field, math.Float64frombits(uint64(v.Int)))
		}, store.KindFloat64)
	case delta.TypeString:
		return when(putBytes, store.KindString, store.KindNumeric)
	case delta.TypeBinary:
		return when(putBytes, store.KindBytes)
	case delta.TypeTimestamp:
		return when(func(v *store.Value, b *delta.RowBuilder, field int) {
			b.Timestamp(field, clampTimestamp(v.Int))
		}, store.KindTimestamp)
	case delta.TypeDate:
		return when(func(v *store.Value, b *delta.RowBuilder, field int) {
			b.Date(field, clampDate(v.Int))
		}, store.KindDate)
	}
	return general
}

// smallDecimal is the fast path of decimal conversion: it returns the
// unscaled value at the given scale of a plain decimal text ("-12.5") whose
// value fits precision p and has at most 18 digits. It reports false for
// anything else (exponents, NaN, values that do not fit, more digits), which
// the general path then handles.
func smallDecimal(b []byte, p, scale int) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var u int64
	n, frac := 0, -1 // digits taken; digits after the point (-1: no point yet)
	for _, c := range b {
		switch {
		case c == '.' && frac < 0:
			frac = 0
			continue
		case c < '0' || c > '9':
			return 0, false
		}
		if frac >= 0 {
			if frac == scale {
				// Digits beyond the scale must be zeros.
				if c != '0' {
					return 0, false
				}
				continue
			}
			frac++
		}
		if u == 0 && c == '0' {
			continue // leading zeros do not count
		}
		if n++; n > 18 {
			return 0, false
		}
		u = u*10 + int64(c-'0')
	}
	if len(b) == 0 || frac == 0 && len(b) == 1 {
		return 0, false // "", "-" or "."
	}
	for ; max(frac, 0) < scale; frac = max(frac, 0) + 1 {
		if u != 0 {
			if n++; n > 18 {
				return 0, false
			}
		}
		u *= 10
	}
	if n > p {
		return 0, false
	}
	if neg {
		u = -u
	}
	return u, true
}

func decimalDigits(d delta.Decimal) int {
	s := d.Unscaled.String()
	if strings.HasPrefix(s, "-") {
		return len(s) - 1
	}
	return len(s)
}

// convertPlain converts a value of a primitive Delta type. A value whose
// kind does not match the column's type (which the source never produces)
// is written as its text when the column is a string, and as null otherwise.
func convertPlain(t delta.PrimitiveType, v *store.Value) any {
	switch t {
	case delta.TypeBoolean:
		if v.Kind == store.KindBool {
			return v.Int != 0
		}
	case delta.TypeShort:
		if v.Kind == store.KindInt16 {
			return int16(v.Int)
		}
	case delta.TypeInteger:
		if v.Kind == store.KindInt32 {
			return int32(v.Int)
		}
	case delta.TypeLong:
		switch v.Kind {
		case store.KindInt64, store.KindTime, store.KindInt32, store.KindInt16:
			return v.Int
		}
	case delta.TypeFloat:
		if v.Kind == store.KindFloat32 {
			return math.Float32frombits(uint32(v.Int))
		}
	case delta.TypeDouble:
		if v.Kind == store.KindFloat64 {
			return math.Float64frombits(uint64(v.Int))
		}
	case delta.TypeBinary:
		if v.Kind == store.KindBytes {
			return append([]byte{}, v.Bytes...)
		}
	case delta.TypeDate:
		if v.Kind == store.KindDate {
			return delta.DateFromDays(clampDate(v.Int))
		}
	case delta.TypeTimestamp:
		switch v.Kind {
		case store.KindTimestamp:
			return delta.TimeFromMicros(clampTimestamp(v.Int))
		case store.KindString:
			// Too far from the epoch for an int64 to count its
			// microseconds: capture queued its text.
			if bytes.HasSuffix(v.Bytes, []byte(" BC")) {
				return delta.TimeFromMicros(minTimestamp)
			}
			return delta.TimeFromMicros(maxTimestamp)
		}
	case delta.TypeString:
		return valueText(v)
	}
	return nil
}

// clampDate returns a queued date (days since 1970-01-01) as written:
// within the range of Delta dates.
func clampDate(d int64) int32 {
	return int32(min(max(d, int64(minDate)), int64(maxDate)))
}

// clampTimestamp returns a queued timestamp (microseconds since the epoch)
// as written: within the range of Delta timestamps.
func clampTimestamp(us int64) int64 {
	return min(max(us, minTimestamp), maxTimestamp)
}

// valueText returns the text form of a value, for string columns.
func valueText(v *store.Value) any {
	switch v.Kind {
	case store.KindNull:
		return nil
	case store.KindString, store.KindNumeric:
		return string(v.Bytes)
	case store.KindBytes:
		return fmt.Sprintf("\\x%x", v.Bytes)
	case store.KindBool:
		return strconv.FormatBool(v.Int != 0)
	case store.KindInt16, store.KindInt32, store.KindInt64, store.KindTime:
		return strconv.FormatInt(v.Int, 10)
	case store.KindFloat32:
		return strconv.FormatFloat(float64(math.Float32frombits(uint32(v.Int))), 'g', -1, 32)
	case store.KindFloat64:
		return strconv.FormatFloat(math.Float64frombits(uint64(v.Int)), 'g', -1, 64)
	case store.KindDate:
		return delta.DateFromDays(int32(v.Int)).Format("2006-01-02")
	case store.KindTimestamp:
		return delta.TimeFromMicros(v.Int).Format("2006-01-02T15:04:05.999999Z")
	case store.KindArray:
		parts := make([]string, len(v.Elems))
		for i := range v.Elems {
			if s, ok := valueText(&v.Elems[i]).(string); ok {
				parts[i] = strconv.Quote(s)
			} else {
				parts[i] = "NULL"
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return nil
}

// DecimalSlab makes the decimals of up to 18 digits that conversions
// produce. Their big.Ints and one-word magnitudes come from blocks of
// decimalSlabSize: two allocations a block instead of two a value. A block
// stays in memory while a decimal made from it does; nothing changes a
// decimal's value once made. The zero value is ready to use; it is not safe
// for concurrent use.
type DecimalSlab struct {
	ints  []big.Int
	words []big.Word
}

const decimalSlabSize = 256

// decimal returns unscaled × 10^-scale.
func (s *DecimalSlab) decimal(unscaled int64, scale int32) delta.Decimal {
	if bits.UintSize < 64 {
		return delta.NewDecimal(unscaled, scale)
	}
	if len(s.ints) == 0 {
		s.ints, s.words = make([]big.Int, decimalSlabSize), make([]big.Word, decimalSlabSize)
	}
	z := &s.ints[0]
	if mag := uint64(unscaled); unscaled < 0 {
		s.words[0] = big.Word(-mag)
		z.SetBits(s.words[:1:1]).Neg(z)
	} else if mag != 0 {
		s.words[0] = big.Word(mag)
		z.SetBits(s.words[:1:1])
	}
	s.ints, s.words = s.ints[1:], s.words[1:]
	return delta.Decimal{Unscaled: z, Scale: scale}
}
