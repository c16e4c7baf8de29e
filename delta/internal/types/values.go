package types

import (
	"fmt"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strings"
	"time"
)

// Row is one row of a table, its values in schema field order. The package
// documentation of delta lists the Go type used for each Delta type.
type Row []any

// MapEntry is one key/value pair of a map value. Readers return maps as
// []MapEntry in file order.
type MapEntry struct {
	Key   any
	Value any
}

// Decimal is an exact decimal number: Unscaled × 10^-Scale.
type Decimal struct {
	Unscaled *big.Int
	Scale    int32
}

// NewDecimal returns the decimal unscaled × 10^-scale.
func NewDecimal(unscaled int64, scale int32) Decimal {
	return Decimal{Unscaled: big.NewInt(unscaled), Scale: scale}
}

// ParseDecimal parses a plain decimal number such as "-12.340" (scale 3). An
// exponent is accepted ("1.5E+3").
func ParseDecimal(s string) (Decimal, error) {
	orig := s
	s = strings.TrimSpace(s)
	exp := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		var e int
		if _, err := fmt.Sscanf(s[i+1:], "%d", &e); err != nil {
			return Decimal{}, fmt.Errorf("%w: bad decimal %q", ErrInvalidValue, orig)
		}
		exp = e
		s = s[:i]
	}
	neg := false
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		neg = s[0] == '-'
		s = s[1:]
	}
	intPart, frac, _ := strings.Cut(s, ".")
	digits := intPart + frac
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return Decimal{}, fmt.Errorf("%w: bad decimal %q", ErrInvalidValue, orig)
	}
	u, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return Decimal{}, fmt.Errorf("%w: bad decimal %q", ErrInvalidValue, orig)
	}
	if neg {
		u.Neg(u)
	}
	scale := len(frac) - exp
	if scale < 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-scale)), nil))
		scale = 0
	}
	return Decimal{Unscaled: u, Scale: int32(scale)}, nil
}

// String formats the decimal with exactly Scale fractional digits.
func (d Decimal) String() string {
	if d.Unscaled == nil {
		return "<nil>"
	}
	s := new(big.Int).Abs(d.Unscaled).String()
	sign := ""
	if d.Unscaled.Sign() < 0 {
		sign = "-"
	}
	if d.Scale <= 0 {
		return sign + s + strings.Repeat("0", int(-d.Scale))
	}
	sc := int(d.Scale)
	if len(s) <= sc {
		s = strings.Repeat("0", sc-len(s)+1) + s
	}
	return sign + s[:len(s)-sc] + "." + s[len(s)-sc:]
}

// Rescale returns the same number with the given scale. It fails if digits
// would be lost.
func (d Decimal) Rescale(scale int32) (Decimal, error) {
	if d.Unscaled == nil {
		return Decimal{}, fmt.Errorf("%w: nil decimal", ErrInvalidValue)
	}
	if scale == d.Scale {
		return d, nil
	}
	if scale > d.Scale {
		m := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale-d.Scale)), nil)
		return Decimal{Unscaled: new(big.Int).Mul(d.Unscaled, m), Scale: scale}, nil
	}
	m := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale-scale)), nil)
	q, r := new(big.Int).QuoRem(d.Unscaled, m, new(big.Int))
	if r.Sign() != 0 {
		return Decimal{}, fmt.Errorf("%w: %s does not fit scale %d", ErrInvalidValue, d, scale)
	}
	return Decimal{Unscaled: q, Scale: scale}, nil
}

// Cmp compares two decimals numerically and returns -1, 0 or +1.
func (d Decimal) Cmp(o Decimal) int {
	a, b := d, o
	if a.Scale < b.Scale {
		a, _ = a.Rescale(b.Scale)
	} else if b.Scale < a.Scale {
		b, _ = b.Rescale(a.Scale)
	}
	return a.Unscaled.Cmp(b.Unscaled)
}

