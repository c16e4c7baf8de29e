package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// DefaultChunkSize is the number of changes stored per queue record.
const DefaultChunkSize = 1024

// headerKey is the key of a transaction's header (and of a spool's totals)
// inside its bucket; chunks follow at 1, 2, ….
var headerKey = []byte{0, 0, 0, 0}

func lsnKey(l LSN) []byte { return binary.BigEndian.AppendUint64(nil, uint64(l)) }

func ordinalKey(n uint64) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// Reader reads the state inside one transaction.
type Reader struct{ tx *bolt.Tx }

// Writer changes the state inside one transaction.
type Writer struct {
	Reader
	// touched holds the spools changed in this transaction.
	touched map[SpoolID]bool
	// stats are the queue totals as this transaction changes them.
	stats      QueueStats
	statsDirty bool
	// arena holds the values the transaction puts.
	arena *valueArena
}

// AppendTxn adds a committed transaction to the queue, keyed by its end LSN,
// in chunks of at most chunkSize changes. A transaction of one chunk, the
// common small one, is one value (header and chunk); a larger one is a
// bucket of its header and chunks. A transaction whose end LSN is already
// queued is an error: the caller deduplicates against the checkpoint.
func (w *Writer) AppendTxn(t *Txn, chunkSize int) error {
	if chunkSize <= 0 {
		chunkSize = DefaultChunkSize
	}
	q := w.tx.Bucket(bucketQueue)
	key := lsnKey(t.EndLSN)
	if len(t.Changes) <= chunkSize {
		if err := w.loadStats(); err != nil {
			return err
		}
		// Put would replace an entry: look for one, unless the end LSN
		// is past every entry ever queued (capture appends in order).
		if t.EndLSN <= w.stats.LastLSN {
			if k, _ := q.Cursor().Seek(key); bytes.Equal(k, key) {
				return fmt.Errorf("queue transaction at %s: %w", t.EndLSN, berrors.ErrBucketExists)
			}
		}
		h := t.TxnHeader
		h.Changes = int64(len(t.Changes))
		e := w.encoder()
		e.inlineTxn(encodeTxnHeader(&h), t.Changes)
		data := w.keep(e)
		if err := q.Put(key, data); err != nil {
			return fmt.Errorf("queue transaction at %s: %w", t.EndLSN, err)
		}
		return w.countTxn(&h, int64(len(data)))
	}
	b, err := q.CreateBucket(key)
	if err != nil {
		return fmt.Errorf("queue transaction at %s: %w", t.EndLSN, err)
	}
	var size int64
	var ord uint64
	for start := 0; start < len(t.Changes); start += chunkSize {
		end := min(start+chunkSize, len(t.Changes))
		ord++
		e := w.encoder()
		e.chunk(0, t.Changes[start:end])
		data := w.keep(e)
		size += int64(len(data))
		if err := b.Put(ordinalKey(ord), data); err != nil {
			return fmt.Errorf("queue transaction at %s: %w", t.EndLSN, err)
		}
	}
	h := t.TxnHeader
	h.Changes = int64(len(t.Changes))
	return w.finishTxn(b, &h, size)
}

// finishTxn writes the header of a queued transaction and counts it in the
// totals, which are written once when the write transaction commits.
func (w *Writer) finishTxn(b *bolt.Bucket, h *TxnHeader, size int64) error {
	hdr := encodeTxnHeader(h)
	if err := b.Put(headerKey, hdr); err != nil {
		return fmt.Errorf("queue transaction at %s: %w", h.EndLSN, err)
	}
	return w.countTxn(h, size+int64(len(hdr)))
}

// countTxn counts a queued transaction of size bytes in the totals.
func (w *Writer) countTxn(h *TxnHeader, size int64) error {
	if err := w.loadStats(); err != nil {
		return err
	}
	w.stats.Transactions++
	w.stats.Bytes += size
	w.stats.LastLSN = max(w.stats.LastLSN, h.EndLSN)
	return nil
}

// loadStats reads the totals into the writer once per write transaction.
func (w *Writer) loadStats() error {
	if w.statsDirty {
		return nil
	}
	st, err := w.Reader.QueueStats()
	if err != nil {
		return err
	}
	w.stats, w.statsDirty = st, true
	return nil
}

// flush writes what the writer kept in memory; Update calls it before commit.
func (w *Writer) flush() error {
	if !w.statsDirty {
		return nil
	}
	return w.putQueueStats(w.stats)
}

