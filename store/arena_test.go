package store

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// TestArenaKeepsEveryValueOfATransaction queues, in write transactions
// one after the other, transactions of every size: small ones, several to
// a value block, and ones larger than a block, in one value or in chunks,
// and spooled changes; each reads back as queued. The values of a
// transaction share the arena, which the next one fills again: a value
// whose memory the arena handed out twice would read back as another's.
func TestArenaKeepsEveryValueOfATransaction(t *testing.T) {
	db := openTest(t)
	wide := bytes.Repeat([]byte("w"), 3*arenaBlockSize/2)
	var want []*Txn
	end := LSN(100)
	next := func(n int, wideRow bool) *Txn {
		end += 100
		txn := sampleTxn(end, n)
		if wideRow {
			txn.Changes[0].New[1].Bytes = wide
		}
		want = append(want, txn)
		return txn
	}
	for round := range 4 {
		err := db.Update(func(w *Writer) error {
			for _, txn := range []*Txn{next(3, false), next(2000, false), next(1, true), next(5, false), next(40000, round%2 == 0)} {
				if err := w.AppendTxn(txn, 1000); err != nil {
					return err
				}
			}
			return w.SpoolAppend(SpoolID(round+1), 7, sampleTxn(1, 300).Changes)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A transaction begun and committed by hand fills the arena too.
	w, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendTxn(next(10, true), 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) error {
		got, err := r.ReadTxns(0, 0)
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("read %d transactions, queued %d", len(got), len(want))
		}
		for i := range want {
			want[i].Changes = want[i].Changes[:len(want[i].Changes):len(want[i].Changes)]
			want[i].TxnHeader.Changes = int64(len(want[i].Changes))
			if !reflect.DeepEqual(got[i].TxnHeader, want[i].TxnHeader) || !reflect.DeepEqual(got[i].Changes, want[i].Changes) {
				return fmt.Errorf("transaction %d at %s reads back otherwise than queued", i, want[i].EndLSN)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Between transactions the arena keeps at most maxArenaBytes.
	if err := db.Update(func(w *Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if kept := db.arena.bytes(); kept > maxArenaBytes {
		t.Errorf("the arena keeps %d bytes between transactions, at most %d", kept, maxArenaBytes)
	}
}

// bytes returns the memory of the arena's blocks.
func (a *valueArena) bytes() int {
	n := 0
	for _, b := range a.blocks {
		n += cap(b)
	}
	return n
}
