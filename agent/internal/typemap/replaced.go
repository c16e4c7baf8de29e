package typemap

import (
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// A value is stored exactly where its Delta type can hold it. Where it
// cannot, what is stored instead is never silent: the changelog row lists
// the column in _replaced, the table's count of replaced values goes up
// (a metric), and the first replacement in each column is logged (the
// applier does that with ReplacedCheck). The replacements:
//
//	date         outside 0001-01-01 to 9999-12-31 (the range of Delta
//	             dates), infinities included: the nearer end
//	timestamp    outside 0001-01-01 00:00 to 9999-12-31 23:59:59.999999,
//	             infinities included: the nearer end (a time past 294246 AD
//	             or before 290307 BC, which capture queues as text because
//	             an int64 cannot count its microseconds, too)
//	decimal(p,s) NaN, Infinity, -Infinity, or more integer digits than p-s: null
//	array        an element replaced as its type says
//
// A value whose kind does not fit its column (as capture queued it) is
// written as null or as its text, and is replaced too. A value capture did
// not keep, being larger than source.max_value_size (store.KindTooLarge),
// is null in every column; the applier lists it without a check.

// ReplacedCheck reports whether a value of a column is stored other than
// PostgreSQL holds it.
type ReplacedCheck func(v *store.Value) bool

// ReplacedCheckFor returns the check of a column of Delta type dt, or nil
// for a type whose values are all stored exactly.
func ReplacedCheckFor(dt delta.DataType) ReplacedCheck {
	switch t := dt.(type) {
	case delta.DecimalType:
		return func(v *store.Value) bool {
			return v.Kind != store.KindNumeric || !fitsDecimal(v.Bytes, t.Precision, t.Scale)
		}
	case *delta.ArrayType:
		elem := ReplacedCheckFor(t.ElementType)
		if elem == nil {
			return func(v *store.Value) bool { return v.Kind != store.KindArray }
		}
		return func(v *store.Value) bool {
			if v.Kind != store.KindArray {
				return true
			}
			for i := range v.Elems {
				if k := v.Elems[i].Kind; k != store.KindNull && elem(&v.Elems[i]) {
					return true
				}
			}
			return false
		}
	case delta.PrimitiveType:
		switch t {
		case delta.TypeDate:
			return func(v *store.Value) bool {
				return v.Kind != store.KindDate || v.Int > int64(maxDate) || v.Int < int64(minDate)
			}
		case delta.TypeTimestamp:
			return func(v *store.Value) bool {
				return v.Kind != store.KindTimestamp || v.Int > maxTimestamp || v.Int < minTimestamp
			}
		}
	}
	return nil
}

// fitsDecimal reports whether the exact decimal text PostgreSQL printed
// fits decimal(p,s): a number, with at most p-s integer digits and s
// fractional ones. It reads the text once: the applier asks for every
// decimal of every changelog row.
func fitsDecimal(text []byte, p, s int) bool {
	i := 0
	for i < len(text) && (text[i] == '+' || text[i] == '-') {
		i++
	}
	t := text[i:]
	if len(t) == 0 {
		return false
	}
	point, intDigits := -1, 0
	for j, c := range t {
		switch {
		case c == '.':
			if point < 0 {
				point = j
			}
		case c < '0' || c > '9':
			return false // NaN, Infinity
		case point < 0 && (intDigits > 0 || c != '0'):
			// An integer digit, leading zeros not counted.
			intDigits++
		}
	}
	fracDigits := 0
	if point >= 0 {
		fracDigits = len(t) - point - 1
	}
	return intDigits <= p-s && fracDigits <= s
}
