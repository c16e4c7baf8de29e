package store

import (
	"fmt"
)

var (
	keyCheckpoint = []byte("checkpoint")
	keySlotState  = []byte("slot")
	keyGeneration = []byte("generation")
)

// Checkpoint returns the replication checkpoint: the end LSN of the last
// transaction durable in the queue, or a later position PostgreSQL reported
// while nothing was pending. Zero means no checkpoint yet.
func (r *Reader) Checkpoint() (LSN, error) { return r.metaLSN(keyCheckpoint, "checkpoint") }

// SetCheckpoint records the replication checkpoint. It never moves backwards.
func (w *Writer) SetCheckpoint(l LSN) error { return w.raiseMetaLSN(keyCheckpoint, "checkpoint", l) }

// metaLSN reads a position kept in the meta bucket; zero when absent.
func (r *Reader) metaLSN(key []byte, what string) (LSN, error) {
	v := r.tx.Bucket(bucketMeta).Get(key)
	if v == nil {
		return 0, nil
	}
	d := newDecoder(recordMeta, v)
	l := LSN(d.uvarint())
	if err := d.done(); err != nil {
		return 0, fmt.Errorf("read %s: %w", what, err)
	}
	return l, nil
}

// raiseMetaLSN records a position in the meta bucket unless it would move
// backwards.
func (w *Writer) raiseMetaLSN(key []byte, what string, l LSN) error {
	cur, err := w.metaLSN(key, what)
	if err != nil {
		return err
	}
	if l <= cur {
		return nil
	}
	e := newEncoder(recordMeta, 10)
	e.uvarint(uint64(l))
	return w.tx.Bucket(bucketMeta).Put(key, e.finish())
}

// SlotState records which replication slot the state belongs to, so that a
// state directory is never used with a different server, database or slot.
type SlotState struct {
	SystemID    string
	Database    string
	Slot        string
	Publication string
	// ConsistentPoint is the LSN at which the slot was created.
	ConsistentPoint LSN
	// SnapshotDone is set once the initial snapshot (if any) is queued.
	SnapshotDone bool
}

// SlotState returns the recorded slot, or nil when none is recorded.
func (r *Reader) SlotState() (*SlotState, error) {
	v := r.tx.Bucket(bucketMeta).Get(keySlotState)
	if v == nil {
		return nil, nil
	}
	d := newDecoder(recordSlotState, v)
	s := &SlotState{
		SystemID:        d.str(),
		Database:        d.str(),
		Slot:            d.str(),
		Publication:     d.str(),
		ConsistentPoint: LSN(d.uvarint()),
		SnapshotDone:    d.byte1() == 1,
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("read slot state: %w", err)
	}
	return s, nil
}

// SetSlotState records the slot the state belongs to.
func (w *Writer) SetSlotState(s *SlotState) error {
	e := newEncoder(recordSlotState, 64)
	e.str(s.SystemID)
	e.str(s.Database)
	e.str(s.Slot)
	e.str(s.Publication)
	e.uvarint(uint64(s.ConsistentPoint))
	done := byte(0)
	if s.SnapshotDone {
		done = 1
	}
	e.byte1(done)
	return w.tx.Bucket(bucketMeta).Put(keySlotState, e.finish())
}

// Generation counts the times the queue was cleared (ClearSlotState). A
// reader that keeps what it read of the queue from one read transaction to
// the next compares it, so as not to take a new queue for the one it read.
func (r *Reader) Generation() (uint64, error) {
	g, err := r.metaLSN(keyGeneration, "queue generation")
	return uint64(g), err
}

// ClearSlotState forgets the slot and everything captured through it: the
// queue, spools, schema history, table identities, backfills and checkpoint. Used when an interrupted
// initial snapshot starts over. The queue's generation goes up by one.
func (w *Writer) ClearSlotState() error {
	gen, err := w.Generation()
	if err != nil {
		return err
	}
	if err := w.raiseMetaLSN(keyGeneration, "queue generation", LSN(gen+1)); err != nil {
		return err
	}
	for _, name := range [][]byte{bucketBackfill, bucketPartitions, bucketEnumLabels} {
		if w.tx.Bucket(name) != nil {
			if err := w.tx.DeleteBucket(name); err != nil {
				return fmt.Errorf("clear %s: %w", name, err)
			}
		}
	}
	for _, name := range [][]byte{bucketQueue, bucketSpool, bucketRelations} {
		if err := w.tx.DeleteBucket(name); err != nil {
			return fmt.Errorf("clear %s: %w", name, err)
		}
		if _, err := w.tx.CreateBucket(name); err != nil {
			return fmt.Errorf("clear %s: %w", name, err)
		}
	}
	if err := w.clearTableIdentities(); err != nil {
		return err
	}
	m := w.tx.Bucket(bucketMeta)
	for _, k := range [][]byte{keyCheckpoint, keySlotState, keyQueueStats, keyCopiesRecorded} {
		if err := m.Delete(k); err != nil {
			return fmt.Errorf("clear %s: %w", k, err)
		}
	}
	w.stats, w.statsDirty = QueueStats{}, false
	return nil
}

// PutRelation adds a schema version to the schema history.
func (w *Writer) PutRelation(r *Relation) error {
	return w.tx.Bucket(bucketRelations).Put(relationKey(r.Key), encodeRelation(r))
}

func relationKey(k RelationKey) []byte {
	b := make([]byte, 0, 12)
	b = append(b, byte(k.OID>>24), byte(k.OID>>16), byte(k.OID>>8), byte(k.OID))
	return append(b, lsnKey(k.LSN)...)
}

// Relations returns the whole schema history.
func (r *Reader) Relations() (map[RelationKey]*Relation, error) {
	out := map[RelationKey]*Relation{}
	err := r.tx.Bucket(bucketRelations).ForEach(func(k, v []byte) error {
		rel, err := decodeRelation(v)
		if err != nil {
			return fmt.Errorf("relation %x: %w", k, err)
		}
		out[rel.Key] = rel
		return nil
	})
	return out, err
}
