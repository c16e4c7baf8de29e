package store

import (
	"errors"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestTableRecordsCorruptionIsDetected flips and cuts the bytes of each
// kind of table record, and files one under another table's key: each is
// read as corrupt.
func TestTableRecordsCorruptionIsDetected(t *testing.T) {
	for _, kind := range []struct {
		name   string
		bucket []byte
		encode func(oid uint32) []byte
		decode func([]byte) error
		read   func(*Reader) error
	}{
		{"partitions", bucketPartitions,
			func(oid uint32) []byte { return encodePartitions(oid, []uint32{16390, 16400, 1 << 31}) },
			func(b []byte) error { _, _, err := decodePartitions(b); return err },
			func(r *Reader) error { _, err := r.Partitions(); return err }},
		{"enum labels", bucketEnumLabels,
			func(oid uint32) []byte { return encodeEnumLabels(oid, []string{"16390=ok", "16391=fine"}) },
			func(b []byte) error { _, _, err := decodeEnumLabels(b); return err },
			func(r *Reader) error { _, err := r.EnumLabels(); return err }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			data := kind.encode(16384)
			for i := range data {
				bad := slices.Clone(data)
				bad[i] ^= 0x40
				if err := kind.decode(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
					t.Fatalf("flipping byte %d: err = %v, want ErrCorrupt", i, err)
				}
			}
			for n := range len(data) {
				if err := kind.decode(data[:n]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("cut to %d bytes: err = %v, want ErrCorrupt", n, err)
				}
			}
			db := openTest(t)
			if err := db.bolt.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists(kind.bucket)
				if err != nil {
					return err
				}
				return b.Put(backfillKey(2), kind.encode(3))
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.View(kind.read); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("record under another table's key: err = %v", err)
			}
		})
	}
}
