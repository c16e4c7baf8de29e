package store

import (
	"encoding/binary"
	"fmt"
)

// A table record is a value a bucket keeps per captured table, under the
// table's OID (4 bytes, big-endian), and which records that OID itself:
// the partitions and the enum labels are.

// readTableRecords returns the records of bucket by table OID, each
// decoded with decode; what names them in errors.
func readTableRecords[T any](r *Reader, bucket []byte, what string, decode func([]byte) (uint32, T, error)) (map[uint32]T, error) {
	out := map[uint32]T{}
	b := r.tx.Bucket(bucket)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		oid, rec, err := decode(v)
		if err != nil {
			return fmt.Errorf("%s %x: %w", what, k, err)
		}
		if len(k) != 4 || binary.BigEndian.Uint32(k) != oid {
			return fmt.Errorf("%s %x: %w: record says table %d", what, k, ErrCorrupt, oid)
		}
		out[oid] = rec
		return nil
	})
	return out, err
}

// putTableRecord records value, the encoded record of the table oid, in
// bucket, replacing its record; a nil value deletes it. The bucket is
// created on the first write.
func putTableRecord(w *Writer, bucket []byte, what string, oid uint32, value []byte) error {
	if value == nil {
		if b := w.tx.Bucket(bucket); b != nil {
			return b.Delete(backfillKey(oid))
		}
		return nil
	}
	b, err := w.tx.CreateBucketIfNotExists(bucket)
	if err != nil {
		return fmt.Errorf("record %s of table %d: %w", what, oid, err)
	}
	if err := b.Put(backfillKey(oid), value); err != nil {
		return fmt.Errorf("record %s of table %d: %w", what, oid, err)
	}
	return nil
}
