package typemap

import (
	"strings"
	"testing"
	"unsafe"
)

// TestDecodeOwnedRowRefersToItsBytes decodes a row with a huge string and
// a small one: DecodeOwnedRow makes the huge one a view of the bytes it
// was handed, DecodeRow a copy, and both copy the small one.
func TestDecodeOwnedRowRefersToItsBytes(t *testing.T) {
	huge := strings.Repeat("h", ownedStringBytes)
	b := AppendRow(nil, []any{huge, "small"})
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
