package store

import (
	"maps"
	"slices"
	"testing"
)

func TestEnumLabelsRoundTrip(t *testing.T) {
	db := openTest(t)
	read := func() map[uint32][]string {
		t.Helper()
		var got map[uint32][]string
		if err := db.View(func(r *Reader) (err error) { got, err = r.EnumLabels(); return err }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("a new state file records enum labels %v", got)
	}
	// Labels are kept in the order given, and any text is a label.
	want := map[uint32][]string{16384: {"16390=ok", "16391=", "16392=a=b", "16393=é \t\n"}, 4294967295: {"1=x"}}
	if err := db.Update(func(w *Writer) error {
		for oid, labels := range want {
			if err := w.PutEnumLabels(oid, labels); err != nil {
				return err
			}
		}
		return w.PutEnumLabels(9, nil) // nothing to delete
	}); err != nil {
		t.Fatal(err)
	}
	if got := read(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("read back %v, want %v", got, want)
	}
	if err := db.Update(func(w *Writer) error { return w.PutEnumLabels(4294967295, nil) }); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 1 || got[4294967295] != nil {
		t.Fatalf("after recording none for table 4294967295: %v", got)
	}
	if err := db.Update(func(w *Writer) error { return w.ClearSlotState() }); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("after ClearSlotState: %v", got)
	}
}
