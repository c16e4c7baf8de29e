package typemap

import (
	"math"
	"math/big"
	"slices"

	"github.com/lakeside/lakeside/store"
)

// Compare orders two queued values of a column as PostgreSQL's default
// operators would for the mapped types: numbers by value, text by bytes,
// NULL first.
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
		switch {
		case a.Int < b.Int:
			return -1
		case a.Int > b.Int:
			return 1
		}
		return 0
	case store.KindFloat32, store.KindFloat64:
		fa, fb := floatOf(a), floatOf(b)
		switch {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	case store.KindNumeric:
		return compareNumericText(string(a.Bytes), string(b.Bytes))
	}
	return slices.Compare(a.Bytes, b.Bytes)
}

func floatOf(v store.Value) float64 {
	if v.Kind == store.KindFloat32 {
		return float64(math.Float32frombits(uint32(v.Int)))
	}
	return math.Float64frombits(uint64(v.Int))
}

// compareNumericText compares two numerics printed by PostgreSQL; NaN sorts
// after every number, as in PostgreSQL.
func compareNumericText(a, b string) int {
	ra, okA := new(big.Rat).SetString(a)
	rb, okB := new(big.Rat).SetString(b)
	switch {
	case okA && okB:
		return ra.Cmp(rb)
	case okA:
		return -1
	case okB:
		return 1
	}
	return 0
}
