package store

import (
	"errors"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func sampleBackfills() []*Backfill {
	return []*Backfill{
		{OID: 16384, Table: "public.items", Reason: "added", After: [][]byte{[]byte("42"), []byte("it's"), {}},
			Key: []string{"id", "name", ""}, Rows: 4096, Chunks: 1, Started: time.UnixMicro(1700000000123456).UTC()},
		{OID: 16385, Table: "public.old", Reason: "added", After: [][]byte{[]byte("7")}, Rows: 1, Chunks: 1},
		{OID: 1, Table: "s.t", Reason: "initial snapshot", Done: true, Rows: 7,
			Started: time.UnixMicro(1).UTC(), Finished: time.UnixMicro(2).UTC()},
		{OID: 4294967295, Table: "s.keyless", Reason: "resync", Page: 1 << 40, Truncate: true},
	}
}

func TestBackfillRoundTrip(t *testing.T) {
	db := openTest(t)
	if err := db.View(func(r *Reader) error {
		all, err := r.Backfills()
		if err != nil || len(all) != 0 {
			t.Fatalf("a new state file holds backfills %v (err %v)", all, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	in := sampleBackfills()
	if err := db.Update(func(w *Writer) error {
		for _, bf := range in {
			if err := w.PutBackfill(bf); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got map[uint32]*Backfill
	if err := db.View(func(r *Reader) (err error) { got, err = r.Backfills(); return err }); err != nil {
		t.Fatal(err)
	}
	for _, bf := range in {
		if !reflect.DeepEqual(got[bf.OID], bf) {
			t.Errorf("backfill %d: read back %+v, wrote %+v", bf.OID, got[bf.OID], bf)
		}
	}
	// Forgotten one by one, and all with the slot.
	if err := db.Update(func(w *Writer) error { return w.DeleteBackfill(1) }); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) (err error) { got, err = r.Backfills(); return err }); err != nil || len(got) != 3 || got[1] != nil {
		t.Fatalf("after a delete: %v (err %v)", got, err)
	}
	var marked bool
	if err := db.Update(func(w *Writer) error {
		if err := w.MarkCopiesRecorded(); err != nil {
			return err
		}
		if m, err := w.CopiesRecorded(); err != nil || !m {
			t.Fatalf("copies recorded %v after marking (err %v)", m, err)
		}
		return w.ClearSlotState()
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) (err error) { got, err = r.Backfills(); return err }); err != nil || len(got) != 0 {
		t.Fatalf("after ClearSlotState: %v (err %v)", got, err)
	}
	if err := db.View(func(r *Reader) (err error) { marked, err = r.CopiesRecorded(); return err }); err != nil || marked {
		t.Fatalf("copies still recorded after ClearSlotState (err %v)", err)
	}
}

func TestBackfillCorruptionIsDetected(t *testing.T) {
	for _, bf := range sampleBackfills() {
		data := encodeBackfill(bf)
		for i := range data {
			bad := append([]byte(nil), data...)
			bad[i] ^= 0x40
			if _, err := decodeBackfill(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
				t.Fatalf("flipping byte %d: err = %v, want ErrCorrupt", i, err)
			}
		}
		for n := range len(data) {
			if _, err := decodeBackfill(data[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut to %d bytes: err = %v, want ErrCorrupt", n, err)
			}
		}
	}
	// A record of another type, and one whose key names another table.
	if _, err := decodeBackfill(encodeRelation(&Relation{Key: RelationKey{OID: 1}})); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("relation read as backfill: err = %v", err)
	}
	db := openTest(t)
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketBackfill)
		if err != nil {
			return err
		}
		return b.Put(backfillKey(2), encodeBackfill(&Backfill{OID: 3, Table: "s.t"}))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) error { _, err := r.Backfills(); return err }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("record under another table's key: err = %v", err)
	}
}

func FuzzDecodeBackfill(f *testing.F) {
	for _, bf := range sampleBackfills() {
		f.Add(encodeBackfill(bf))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeBackfill(data) // must not panic or allocate without bound
	})
}

func TestSnapshotOpRoundTrip(t *testing.T) {
	if OpSnapshot.String() != "snapshot" {
		t.Fatalf("OpSnapshot is %q", OpSnapshot.String())
	}
	in := []Change{{Op: OpSnapshot, Relation: RelationKey{OID: 5, LSN: 6}, New: sampleValues()}}
	_, out, err := decodeChunk(encodeChunk(0, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("read back %+v", out)
	}
	bad := encodeChunk(0, []Change{{Op: OpSnapshot + 1, New: []Value{}}})
	if _, _, err := decodeChunk(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an operation past OpSnapshot: err = %v", err)
	}
}

// TestDoneBackfillIsWrittenWithoutItsKey checks that a done record leaves
// out the key's names (flag 4), so that a version that does not know them
// reads it: the names only serve to resume a copy.
func TestDoneBackfillIsWrittenWithoutItsKey(t *testing.T) {
	bf := &Backfill{OID: 7, Table: "s.t", Reason: "resync", After: [][]byte{[]byte("9")}, Key: []string{"id"}, Done: true}
	data := encodeBackfill(bf)
	if flags := data[len(data)-5]; flags != 1 { // before the checksum
		t.Fatalf("a done record ends with flags %#x, want 0x1 (done, no key names)", flags)
	}
	got, err := decodeBackfill(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != nil || !got.Done || string(got.After[0]) != "9" {
		t.Fatalf("read back %+v", got)
	}
}
