package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SpoolID names a spool: the changes of a transaction that is still in
// progress, kept on disk instead of in memory. Streamed transactions use their
// top-level xid; the initial snapshot uses SnapshotSpool.
type SpoolID uint64

// SnapshotSpool is the spool that collects the rows of the initial snapshot.
const SnapshotSpool SpoolID = 1 << 32

func (id SpoolID) key() []byte { return binary.BigEndian.AppendUint64(nil, uint64(id)) }

// spoolTotals is kept at the header key of each spool.
type spoolTotals struct {
	changes int64
	bytes   int64
}

func readSpoolTotals(b *bolt.Bucket) (spoolTotals, error) {
	v := b.Get(headerKey)
	if v == nil {
		return spoolTotals{}, nil
	}
	d := newDecoder(recordMeta, v)
	t := spoolTotals{changes: d.varint(), bytes: d.varint()}
	return t, d.done()
}

func writeSpoolTotals(b *bolt.Bucket, t spoolTotals) error {
	e := newEncoder(recordMeta, 16)
	e.varint(t.changes)
	e.varint(t.bytes)
	return b.Put(headerKey, e.finish())
}

// SpoolAppend adds changes of subtransaction subXid (equal to the top-level
// xid for its own changes) to a spool, creating the spool when needed.
func (w *Writer) SpoolAppend(id SpoolID, subXid uint32, changes []Change) error {
	w.touch(id)
	b, err := w.tx.Bucket(bucketSpool).CreateBucketIfNotExists(id.key())
	if err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	seq, err := b.NextSequence()
	if err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	e := w.encoder()
	e.chunk(subXid, changes)
	data := w.keep(e)
	if err := b.Put(ordinalKey(seq), data); err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	t, err := readSpoolTotals(b)
	if err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	t.changes += int64(len(changes))
	t.bytes += int64(len(data))
	return writeSpoolTotals(b, t)
}

// SpoolAbort discards the changes of subtransaction subXid from a spool; when
// subXid is the spool's own top-level xid, the whole spool is discarded.
// Aborting a spool that does not exist is not an error: PostgreSQL may abort
// a transaction none of whose changes were streamed.
func (w *Writer) SpoolAbort(id SpoolID, subXid uint32) error {
	sp := w.tx.Bucket(bucketSpool)
	b := sp.Bucket(id.key())
	if b == nil {
		return nil
	}
	w.touch(id)
	if uint64(subXid) == uint64(id) {
		if err := sp.DeleteBucket(id.key()); err != nil {
			return fmt.Errorf("spool %d: abort: %w", id, err)
		}
		return nil
	}
	t, err := readSpoolTotals(b)
	if err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	var doomed [][]byte
	c := b.Cursor()
	for k, v := c.Seek(ordinalKey(1)); k != nil; k, v = c.Next() {
		sx, changes, err := decodeChunk(v)
		if err != nil {
			return fmt.Errorf("spool %d: chunk %x: %w", id, k, err)
		}
		if sx == subXid {
			doomed = append(doomed, k)
			t.changes -= int64(len(changes))
			t.bytes -= int64(len(v))
		}
	}
	for _, k := range doomed {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("spool %d: abort subtransaction %d: %w", id, subXid, err)
		}
	}
	return writeSpoolTotals(b, t)
}

// SpoolCommit moves a spool into the queue as the committed transaction h.
// The move is one step inside the write transaction, however large the spool.
//
// A spool changed earlier in the same write transaction cannot be moved
// (bbolt's MoveBucket would move its last committed state and lose the rest):
// SpoolCommit then returns ErrSpoolBusy and the caller commits the pending
// write first.
func (w *Writer) SpoolCommit(id SpoolID, h TxnHeader) error {
	if w.touched[id] {
		return fmt.Errorf("spool %d: %w", id, ErrSpoolBusy)
	}
	sp := w.tx.Bucket(bucketSpool)
	b := sp.Bucket(id.key())
	if b == nil {
		// A streamed transaction whose every change was in aborted
		// subtransactions, or one with no changes: queue it empty.
		return w.AppendTxn(&Txn{TxnHeader: h}, 0)
	}
	t, err := readSpoolTotals(b)
	if err != nil {
		return fmt.Errorf("spool %d: %w", id, err)
	}
	// The spool moves, whole and in one step, into a new queue entry for the
	// transaction, where the header joins it.
	dst, err := w.tx.Bucket(bucketQueue).CreateBucket(lsnKey(h.EndLSN))
	if err != nil {
		return fmt.Errorf("queue transaction at %s: %w", h.EndLSN, err)
	}
	if err := sp.MoveBucket(id.key(), dst); err != nil {
		return fmt.Errorf("spool %d: commit: %w", id, err)
	}
	h.Changes = t.changes
	return w.finishTxn(dst, &h, t.bytes)
}

// DiscardSpools drops every spool: after a reconnect, PostgreSQL sends
// transactions that were in progress again from their start.
func (w *Writer) DiscardSpools() (int, error) {
	sp := w.tx.Bucket(bucketSpool)
	var keys [][]byte
	_ = sp.ForEach(func(k, _ []byte) error { keys = append(keys, k); return nil })
	for _, k := range keys {
		if err := sp.DeleteBucket(k); err != nil {
			return 0, fmt.Errorf("discard spool %x: %w", k, err)
		}
	}
	return len(keys), nil
}

// touch notes that a spool changed in this write transaction.
func (w *Writer) touch(id SpoolID) {
	if w.touched == nil {
		w.touched = map[SpoolID]bool{}
	}
	w.touched[id] = true
}

// SpoolTouched reports whether the spool changed in this write transaction,
// in which case SpoolCommit must wait for the next one.
func (w *Writer) SpoolTouched(id SpoolID) bool { return w.touched[id] }

// Spools returns how many spools are open.
func (r *Reader) Spools() (int, error) {
	n := 0
	err := r.tx.Bucket(bucketSpool).ForEach(func(_, _ []byte) error { n++; return nil })
	return n, err
}
