package store

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestRecycledChunksReuseMemory reads a transaction of many chunks whose
// values change kind from one chunk to the next, handing each chunk's
// memory back at once: every chunk decodes to what was queued (no value
// keeps a field of the one decoded there before), one ChunkMemory serves
// them all, and the read allocates a small part of what reading it with
// sharedChunks does. A callee that keeps each chunk gets new memory for
// each.
func TestRecycledChunksReuseMemory(t *testing.T) {
	const chunkSize, chunks = 100, 30
	txn := &Txn{TxnHeader: TxnHeader{Xid: 9, CommitLSN: 100, EndLSN: 108, CommitTime: time.UnixMicro(1700000000123456)}}
	kinds := sampleValues()
	for i := range chunkSize * chunks {
		// Each chunk shifts the kinds by one column: a string's place
		// holds a null in the next chunk, an array's an integer.
		shift := i / chunkSize
		row := make([]Value, len(kinds))
		for j := range row {
			row[j] = kinds[(j+shift)%len(kinds)]
		}
		ch := Change{Op: OpInsert, Relation: RelationKey{OID: 1, LSN: 2}, New: row}
		if i%7 == 0 {
			ch = Change{Op: OpUpdate, Relation: RelationKey{OID: 1, LSN: 2}, New: row, Old: row[:len(row)-shift%3], OldIsKey: true}
		}
		txn.Changes = append(txn.Changes, ch)
	}
	db := openTest(t)
	if err := db.Update(func(w *Writer) error { return w.AppendTxn(txn, chunkSize) }); err != nil {
		t.Fatal(err)
	}
	read := func(keep bool) (got []Change, mems int) {
		pool := new(ChunkPool)
		seen := map[*ChunkMemory]bool{}
		err := db.View(func(r *Reader) error {
			return r.Txns(0, func(_ *TxnHeader, c *TxnCursor) error {
				return c.RecycledChunks(pool, func(changes []Change, mem *ChunkMemory) error {
					seen[mem] = true
					for _, ch := range changes {
						// A deep copy, made before the memory goes back.
						ch.New, ch.Old = cloneValues(ch.New), cloneValues(ch.Old)
						got = append(got, ch)
					}
					if !keep {
						pool.Put(mem)
					}
					return nil
				})
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, len(seen)
	}
	got, mems := read(false)
	if !reflect.DeepEqual(got, txn.Changes) {
		for i := range got {
			if !reflect.DeepEqual(got[i], txn.Changes[i]) {
				t.Fatalf("change %d (chunk %d) reads\n%+v\nwant\n%+v", i, i/chunkSize, got[i], txn.Changes[i])
			}
		}
		t.Fatalf("read %d changes, queued %d", len(got), len(txn.Changes))
	}
	if mems != 1 {
		t.Errorf("chunks handed back at once took %d memories, want 1", mems)
	}
	if _, mems := read(true); mems != chunks {
		t.Errorf("chunks kept took %d memories, want one each (%d)", mems, chunks)
	}

	scan := func(recycle bool) {
		pool := new(ChunkPool)
		db.View(func(r *Reader) error {
			return r.Txns(0, func(_ *TxnHeader, c *TxnCursor) error {
				if recycle {
					return c.RecycledChunks(pool, func(_ []Change, mem *ChunkMemory) error { pool.Put(mem); return nil })
				}
				return c.sharedChunks(func([]Change) error { return nil })
			})
		})
	}
	shared, recycled := allocatedBytes(func() { scan(false) }), allocatedBytes(func() { scan(true) })
	if recycled*5 > shared {
		t.Errorf("reading %d chunks recycled allocated %d bytes, shared %d", chunks, recycled, shared)
	}
}

// cloneValues copies vs, its byte values and the elements of its arrays.
func cloneValues(vs []Value) []Value {
	if vs == nil {
		return nil
	}
	out := slices.Clone(vs)
	for i := range out {
		out[i].Bytes = slices.Clone(out[i].Bytes)
		out[i].Elems = cloneValues(out[i].Elems)
	}
	return out
}
