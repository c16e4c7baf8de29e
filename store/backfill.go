package store

import (
	"encoding/binary"
	"fmt"
	"time"
)

// bucketBackfill holds a Backfill record per table OID. It is created on the
// first write; a state file without it has recorded no copy.
var bucketBackfill = []byte("backfill")

// Backfill is the progress of copying one table's existing rows into the
// queue while changes stream (an online backfill), or the record that the
// initial snapshot copied the table. It is written in the same write as
// the chunk of rows it counts, so that a restart resumes after the last
// chunk queued and never queues one twice.
type Backfill struct {
	// OID is the table's OID; Table is its configured name,
	// "schema.table".
	OID   uint32
	Table string
	// Reason says why the table is copied: "initial snapshot", "added",
	// "resync", "re-created".
	Reason string
	// After holds the text form of the key columns of the last row
	// queued, in key order; nil before the first chunk. A table copied
	// by ctid ranges has none. Key names those columns while the copy
	// is not done (nil in a record written before it was kept); a done
	// record is written without it, which older versions read.
	After [][]byte
	Key   []string
	// Page is where the next chunk of a table copied by ctid ranges
	// starts.
	Page uint64
	// Rows and Chunks count what was queued.
	Rows, Chunks int64
	// Started is when the copy began; Finished when it ended (zero
	// while it runs).
	Started, Finished time.Time
	// Done is set once every row is queued.
	Done bool
	// Truncate is set while a truncate of the table is still to be
	// queued before the first chunk (a resync, a re-created table).
	Truncate bool
}

func backfillKey(oid uint32) []byte { return binary.BigEndian.AppendUint32(nil, oid) }

// Backfills returns every recorded backfill, by table OID.
func (r *Reader) Backfills() (map[uint32]*Backfill, error) {
	out := map[uint32]*Backfill{}
	b := r.tx.Bucket(bucketBackfill)
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		bf, err := decodeBackfill(v)
		if err != nil {
			return fmt.Errorf("backfill %x: %w", k, err)
		}
		if len(k) != 4 || binary.BigEndian.Uint32(k) != bf.OID {
			return fmt.Errorf("backfill %x: %w: record says table %d", k, ErrCorrupt, bf.OID)
		}
		out[bf.OID] = bf
		return nil
	})
	return out, err
}

// PutBackfill records a backfill's progress, replacing the table's record.
func (w *Writer) PutBackfill(bf *Backfill) error {
	b, err := w.tx.CreateBucketIfNotExists(bucketBackfill)
	if err != nil {
		return fmt.Errorf("record backfill of %s: %w", bf.Table, err)
	}
	if err := b.Put(backfillKey(bf.OID), encodeBackfill(bf)); err != nil {
		return fmt.Errorf("record backfill of %s: %w", bf.Table, err)
	}
	return nil
}

// DeleteBackfill forgets the record of a table's copy.
func (w *Writer) DeleteBackfill(oid uint32) error {
	b := w.tx.Bucket(bucketBackfill)
	if b == nil {
		return nil
	}
	return b.Delete(backfillKey(oid))
}

func encodeBackfill(bf *Backfill) []byte {
	e := newEncoder(recordBackfill, 64+len(bf.Table)+len(bf.Reason))
	e.uvarint(uint64(bf.OID))
	e.str(bf.Table)
	e.str(bf.Reason)
	if bf.After == nil {
		e.uvarint(0)
	} else {
		e.uvarint(uint64(len(bf.After)) + 1)
		for _, k := range bf.After {
			e.bytes(k)
		}
	}
	e.uvarint(bf.Page)
	e.varint(bf.Rows)
	e.varint(bf.Chunks)
	e.varint(micros(bf.Started))
	e.varint(micros(bf.Finished))
	flags := byte(0)
	if bf.Done {
		flags |= 1
	}
	if bf.Truncate {
		flags |= 2
	}
	key := bf.Key != nil && !bf.Done
	if key {
		flags |= 4
	}
	e.byte1(flags)
	if key {
		e.uvarint(uint64(len(bf.Key)))
		for _, k := range bf.Key {
			e.str(k)
		}
	}
	return e.finish()
}

func decodeBackfill(data []byte) (*Backfill, error) {
	d := newDecoder(recordBackfill, data)
	bf := &Backfill{OID: uint32(d.uvarint()), Table: d.str(), Reason: d.str()}
	// The count is the number of keys plus one (zero for none); each key
	// takes at least its length byte.
	if n := d.uvarint(); n > 0 && d.err == nil {
		if n-1 > uint64(len(d.buf)) {
			d.fail("length")
		} else {
			bf.After = make([][]byte, n-1)
			for i := range bf.After {
				bf.After[i] = d.bytes()
			}
		}
	}
	bf.Page = d.uvarint()
	bf.Rows = d.varint()
	bf.Chunks = d.varint()
	bf.Started = fromMicros(d.varint())
	bf.Finished = fromMicros(d.varint())
	flags := d.byte1()
	bf.Done, bf.Truncate = flags&1 != 0, flags&2 != 0
	if d.err == nil && flags&^7 != 0 {
		d.err = fmt.Errorf("%w: unknown backfill flags %#x", ErrCorrupt, flags)
	}
	if flags&4 != 0 && d.err == nil {
		// Each name takes at least its length byte.
		if n := d.uvarint(); n > uint64(len(d.buf)) {
			d.fail("length")
		} else {
			bf.Key = make([]string, n)
			for i := range bf.Key {
				bf.Key[i] = d.str()
			}
		}
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("decode backfill: %w", err)
	}
	return bf, nil
}

// micros is t in microseconds since the epoch, zero for the zero time.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// keyCopiesRecorded marks a state file that records every table copy in
// the backfill bucket, the initial snapshot's included. State files
// written before the bucket existed lack it.
var keyCopiesRecorded = []byte("copies_recorded")

// CopiesRecorded reports whether the backfill bucket records every copy
// of a table made with this state (see MarkCopiesRecorded): when it does
// not, a table without a record may still have been copied by the initial
// snapshot of an older version.
func (r *Reader) CopiesRecorded() (bool, error) {
	l, err := r.metaLSN(keyCopiesRecorded, "copies recorded")
	return l != 0, err
}

// MarkCopiesRecorded records that the backfill bucket records every copy
// of a table from now on.
func (w *Writer) MarkCopiesRecorded() error {
	return w.raiseMetaLSN(keyCopiesRecorded, "copies recorded", 1)
}
