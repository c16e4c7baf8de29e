package typemap

import (
	"bytes"
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
