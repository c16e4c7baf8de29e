package typemap

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/store"
)

// Compare orders two queued values of a column as PostgreSQL's default
// operators would for the mapped types: numbers by value (floats with NaN
// above every number and equal to itself, -0 equal to 0: a total order),
// text by bytes, NULL first.
func Compare(a, b store.Value) int {
	if a.Kind == store.KindNull || b.Kind == store.KindNull {
		switch {
		case a.Kind == b.Kind:
			return 0
		case a.Kind == store.KindNull:
			return -1
		}
		return 1
	}
	switch a.Kind {
	case store.KindBool, store.KindInt16, store.KindInt32, store.KindInt64, store.KindDate, store.KindTimestamp, store.KindTime:
		return cmp.Compare(a.Int, b.Int)
	case store.KindFloat32, store.KindFloat64:
		return compareFloats(floatOf(a), floatOf(b))
	case store.KindNumeric:
		return compareNumericText(string(a.Bytes), string(b.Bytes))
	}
	return slices.Compare(a.Bytes, b.Bytes)
}

// compareFloats orders floats as PostgreSQL does: NaN above every number,
// -0 equal to 0.
func compareFloats(a, b float64) int {
	switch an, bn := math.IsNaN(a), math.IsNaN(b); {
	case an && bn:
		return 0
	case an:
		return 1
	case bn:
		return -1
	}
	return cmp.Compare(a, b)
}

func floatOf(v store.Value) float64 {
	if v.Kind == store.KindFloat32 {
		return float64(math.Float32frombits(uint32(v.Int)))
	}
	return math.Float64frombits(uint64(v.Int))
}

// compareNumericText compares two numerics as PostgreSQL prints them
// (plain decimals, NaN, Infinity, -Infinity), in PostgreSQL's order:
// -Infinity, the numbers, Infinity, NaN. It takes time in proportion to
// the texts' lengths, whatever they hold.
func compareNumericText(a, b string) int {
	ra, rb := numericRank(a), numericRank(b)
	if ra != rb || ra != 0 {
		return cmp.Compare(ra, rb)
	}
	negA, negB := strings.HasPrefix(a, "-"), strings.HasPrefix(b, "-")
	a, b = strings.TrimLeft(a, "+-"), strings.TrimLeft(b, "+-")
	intA, fracA, _ := strings.Cut(a, ".")
	intB, fracB, _ := strings.Cut(b, ".")
	intA, intB = strings.TrimLeft(intA, "0"), strings.TrimLeft(intB, "0")
	fracA, fracB = strings.TrimRight(fracA, "0"), strings.TrimRight(fracB, "0")
	zeroA, zeroB := intA == "" && fracA == "", intB == "" && fracB == ""
	negA, negB = negA && !zeroA, negB && !zeroB
	if negA != negB {
		if negA {
			return -1
		}
		return 1
	}
	c := cmp.Compare(len(intA), len(intB))
	if c == 0 {
		c = strings.Compare(intA, intB)
	}
	if c == 0 {
		c = strings.Compare(fracA, fracB)
	}
	if negA {
		return -c
	}
	return c
}

// numericRank places a numeric's text among the special values: -1 for
// -Infinity, 1 for Infinity, 2 for NaN, 0 for a number.
func numericRank(s string) int {
	switch s {
	case "-Infinity":
		return -1
	case "Infinity":
		return 1
	case "NaN":
		return 2
	}
	return 0
}
