package store

import (
	"testing"
	"time"
)

func TestAppliedAndTrim(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(w *Writer) error {
		for _, end := range []LSN{100, 200, 300} {
			txn := &Txn{TxnHeader: TxnHeader{Xid: uint32(end), CommitLSN: end - 1, EndLSN: end, CommitTime: time.Now()},
				Changes: []Change{{Op: OpInsert, Relation: RelationKey{OID: 1}, New: []Value{{Kind: KindInt32, Int: 1}}}}}
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = db.Update(func(w *Writer) error {
		if l, err := w.Applied(); err != nil || l != 0 {
			t.Fatalf("Applied = %v, %v; want 0", l, err)
		}
		if err := w.SetApplied(200); err != nil {
			return err
		}
		n, err = w.Trim(200)
		return err
	})
	if err != nil || n != 2 {
		t.Fatalf("trim after SetApplied(200) = %d, %v; want 2 entries", n, err)
	}
	err = db.Update(func(w *Writer) error {
		// Moving backwards is ignored.
		return w.SetApplied(50)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(r *Reader) error {
		l, err := r.Applied()
		if err != nil || l != 200 {
			t.Fatalf("Applied = %v, %v; want 200", l, err)
		}
		txns, err := r.ReadTxns(0, 0)
		if err != nil {
			return err
		}
		if len(txns) != 1 || txns[0].EndLSN != 300 {
			t.Fatalf("queue holds %d entries, want only 300", len(txns))
		}
		st, err := r.QueueStats()
		if err != nil {
			return err
		}
		if st.Transactions != 1 {
			t.Fatalf("queue totals say %d entries, want 1", st.Transactions)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClearSlotStateStartsANewGeneration(t *testing.T) {
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	generation := func() uint64 {
		var g uint64
		if err := db.View(func(r *Reader) (err error) { g, err = r.Generation(); return err }); err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := generation(); g != 0 {
		t.Fatalf("generation of a new state file = %d, want 0", g)
	}
	for want := uint64(1); want <= 2; want++ {
		err := db.Update(func(w *Writer) error {
			txn := &Txn{TxnHeader: TxnHeader{Xid: 1, CommitLSN: 99, EndLSN: 100, CommitTime: time.Now()}}
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
			return w.ClearSlotState()
		})
		if err != nil {
			t.Fatal(err)
		}
		if g := generation(); g != want {
			t.Fatalf("generation after %d clears = %d", want, g)
		}
	}
	// Appending and applying leave it alone.
	err = db.Update(func(w *Writer) error {
		txn := &Txn{TxnHeader: TxnHeader{Xid: 2, CommitLSN: 199, EndLSN: 200, CommitTime: time.Now()}}
		if err := w.AppendTxn(txn, 0); err != nil {
			return err
		}
		return w.SetApplied(200)
	})
	if err != nil {
		t.Fatal(err)
	}
	if g := generation(); g != 2 {
		t.Fatalf("generation after an append = %d, want 2", g)
	}
}
