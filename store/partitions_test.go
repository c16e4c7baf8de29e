package store

import (
	"maps"
	"slices"
	"testing"
)

func TestPartitionsRoundTrip(t *testing.T) {
	db := openTest(t)
	var got map[uint32][]uint32
	read := func() {
		t.Helper()
		if err := db.View(func(r *Reader) (err error) { got, err = r.Partitions(); return err }); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if len(got) != 0 {
		t.Fatalf("a new state file records partitions %v", got)
	}
	if err := db.Update(func(w *Writer) error {
		if err := w.PutPartitions(16384, []uint32{16400, 16390, 4294967295}); err != nil {
			return err
		}
		if err := w.PutPartitions(7, []uint32{8}); err != nil {
			return err
		}
		return w.PutPartitions(9, nil) // nothing to delete
	}); err != nil {
		t.Fatal(err)
	}
	read()
	want := map[uint32][]uint32{16384: {16390, 16400, 4294967295}, 7: {8}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("read back %v, want %v (sorted)", got, want)
	}
	if err := db.Update(func(w *Writer) error { return w.PutPartitions(7, nil) }); err != nil {
		t.Fatal(err)
	}
	read()
	if _, ok := got[7]; ok || len(got) != 1 {
		t.Fatalf("after recording none for table 7: %v", got)
	}
	if err := db.Update(func(w *Writer) error { return w.ClearSlotState() }); err != nil {
		t.Fatal(err)
	}
	read()
	if len(got) != 0 {
		t.Fatalf("after ClearSlotState: %v", got)
	}
}
