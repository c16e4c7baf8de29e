package store

import "fmt"

// bucketEnumLabels holds, per captured table OID, the labels of the enum
// types whose values the table holds, as the catalog watcher last acted on
// them, so that a label renamed while capture was stopped is noticed at the
// next start. It is created on the first write, and cleared with the slot.
var bucketEnumLabels = []byte("enum-labels")

// EnumLabels returns the recorded enum labels by table OID.
func (r *Reader) EnumLabels() (map[uint32][]string, error) {
	return readTableRecords(r, bucketEnumLabels, "enum labels", decodeEnumLabels)
}

// PutEnumLabels records the enum labels of the table oid, replacing its
// record; none deletes it.
func (w *Writer) PutEnumLabels(oid uint32, labels []string) error {
	var rec []byte
	if len(labels) > 0 {
		rec = encodeEnumLabels(oid, labels)
	}
	return putTableRecord(w, bucketEnumLabels, "enum labels", oid, rec)
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