// QueueStats returns the queue totals, including this transaction's changes.
func (w *Writer) QueueStats() (QueueStats, error) {
	if w.statsDirty {
		return w.stats, nil
	}
	return w.Reader.QueueStats()
}

// QueueStats summarises the queue.
type QueueStats struct {
	Transactions int64
	Bytes        int64
	// LastLSN is the end LSN of the newest transaction ever queued.
	LastLSN LSN
}

var keyQueueStats = []byte("queue_stats")

// QueueStats returns the queue totals.
func (r *Reader) QueueStats() (QueueStats, error) {
	v := r.tx.Bucket(bucketMeta).Get(keyQueueStats)
	if v == nil {
		return QueueStats{}, nil
	}
	d := newDecoder(recordMeta, v)
	st := QueueStats{Transactions: d.varint(), Bytes: d.varint(), LastLSN: LSN(d.uvarint())}
	if err := d.done(); err != nil {
		return QueueStats{}, fmt.Errorf("read queue totals: %w", err)
	}
	return st, nil
}

func (w *Writer) putQueueStats(st QueueStats) error {
	e := newEncoder(recordMeta, 24)
	e.varint(st.Transactions)
	e.varint(st.Bytes)
	e.uvarint(uint64(st.LastLSN))
	return w.tx.Bucket(bucketMeta).Put(keyQueueStats, e.finish())
}

// Trim deletes every queued transaction whose end LSN is at or below upTo.
// It returns how many were deleted.
func (w *Writer) Trim(upTo LSN) (int, error) {
	q := w.tx.Bucket(bucketQueue)
	if err := w.loadStats(); err != nil {
		return 0, err
	}
	limit := lsnKey(upTo)
	// One seek per entry: the cursor deletes an inline entry where it
	// stands, and seeks past what it deleted (after a delete, Next would
	// skip an entry; First would walk the emptied pages again each time).
	var key []byte
	trimmed := 0
	c := q.Cursor()
	for k, v := c.First(); k != nil && bytes.Compare(k, limit) <= 0; k, v = c.Seek(key) {
		key = append(key[:0], k...)
		var size int64
		var err error
		if v != nil {
			size = int64(len(v))
			err = c.Delete()
		} else {
			size = txnBytes(q.Bucket(key), false)
			err = q.DeleteBucket(key)
		}
		if err != nil {
			return 0, fmt.Errorf("trim queue: %w", err)
		}
		w.stats.Transactions--
		w.stats.Bytes -= size
		trimmed++
	}
	return trimmed, nil
}

// txnBytes adds up the size of a queue entry's records, as counted when it
// was queued: the header and the chunks, without the totals record of a
// spool moved in (spooled is true inside one).
func txnBytes(b *bolt.Bucket, spooled bool) int64 {
	var n int64
	if b == nil {
		return 0
	}
	_ = b.ForEach(func(k, v []byte) error {
		switch {
		case v == nil:
			n += txnBytes(b.Bucket(k), true)
		case spooled && bytes.Equal(k, headerKey):
		default:
			n += int64(len(v))
		}
		return nil
	})
	return n
}

// TxnCursor gives access to one queued transaction's changes.
type TxnCursor struct {
	b *bolt.Bucket
	// chunk is the only chunk of an inline transaction (b is nil).
	chunk []byte
}

// Chunks calls fn with each chunk of the transaction's changes, in order.
// The slices are owned by the callee. A transaction that was streamed holds
// its chunks in the spool bucket that moved into it at commit.
func (t *TxnCursor) Chunks(fn func(changes []Change) error) error {
	return t.chunks(decodeChunk, fn)
}

// RecycledChunks is Chunks for a callee that hands each chunk's memory
// back once it is done with the chunk's changes, which may be after fn
// returns and in another goroutine, but not after the read transaction
// ends: the changes' byte values are slices of the state file's memory,
// valid only in the read transaction. fn gets the changes and the memory
// they are decoded into, and puts that memory back into pool. Each chunk
// is decoded into memory taken from pool, so that reading a large
// transaction, whose chunks are handed back as the callee goes, allocates
// nothing per chunk.
func (t *TxnCursor) RecycledChunks(pool *ChunkPool, fn func(changes []Change, mem *ChunkMemory) error) error {
	var mem *ChunkMemory
	decode := func(data []byte) (uint32, []Change, error) {
		mem = pool.get()
		return decodeRecycledChunk(data, mem)
	}
	return t.chunks(decode, func(changes []Change) error { return fn(changes, mem) })
}

