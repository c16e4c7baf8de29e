package typemap

import (
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// TestRecast checks the conversions of a column whose type changed: numbers
// widen and narrow when they fit, values become PostgreSQL's text, and text
// parses as the new type; what has no value of the new type is refused.
func TestRecast(t *testing.T) {
	dec := func(s string) delta.Decimal {
		d, err := delta.ParseDecimal(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ts := time.Date(2024, 3, 1, 12, 30, 0, 500000000, time.UTC)
	day := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v        any
		from, to delta.DataType
		want     any
		ok       bool
	}{
		{int32(7), delta.TypeInteger, delta.TypeLong, int64(7), true},
		{int16(-3), delta.TypeShort, delta.TypeInteger, int32(-3), true},
		{int64(1 << 40), delta.TypeLong, delta.TypeInteger, nil, false},
		{int32(12), delta.TypeInteger, delta.DecimalType{Precision: 10, Scale: 2}, dec("12.00"), true},
		{float32(1.5), delta.TypeFloat, delta.TypeDouble, float64(1.5), true},
		{int32(42), delta.TypeInteger, delta.TypeString, "42", true},
		{dec("1.50"), delta.DecimalType{Precision: 5, Scale: 2}, delta.TypeString, "1.50", true},
		{day, delta.TypeDate, delta.TypeString, "2024-03-01", true},
		{ts, delta.TypeTimestamp, delta.TypeString, "2024-03-01 12:30:00.5+00", true},
		{true, delta.TypeBoolean, delta.TypeString, "true", true},
		{[]byte{0xde, 0xad}, delta.TypeBinary, delta.TypeString, `\xdead`, true},
		{"17", delta.TypeString, delta.TypeInteger, int32(17), true},
		{"abc", delta.TypeString, delta.TypeInteger, nil, false},
		{"2024-03-01", delta.TypeString, delta.TypeDate, day, true},
		{"3.25", delta.TypeString, delta.DecimalType{Precision: 4, Scale: 2}, dec("3.25"), true},
		{[]any{int32(1), nil}, &delta.ArrayType{ElementType: delta.TypeInteger, ContainsNull: true},
			&delta.ArrayType{ElementType: delta.TypeLong, ContainsNull: true}, []any{int64(1), nil}, true},
		{nil, delta.TypeInteger, delta.TypeString, nil, true},
	} {
		got, ok := Recast(tc.v, tc.from, tc.to)
		if ok != tc.ok || (ok && !equalValues(got, tc.want)) {
			t.Errorf("Recast(%#v, %s, %s) = %#v, %v; want %#v, %v", tc.v, tc.from, tc.to, got, ok, tc.want, tc.ok)
		}
	}
}

// equalValues compares two Delta Go values: decimals by value, times by
// instant, slices element by element.
func equalValues(a, b any) bool {
	switch x := a.(type) {
	case delta.Decimal:
		y, ok := b.(delta.Decimal)
		return ok && x.Cmp(y) == 0 && x.Scale == y.Scale
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}
