package typemap

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// TestDecodeOwnedRowRefersToItsBytes decodes a row with a huge string and
// a small one: DecodeOwnedRow makes the huge one a view of the bytes it
// was handed, DecodeRow a copy, and both copy the small one.
func TestDecodeOwnedRowRefersToItsBytes(t *testing.T) {
	huge := strings.Repeat("h", ownedStringBytes)
	b, err := AppendRow(nil, []any{huge, "small"})
	if err != nil {
		t.Fatal(err)
	}
	within := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		start := uintptr(unsafe.Pointer(&b[0]))
		return p >= start && p < start+uintptr(len(b))
	}
	row, _, err := DecodeOwnedRow(nil, b, nil)
	if err != nil || row[0] != huge || row[1] != "small" {
		t.Fatalf("owned: %d values, %v", len(row), err)
	}
	if !within(row[0].(string)) || within(row[1].(string)) {
		t.Fatal("DecodeOwnedRow copied the huge string, or referred to the small one")
	}
	row, _, err = DecodeRow(nil, b, nil)
	if err != nil || row[0] != huge || within(row[0].(string)) {
		t.Fatalf("DecodeRow referred to bytes it was not handed: %v", err)
	}
}

// TestAppendRowFailsOnAnUnknownType spills rows holding a value of a Go
// type no Delta type converts to, alone and inside an array: AppendRow
// returns an error wrapping ErrSpillType that names the column and the
// type, where it once panicked and stopped the agent.
func TestAppendRowFailsOnAnUnknownType(t *testing.T) {
	for _, tc := range []struct {
		row  []any
		want string
	}{
		{[]any{int64(1), uint64(2)}, "spill: column 1: no encoding for Go type uint64"},
		{[]any{"a", nil, 3}, "spill: column 2: no encoding for Go type int"},
		{[]any{[]any{int32(1), struct{}{}}}, "spill: column 0: no encoding for Go type struct {}"},
		{[]any{map[string]any{"k": "v"}}, "spill: column 0: no encoding for Go type map[string]interface {}"},
	} {
		_, err := AppendRow(nil, tc.row)
		if !errors.Is(err, ErrSpillType) || err.Error() != tc.want {
			t.Errorf("AppendRow(%v) = %v, want %q", tc.row, err, tc.want)
		}
	}
	// The types it encodes round-trip.
	row := []any{nil, Unchanged, true, int8(1), int16(2), int32(3), int64(4), float32(5), float64(6), "s", []byte("b"), []any{int64(7), nil}}
	b, err := AppendRow(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	got, rest, err := DecodeRow(nil, b, nil)
	if err != nil || len(rest) != 0 || !reflect.DeepEqual(got, row) {
		t.Fatalf("DecodeRow = %v, %d bytes left, %v; want %v", got, len(rest), err, row)
	}
}
