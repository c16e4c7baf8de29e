package store

import (
	"fmt"
	"slices"
)

// bucketPartitions holds, per captured partitioned table OID, the OIDs of
// its leaf partitions as capture last acted on them, so that a partition
// attached, detached or dropped while capture was stopped is noticed at
// the next start. It is created on the first write, and cleared with the
// slot.
var bucketPartitions = []byte("partitions")

// Partitions returns the recorded leaf partitions, sorted, by table OID.
func (r *Reader) Partitions() (map[uint32][]uint32, error) {
	return readTableRecords(r, bucketPartitions, "partitions", decodePartitions)
}

// PutPartitions records the leaf partitions of the table oid, replacing
// its record; none deletes it.
func (w *Writer) PutPartitions(oid uint32, leaves []uint32) error {
	var rec []byte
	if len(leaves) > 0 {
		rec = encodePartitions(oid, leaves)
	}
	return putTableRecord(w, bucketPartitions, "partitions", oid, rec)
}

func encodePartitions(oid uint32, leaves []uint32) []byte {
	leaves = slices.Sorted(slices.Values(leaves))
	e := newEncoder(recordPartitions, 8+5*len(leaves))
	e.uvarint(uint64(oid))
	e.uvarint(uint64(len(leaves)))
	for _, l := range leaves {
		e.uvarint(uint64(l))
	}
	return e.finish()
}

func decodePartitions(data []byte) (oid uint32, leaves []uint32, err error) {
	d := newDecoder(recordPartitions, data)
	oid = uint32(d.uvarint())
	// Each OID takes at least one byte.
	if n := d.uvarint(); n > uint64(len(d.buf)) {
		d.fail("length")
	} else {
		leaves = make([]uint32, n)
		for i := range leaves {
			leaves[i] = uint32(d.uvarint())
		}
	}
	if err := d.done(); err != nil {
		return 0, nil, fmt.Errorf("decode partitions: %w", err)
	}
	return oid, leaves, nil
}
