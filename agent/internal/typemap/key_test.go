package typemap

import (
	"bytes"
	"cmp"
	"math"
	"testing"

	"github.com/lakeside/lakeside/store"
)

// TestValueKeyTellsValuesApart encodes values of every shape: equal values
// encode the same, and no two different values, nor a key of two values
// and another of the same bytes split otherwise, encode the same.
func TestValueKeyTellsValuesApart(t *testing.T) {
	vals := []store.Value{
		{Kind: store.KindNull},
		{Kind: store.KindInt32, Int: 1},
		{Kind: store.KindInt64, Int: 1},
		{Kind: store.KindInt64, Int: -1},
		{Kind: store.KindString, Bytes: []byte("a")},
		{Kind: store.KindString, Bytes: []byte("ab")},
		{Kind: store.KindString, Bytes: []byte("")},
		{Kind: store.KindBytes, Bytes: []byte("a")},
		{Kind: store.KindArray, Elems: []store.Value{{Kind: store.KindString, Bytes: []byte("a")}}},
		{Kind: store.KindArray, Elems: []store.Value{{Kind: store.KindString, Bytes: []byte("a")}, {Kind: store.KindNull}}},
		{Kind: store.KindArray},
	}
	seen := map[string]int{}
	for i := range vals {
		for j := range vals {
			k := AppendValueKey(AppendValueKey(nil, &vals[i]), &vals[j])
			if prev, dup := seen[string(k)]; dup {
				t.Fatalf("pairs %d and %d encode the same", prev, i*len(vals)+j)
			}
			seen[string(k)] = i*len(vals) + j
		}
		same := vals[i]
		same.Bytes = bytes.Clone(same.Bytes)
		if !bytes.Equal(AppendValueKey(nil, &vals[i]), AppendValueKey(nil, &same)) {
			t.Fatalf("value %d and its copy encode differently", i)
		}
	}
}

// TestFloatOrderIsPostgreSQLs orders special floats by Compare and by
// their key bytes: -Infinity, the numbers (-0 equal to 0), +Infinity, then
// NaN, equal to itself; a total order, so that sorting and paging agree.
func TestFloatOrderIsPostgreSQLs(t *testing.T) {
	negNaN := math.Float64frombits(math.Float64bits(math.NaN()) | 1<<63)
	ordered := [][]float64{{math.Inf(-1)}, {-1.5}, {math.Copysign(0, -1), 0}, {1e-30}, {2}, {math.Inf(1)}, {math.NaN(), negNaN}}
	rank := func(f float64) int {
		for i, group := range ordered {
			for _, g := range group {
				if math.Float64bits(f) == math.Float64bits(g) {
					return i
				}
			}
		}
		t.Fatalf("%v not in the order", f)
		return 0
	}
	var all []float64
	for _, g := range ordered {
		all = append(all, g...)
	}
	for _, kind := range []store.Kind{store.KindFloat64, store.KindFloat32} {
		for _, a := range all {
			for _, b := range all {
				va, vb := floatValue(kind, a), floatValue(kind, b)
				want := cmp.Compare(rank(a), rank(b))
				if got := Compare(va, vb); got != want {
					t.Errorf("%v: Compare(%v, %v) = %d, want %d", kind, a, b, got, want)
				}
				ka, kb := AppendKeyValue(nil, a), AppendKeyValue(nil, b)
				if got := bytes.Compare(ka, kb); got != want {
					t.Errorf("key bytes of %v and %v compare %d, want %d", a, b, got, want)
				}
			}
		}
	}
}

// floatValue returns f as a queued value of kind.
func floatValue(kind store.Kind, f float64) store.Value {
	if kind == store.KindFloat32 {
		return store.Value{Kind: kind, Int: int64(math.Float32bits(float32(f)))}
	}
	return store.Value{Kind: kind, Int: int64(math.Float64bits(f))}
}

// TestKeyOfAnUnknownTypeKeepsValuesApart encodes values of Go types no
// converter makes: different values get different keys, equal ones the
// same, so that two rows never share a key by accident.
func TestKeyOfAnUnknownTypeKeepsValuesApart(t *testing.T) {
	type point struct{ X, Y int }
	values := []any{uint64(1), uint64(2), point{1, 2}, point{2, 1}, map[string]int{"a": 1}, map[string]int{"a": 2}}
	seen := map[string]any{}
	for _, v := range values {
		k := string(AppendKeyValue(nil, v))
		if other, ok := seen[k]; ok {
			t.Errorf("%v and %v share the key %q", other, v, k)
		}
		seen[k] = v
		if again := string(AppendKeyValue(nil, v)); again != k {
			t.Errorf("%v: key %q, then %q", v, k, again)
		}
	}
}