// ChunksWithoutValues is Chunks without the values: each change has its
// Op, Relation and OldIsKey, and New and Old are nil. The values are still
// checked, not decoded, which costs a fraction of reading them: for a
// caller that needs to know which tables a transaction touches. The slice
// fn gets is that of the chunk before: fn keeps nothing of it.
func (t *TxnCursor) ChunksWithoutValues(fn func(changes []Change) error) error {
	var last []Change
	decode := func(data []byte) (subXid uint32, changes []Change, err error) {
		subXid, changes, err = decodeChunkWithoutValues(data, last)
		last = changes
		return subXid, changes, err
	}
	return t.chunks(decode, fn)
}

func (t *TxnCursor) chunks(decode chunkDecoder, fn func(changes []Change) error) error {
	if t.b == nil {
		_, changes, err := decode(t.chunk)
		if err != nil {
			return fmt.Errorf("chunk: %w", err)
		}
		return fn(changes)
	}
	return eachChunk(t.b, decode, func(_ uint32, changes []Change) error { return fn(changes) })
}

// chunkDecoder is decodeChunk, decodeChunkWithoutValues or a
// decodeRecycledChunk with its memory (or, in tests, decodeSharedChunk).
type chunkDecoder func(data []byte) (subXid uint32, changes []Change, err error)

// eachChunk decodes the chunks of a queue entry or spool in order, descending
// into a nested spool bucket.
func eachChunk(b *bolt.Bucket, decode chunkDecoder, fn func(subXid uint32, changes []Change) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if bytes.Equal(k, headerKey) {
			continue
		}
		if v == nil {
			if err := eachChunk(b.Bucket(k), decode, fn); err != nil {
				return err
			}
			continue
		}
		subXid, changes, err := decode(v)
		if err != nil {
			return fmt.Errorf("chunk %x: %w", k, err)
		}
		if err := fn(subXid, changes); err != nil {
			return err
		}
	}
	return nil
}

// Changes returns all the transaction's changes in one slice.
func (t *TxnCursor) Changes() ([]Change, error) {
	var all []Change
	err := t.Chunks(func(changes []Change) error {
		all = append(all, changes...)
		return nil
	})
	return all, err
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")

// Txns calls fn for each queued transaction with an end LSN above after, in
// commit order. Returning ErrStopScan from fn ends the scan without error.
// The header and the cursor are valid only until fn returns: the next
// transaction reuses them.
func (r *Reader) Txns(after LSN, fn func(h *TxnHeader, t *TxnCursor) error) error {
	q := r.tx.Bucket(bucketQueue)
	c := q.Cursor()
	var h TxnHeader
	var cur TxnCursor
	for k, v := c.Seek(lsnKey(after + 1)); k != nil; k, v = c.Next() {
		cur = TxnCursor{}
		var hdr []byte
		if v != nil {
			var err error
			if hdr, cur.chunk, err = decodeInlineTxn(v); err != nil {
				return fmt.Errorf("queue entry %x: %w", k, err)
			}
		} else {
			cur.b = q.Bucket(k)
			hdr = cur.b.Get(headerKey)
		}
		var err error
		if h, err = decodeTxnHeader(hdr); err != nil {
			return fmt.Errorf("queue entry %x: %w", k, err)
		}
		if uint64(h.EndLSN) != binary.BigEndian.Uint64(k) {
			return fmt.Errorf("queue entry %x: %w: header says end LSN %s", k, ErrCorrupt, h.EndLSN)
		}
		if err := fn(&h, &cur); err != nil {
			if errors.Is(err, ErrStopScan) {
				return nil
			}
			return err
		}
	}
	return nil
}

// ErrStopScan may be returned by a Txns callback to end the scan early.
var ErrStopScan = errStop

// ReadTxns loads up to limit queued transactions after the given LSN into
// memory (limit <= 0 means all). Meant for tests and small reads.
func (r *Reader) ReadTxns(after LSN, limit int) ([]*Txn, error) {
	var out []*Txn
	err := r.Txns(after, func(h *TxnHeader, c *TxnCursor) error {
		changes, err := c.Changes()
		if err != nil {
			return err
		}
		out = append(out, &Txn{TxnHeader: *h, Changes: changes})
		if limit > 0 && len(out) >= limit {
			return ErrStopScan
		}
		return nil
	})
	return out, err
}
