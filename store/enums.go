package store

import (
	"encoding/binary"
	"fmt"
)

// bucketEnumLabels holds, per captured table OID, the labels of the enum
// types whose values the table holds, as the catalog watcher last acted on
// them, so that a label renamed while capture was stopped is noticed at the
// next start. It is created on the first write, and cleared with the slot.
var bucketEnumLabels = []byte("enum-labels")

// EnumLabels returns the recorded enum labels by table OID.
func (r *Reader) EnumLabels() (map[uint32][]string, error) {
	out := map[uint32][]string{}
	b := r.tx.Bucket(bucketEnumLabels)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		oid, labels, err := decodeEnumLabels(v)
		if err != nil {
			return fmt.Errorf("enum labels %x: %w", k, err)
		}
		if len(k) != 4 || binary.BigEndian.Uint32(k) != oid {
			return fmt.Errorf("enum labels %x: %w: record says table %d", k, ErrCorrupt, oid)
		}
		out[oid] = labels
		return nil
	})
	return out, err
}

// PutEnumLabels records the enum labels of the table oid, replacing its
// record; none deletes it.
func (w *Writer) PutEnumLabels(oid uint32, labels []string) error {
	if len(labels) == 0 {
		if b := w.tx.Bucket(bucketEnumLabels); b != nil {
			return b.Delete(backfillKey(oid))
		}
		return nil
	}
	b, err := w.tx.CreateBucketIfNotExists(bucketEnumLabels)
	if err != nil {
		return fmt.Errorf("record enum labels of table %d: %w", oid, err)
	}
	if err := b.Put(backfillKey(oid), encodeEnumLabels(oid, labels)); err != nil {
		return fmt.Errorf("record enum labels of table %d: %w", oid, err)
	}
	return nil
}

func encodeEnumLabels(oid uint32, labels []string) []byte {
	size := 8
	for _, l := range labels {
		size += len(l) + 2
	}
	e := newEncoder(recordEnumLabels, size)
	e.uvarint(uint64(oid))
	e.uvarint(uint64(len(labels)))
	for _, l := range labels {
		e.str(l)
	}
	return e.finish()
}

func decodeEnumLabels(data []byte) (oid uint32, labels []string, err error) {
	d := newDecoder(recordEnumLabels, data)
	oid = uint32(d.uvarint())
	// Each label takes at least one byte, its length.
	if n := d.uvarint(); n > uint64(len(d.buf)) {
		d.fail("length")
	} else {
		labels = make([]string, n)
		for i := range labels {
			labels[i] = d.str()
		}
	}
	if err := d.done(); err != nil {
		return 0, nil, fmt.Errorf("decode enum labels: %w", err)
	}
	return oid, labels, nil
}