var epochDay = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// DateFromDays returns the UTC midnight of the given day since 1970-01-01.
func DateFromDays(days int32) time.Time { return epochDay.AddDate(0, 0, int(days)) }

// DaysSinceEpoch returns the calendar date of t (in t's location) as days
// since 1970-01-01.
func DaysSinceEpoch(t time.Time) int32 {
	y, m, d := t.Date()
	u := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix()
	return int32(FloorDiv(u, 86400))
}

// TimeFromMicros returns the UTC time of the given microseconds since the
// epoch.
func TimeFromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// NTZMicros returns the wall clock of t in its own location as microseconds
// since 1970-01-01 00:00:00.
func NTZMicros(t time.Time) int64 {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC).UnixMicro()
}

// FloorDiv returns a / b rounded towards minus infinity, the day or
// millisecond of a time before the epoch.
func FloorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// ToInt64 converts any Go integer value to int64. It reports false for
// another type or an unsigned value beyond int64.
func ToInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint:
		if uint64(x) > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}

func intRange(t PrimitiveType) (int64, int64) {
	switch t {
	case TypeByte:
		return math.MinInt8, math.MaxInt8
	case TypeShort:
		return math.MinInt16, math.MaxInt16
	case TypeInteger:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// Normalize converts an accepted Go value for type t to the canonical Go
// type returned by readers (see the package documentation of delta). It
// fails with ErrInvalidValue when the value does not fit the type.
func Normalize(t DataType, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch t := t.(type) {
	case PrimitiveType:
		return NormalizePrimitive(t, v)
	case DecimalType:
		d, err := toDecimal(v)
		if err != nil {
			return nil, err
		}
		d, err = d.Rescale(int32(t.Scale))
		if err != nil {
			return nil, err
		}
		if DecimalDigits(d.Unscaled) > t.Precision {
			return nil, fmt.Errorf("%w: %s overflows %s", ErrInvalidValue, d, t)
		}
		return d, nil
	case *ArrayType:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice {
			return nil, fmt.Errorf("%w: %T for %s", ErrInvalidValue, v, t)
		}
		out := make([]any, rv.Len())
		for i := range out {
			e, err := Normalize(t.ElementType, rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			if e == nil && !t.ContainsNull {
				return nil, fmt.Errorf("%w: null element in %s without containsNull", ErrInvalidValue, t)
			}
			out[i] = e
		}
		return out, nil
	case *StructType:
		var in []any
		switch x := v.(type) {
		case Row:
			in = x
		case []any:
			in = x
		default:
			return nil, fmt.Errorf("%w: %T for %s", ErrInvalidValue, v, t)
		}
		if len(in) != len(t.Fields) {
			return nil, fmt.Errorf("%w: struct value has %d fields, %s has %d", ErrInvalidValue, len(in), t, len(t.Fields))
		}
		out := make(Row, len(in))
		for i, f := range t.Fields {
			e, err := Normalize(f.Type, in[i])
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			if e == nil && !f.Nullable {
				return nil, fmt.Errorf("%w: null for non-nullable field %q", ErrInvalidValue, f.Name)
			}
			out[i] = e
		}
		return out, nil
	case *MapType:
		var entries []MapEntry
		switch x := v.(type) {
		case []MapEntry:
			entries = x
		case map[string]string:
			keys := sortedKeys(x)
			for _, k := range keys {
				entries = append(entries, MapEntry{Key: k, Value: x[k]})
			}
		case map[string]*string:
			keys := sortedKeys(x)
			for _, k := range keys {
				var val any
				if p := x[k]; p != nil {
					val = *p
				}
				entries = append(entries, MapEntry{Key: k, Value: val})
			}
		case map[string]any:
			keys := sortedKeys(x)
			for _, k := range keys {
				entries = append(entries, MapEntry{Key: k, Value: x[k]})
			}
		default:
			return nil, fmt.Errorf("%w: %T for %s", ErrInvalidValue, v, t)
		}
		out := make([]MapEntry, len(entries))
		for i, e := range entries {
			k, err := Normalize(t.KeyType, e.Key)
			if err != nil {
				return nil, err
			}
			if k == nil {
				return nil, fmt.Errorf("%w: null map key", ErrInvalidValue)
			}
			val, err := Normalize(t.ValueType, e.Value)
			if err != nil {
				return nil, err
			}
			if val == nil && !t.ValueContainsNull {
				return nil, fmt.Errorf("%w: null map value in %s without valueContainsNull", ErrInvalidValue, t)
			}
			out[i] = MapEntry{Key: k, Value: val}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unsupported type %s", ErrUnsupportedFeature, t)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// NormalizePrimitive is Normalize for a non-null value of a primitive type.
func NormalizePrimitive(t PrimitiveType, v any) (any, error) {
	bad := func() error { return fmt.Errorf("%w: %T for %s", ErrInvalidValue, v, t) }
	switch t {
	case TypeBoolean:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, bad()
	case TypeByte, TypeShort, TypeInteger, TypeLong:
		n, ok := ToInt64(v)
		if !ok {
			return nil, bad()
		}
		lo, hi := intRange(t)
		if n < lo || n > hi {
			return nil, fmt.Errorf("%w: %d out of range for %s", ErrInvalidValue, n, t)
		}
		switch t {
		case TypeByte:
			return int8(n), nil
		case TypeShort:
			return int16(n), nil
		case TypeInteger:
			return int32(n), nil
		}
		return n, nil
	case TypeFloat:
		switch x := v.(type) {
		case float32:
			return x, nil
		case float64:
			return float32(x), nil
		}
		return nil, bad()
	case TypeDouble:
		switch x := v.(type) {
		case float64:
			return x, nil
		case float32:
			return float64(x), nil
		}
		return nil, bad()
	case TypeString:
		switch x := v.(type) {
		case string:
			return x, nil
		case []byte:
			return string(x), nil
		}
		return nil, bad()
	case TypeBinary:
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
		return nil, bad()
	case TypeDate:
		switch x := v.(type) {
		case time.Time:
			return DateFromDays(DaysSinceEpoch(x)), nil
		case int32:
			return DateFromDays(x), nil
		}
		return nil, bad()
	case TypeTimestamp:
		switch x := v.(type) {
		case time.Time:
			return TimeFromMicros(x.UnixMicro()), nil
		case int64:
			return TimeFromMicros(x), nil
		}
		return nil, bad()
	case TypeTimestampNTZ:
		switch x := v.(type) {
		case time.Time:
			return TimeFromMicros(NTZMicros(x)), nil
		case int64:
			return TimeFromMicros(x), nil
		}
		return nil, bad()
	}
	return nil, fmt.Errorf("%w: column type %q", ErrUnsupportedFeature, string(t))
}

func toDecimal(v any) (Decimal, error) {
	switch x := v.(type) {
	case Decimal:
		if x.Unscaled == nil {
			return Decimal{}, fmt.Errorf("%w: decimal with nil Unscaled", ErrInvalidValue)
		}
		return x, nil
	case *Decimal:
		if x == nil || x.Unscaled == nil {
			return Decimal{}, fmt.Errorf("%w: nil decimal", ErrInvalidValue)
		}
		return *x, nil
	case string:
		return ParseDecimal(x)
	case *big.Int:
		return Decimal{Unscaled: x, Scale: 0}, nil
	}
	if n, ok := ToInt64(v); ok {
		return NewDecimal(n, 0), nil
	}
	return Decimal{}, fmt.Errorf("%w: %T for decimal", ErrInvalidValue, v)
}

// DecimalDigits returns the number of decimal digits of u, 1 for zero.
func DecimalDigits(u *big.Int) int {
	if u.Sign() == 0 {
		return 1
	}
	return len(new(big.Int).Abs(u).String())
}
