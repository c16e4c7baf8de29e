package store

import (
	"errors"
	"math"
	"reflect"
	"runtime"
	"testing"
	"time"
)

func openTest(t *testing.T) *DB {
	t.Helper()
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func sampleValues() []Value {
	return []Value{
		{Kind: KindNull},
		{Kind: KindUnchanged},
		{Kind: KindBool, Int: 1},
		{Kind: KindInt16, Int: -32768},
		{Kind: KindInt32, Int: math.MaxInt32},
		{Kind: KindInt64, Int: math.MinInt64},
		{Kind: KindFloat32, Int: int64(math.Float32bits(-1.5))},
		{Kind: KindFloat64, Int: int64(math.Float64bits(math.NaN()))},
		{Kind: KindNumeric, Bytes: []byte("-1234567890123456789012345678901234567890.5")},
		{Kind: KindString, Bytes: []byte("grüße, 世界")},
		{Kind: KindBytes, Bytes: []byte{0, 1, 255}},
		{Kind: KindDate, Int: -719162},
		{Kind: KindTimestamp, Int: InfinityInt},
		{Kind: KindTime, Int: 86399999999},
		{Kind: KindArray, Elems: []Value{{Kind: KindInt32, Int: 1}, {Kind: KindNull}}},
		{Kind: KindArray},
	}
}

func sampleTxn(end LSN, n int) *Txn {
	t := &Txn{TxnHeader: TxnHeader{Xid: uint32(end), CommitLSN: end - 8, EndLSN: end, CommitTime: time.UnixMicro(1700000000123456).UTC()}}
	for i := 0; i < n; i++ {
		t.Changes = append(t.Changes, Change{
			Op:       OpUpdate,
			Relation: RelationKey{OID: 16384, LSN: 100},
			New:      []Value{{Kind: KindInt64, Int: int64(i)}, {Kind: KindString, Bytes: []byte("x")}},
			Old:      []Value{{Kind: KindInt64, Int: int64(i)}, {Kind: KindNull}},
			OldIsKey: true,
		})
	}
	t.Changes = append(t.Changes, Change{Op: OpInsert, Relation: RelationKey{OID: 1, LSN: 2}, New: sampleValues()})
	return t
}

func TestChunkRoundTrip(t *testing.T) {
	in := sampleTxn(1000, 3).Changes
	sub, out, err := decodeChunk(encodeChunk(77, in))
	if err != nil {
		t.Fatal(err)
	}
	if sub != 77 {
		t.Fatalf("subxid = %d", sub)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs:\n in %+v\nout %+v", in, out)
	}
}

// TestSharedChunkDecodesInPlace checks that a shared chunk decodes to the
// same changes as a copied one, with far fewer allocations: its byte
// values are slices of the record and its value slices share allocations.
func TestSharedChunkDecodesInPlace(t *testing.T) {
	in := sampleTxn(1000, 100).Changes
	data := encodeChunk(77, in)
	sub, out, err := decodeSharedChunk(data)
	if err != nil {
		t.Fatal(err)
	}
	if sub != 77 || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs (subxid %d):\n in %+v\nout %+v", sub, in, out)
	}
	copied := testing.AllocsPerRun(10, func() { decodeChunk(data) })
	shared := testing.AllocsPerRun(10, func() { decodeSharedChunk(data) })
	if shared*4 > copied {
		t.Errorf("a shared chunk of %d changes took %.0f allocations, a copied one %.0f", len(in), shared, copied)
	}
	// A chunk of one small change (a queue of single-row transactions)
	// takes no more memory shared than copied (they differ by a byte; the
	// margin is for the runtime's own allocations during a measurement,
	// far below the value slab a shared decoder must not allocate for one
	// change).
	small := encodeChunk(0, []Change{{Op: OpInsert, Relation: RelationKey{OID: 1, LSN: 2},
		New: []Value{{Kind: KindInt64, Int: 1}, {Kind: KindString, Bytes: []byte("x")}}}})
	if c, s := allocatedBytes(func() { decodeChunk(small) }), allocatedBytes(func() { decodeSharedChunk(small) }); s > c+64 {
		t.Errorf("a shared chunk of one change allocated %d bytes, a copied one %d", s, c)
	}
}

// TestChunkWithoutValues checks that a chunk read without its values gives
// each change's operation, relation and key flag, fails where a full read
// fails, and allocates nothing when read into the changes of the chunk
// before.
func TestChunkWithoutValues(t *testing.T) {
	in := sampleTxn(1000, 100).Changes
	in = append(in, Change{Op: OpDelete, Relation: RelationKey{OID: 7, LSN: 9}, Old: sampleValues()},
		Change{Op: OpTruncate, Relation: RelationKey{OID: 8, LSN: 10}})
	data := encodeChunk(77, in)
	sub, out, err := decodeChunkWithoutValues(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sub != 77 || len(out) != len(in) {
		t.Fatalf("subxid %d and %d changes, want 77 and %d", sub, len(out), len(in))
	}
	for i := range in {
		want := Change{Op: in[i].Op, Relation: in[i].Relation, OldIsKey: in[i].OldIsKey}
		if !reflect.DeepEqual(out[i], want) {
			t.Fatalf("change %d: %+v, want %+v", i, out[i], want)
		}
	}
	if a := testing.AllocsPerRun(10, func() { _, out, _ = decodeChunkWithoutValues(data, out) }); a > 0 {
		t.Errorf("a chunk of %d changes read without values into the changes before took %.0f allocations", len(in), a)
	}
	// A value's varint of more than 64 bits, or cut by the record's end,
	// fails both reads.
	for _, varint := range [][]byte{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, {0x80, 0x80}} {
		var e encoder
		start := e.open(recordChunk)
		e.uvarint(0)                     // subtransaction
		e.uvarint(1)                     // one change
		e.byte1(byte(OpInsert))          // op
		e.uvarint(1)                     // OID
		e.uvarint(2)                     // schema version
		e.byte1(0)                       // flags
		e.uvarint(2)                     // one new value
		e.byte1(byte(KindInt64))         // its kind
		e.buf = append(e.buf, varint...) // its varint
		if varint[len(varint)-1] < 0x80 {
			e.uvarint(0) // no old values
		}
		e.seal(start)
		_, _, full := decodeChunk(e.buf)
		_, _, without := decodeChunkWithoutValues(e.buf, nil)
		if full == nil || without == nil {
			t.Fatalf("varint % x: full read %v, read without values %v; want both to fail", varint, full, without)
		}
	}
	// Every cut of the record fails as a full read fails.
	for n := range len(data) {
		_, _, full := decodeChunk(data[:n])
		_, _, without := decodeChunkWithoutValues(data[:n], nil)
		if (full == nil) != (without == nil) {
			t.Fatalf("record cut to %d bytes: full read %v, read without values %v", n, full, without)
		}
	}
}

// TestScanOfSmallTxnsAllocatesLittle checks what reading a queue of
// single-row transactions costs per transaction: the decoders of its header
// and chunk, its header and its cursor take no allocation of their own;
// what is left is the chunk's change slice and its values.
func TestScanOfSmallTxnsAllocatesLittle(t *testing.T) {
	db := openTest(t)
	const txns = 200
	err := db.Update(func(w *Writer) error {
		for i := range LSN(txns) {
			txn := &Txn{TxnHeader: TxnHeader{Xid: uint32(i), CommitLSN: 100 + 16*i, EndLSN: 108 + 16*i, CommitTime: time.UnixMicro(1700000000123456)},
				Changes: []Change{{Op: OpInsert, Relation: RelationKey{OID: 1, LSN: 2}, New: []Value{{Kind: KindInt64, Int: int64(i)}, {Kind: KindString, Bytes: []byte("x")}}}}}
			if err := w.AppendTxn(txn, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	scan := func() (n int) {
		if err := db.View(func(r *Reader) error {
			return r.Txns(0, func(h *TxnHeader, c *TxnCursor) error {
				return c.sharedChunks(func(changes []Change) error { n += len(changes); return nil })
			})
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := scan(); n != txns {
		t.Fatalf("scanned %d changes, want %d", n, txns)
	}
	perTxn := testing.AllocsPerRun(5, func() { scan() }) / txns
	if perTxn > 2.5 {
		t.Errorf("reading a single-row transaction took %.1f allocations", perTxn)
	}
}

// allocatedBytes returns the bytes fn allocates, averaged over 100 runs:
// the least of five such measurements, since whatever else allocates
// meanwhile only adds to one.
func allocatedBytes(fn func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 100 {
			fn()
		}
		runtime.ReadMemStats(&after)
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/100)
	}
	return least
}

func TestCorruptionIsDetected(t *testing.T) {
	data := encodeChunk(0, sampleTxn(1000, 2).Changes)
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, _, err := decodeChunk(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("flipping byte %d: err = %v, want ErrCorrupt", i, err)
		}
	}
	if _, _, err := decodeChunk(data[:len(data)-1]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: err = %v", err)
	}
	if _, err := decodeTxnHeader(data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("chunk read as header: err = %v", err)
	}
}

func FuzzDecodeChunk(f *testing.F) {
	f.Add(encodeChunk(3, sampleTxn(10, 2).Changes))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = decodeChunk(data) // must not panic or allocate without bound
		_, _, _ = decodeSharedChunk(data)
		_, _, errWithout := decodeChunkWithoutValues(data, nil)
		if _, _, err := decodeChunk(data); (err == nil) != (errWithout == nil) {
			t.Fatalf("full read %v, read without values %v", err, errWithout)
		}
	})
}

func TestQueueOrderAndChunks(t *testing.T) {
	db := openTest(t)
	err := db.Update(func(w *Writer) error {
		// 100 fits one chunk and is stored inline; the others are
		// buckets of chunks.
		for _, end := range []LSN{300, 100, 200} {
			chunkSize := 2
			if end == 100 {
				chunkSize = 0
			}
			if err := w.AppendTxn(sampleTxn(end, 5), chunkSize); err != nil {
				return err
			}
		}
		return w.SetCheckpoint(300)
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Txn
	err = db.View(func(r *Reader) error {
		var err error
		got, err = r.ReadTxns(0, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].EndLSN != 100 || got[1].EndLSN != 200 || got[2].EndLSN != 300 {
		t.Fatalf("order: %v", got)
	}
	for i, end := range []LSN{100, 200} {
		want := sampleTxn(end, 5)
		want.TxnHeader.Changes = 6
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("txn differs:\n got %+v\nwant %+v", got[i], want)
		}
	}
	// Read without values, inline and chunked transactions give the same
	// changes, values aside.
	err = db.View(func(r *Reader) error {
		return r.Txns(0, func(h *TxnHeader, c *TxnCursor) error {
			var ops []Change
			if err := c.ChunksWithoutValues(func(chs []Change) error { ops = append(ops, chs...); return nil }); err != nil {
				return err
			}
			want := sampleTxn(h.EndLSN, 5).Changes
			if len(ops) != len(want) {
				t.Fatalf("txn %d: %d changes without values, want %d", h.EndLSN, len(ops), len(want))
			}
			for i := range want {
				if ops[i].Op != want[i].Op || ops[i].Relation != want[i].Relation || ops[i].New != nil || ops[i].Old != nil {
					t.Fatalf("txn %d change %d without values: %+v", h.EndLSN, i, ops[i])
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, again := range []struct {
		end       LSN
		chunkSize int
	}{{200, 0}, {100, 0}, {100, 2}} {
		if err := db.Update(func(w *Writer) error { return w.AppendTxn(sampleTxn(again.end, 5), again.chunkSize) }); err == nil {
			t.Fatalf("appending transaction %d twice (chunk size %d) succeeded", again.end, again.chunkSize)
		}
	}
}

func TestInlineTransactionCorruptionIsDetected(t *testing.T) {
	txn := sampleTxn(1000, 2)
	var e encoder
	e.inlineTxn(encodeTxnHeader(&txn.TxnHeader), txn.Changes)
	data := e.buf
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x40
		if _, _, err := decodeInlineTxn(bad); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedFormat) {
			t.Fatalf("flipping byte %d: err = %v, want ErrCorrupt", i, err)
		}
	}
	if _, _, err := decodeInlineTxn(encodeChunk(0, txn.Changes)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("chunk read as inline transaction: err = %v", err)
	}
}

func TestSpoolAbortAndCommit(t *testing.T) {
	db := openTest(t)
	const xid = 900
	ins := func(i int64) Change {
		return Change{Op: OpInsert, Relation: RelationKey{OID: 1, LSN: 1}, New: []Value{{Kind: KindInt64, Int: i}}}
	}
	err := db.Update(func(w *Writer) error {
		for i, sub := range []uint32{xid, 901, xid, 902, 901} {
			if err := w.SpoolAppend(xid, sub, []Change{ins(int64(i))}); err != nil {
				return err
			}
		}
		// A second, unrelated spool that is discarded later.
		if err := w.SpoolAppend(5, 5, []Change{ins(99)}); err != nil {
			return err
		}
		if err := w.SpoolAbort(xid, 901); err != nil {
			return err
		}
		if err := w.SpoolCommit(xid, TxnHeader{}); !errors.Is(err, ErrSpoolBusy) {
			t.Errorf("commit of a spool changed in the same transaction: err = %v, want ErrSpoolBusy", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(w *Writer) error {
		return w.SpoolCommit(xid, TxnHeader{Xid: xid, CommitLSN: 40, EndLSN: 50})
	})
	if err != nil {
		t.Fatal(err)
	}
	var txns []*Txn
	var discarded int
	err = db.Update(func(w *Writer) error {
		var err error
		if discarded, err = w.DiscardSpools(); err != nil {
			return err
		}
		txns, err = w.ReadTxns(0, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if discarded != 1 {
		t.Fatalf("discarded %d spools, want 1", discarded)
	}
	if len(txns) != 1 || txns[0].TxnHeader.Changes != 3 {
		t.Fatalf("txns = %+v", txns)
	}
	var got []int64
	for _, c := range txns[0].Changes {
		got = append(got, c.New[0].Int)
	}
	if !reflect.DeepEqual(got, []int64{0, 2, 3}) {
		t.Fatalf("changes after subtransaction abort = %v, want [0 2 3]", got)
	}
	// Aborting the top-level transaction drops the spool entirely.
	err = db.Update(func(w *Writer) error {
		if err := w.SpoolAppend(7, 7, []Change{ins(1)}); err != nil {
			return err
		}
		return w.SpoolAbort(7, 7)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(w *Writer) error {
		return w.SpoolCommit(7, TxnHeader{Xid: 7, EndLSN: 60})
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(r *Reader) error {
		txns, err = r.ReadTxns(50, 0)
		return err
	})
	if len(txns) != 1 || len(txns[0].Changes) != 0 {
		t.Fatalf("aborted spool left changes: %+v", txns)
	}
}

func TestTrimAndStats(t *testing.T) {
	db := openTest(t)
	err := db.Update(func(w *Writer) error {
		for end := LSN(10); end <= 50; end += 10 {
			chunkSize := 2 // a bucket of chunks; every other one inline
			if end%20 == 0 {
				chunkSize = 0
			}
			if err := w.AppendTxn(sampleTxn(end, 3), chunkSize); err != nil {
				return err
			}
		}
		return w.SpoolAppend(9, 9, sampleTxn(60, 4).Changes)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A spooled transaction counts as many bytes out as it counted in.
	err = db.Update(func(w *Writer) error { return w.SpoolCommit(9, TxnHeader{Xid: 9, EndLSN: 60}) })
	if err != nil {
		t.Fatal(err)
	}
	var before, after QueueStats
	db.View(func(r *Reader) error { before, err = r.QueueStats(); return err })
	if before.Transactions != 6 || before.Bytes <= 0 || before.LastLSN != 60 {
		t.Fatalf("stats before trim: %+v", before)
	}
	var n int
	db.Update(func(w *Writer) error { n, err = w.Trim(30); return err })
	if n != 3 {
		t.Fatalf("trimmed %d, want 3", n)
	}
	db.View(func(r *Reader) error { after, err = r.QueueStats(); return err })
	if after.Transactions != 3 || after.Bytes <= 0 || after.Bytes >= before.Bytes {
		t.Fatalf("stats after trim: %+v", after)
	}
	db.Update(func(w *Writer) error { n, err = w.Trim(60); return err })
	db.View(func(r *Reader) error { after, err = r.QueueStats(); return err })
	if after.Transactions != 0 || after.Bytes != 0 {
		t.Fatalf("stats after full trim: %+v", after)
	}
}

// TestTrimAcrossPages trims a queue of thousands of entries, inline and
// bucketed, spread over many pages: exactly the entries at or below the
// limit go, and the totals follow.
func TestTrimAcrossPages(t *testing.T) {
	db := openTest(t)
	const n = 3000
	err := db.Update(func(w *Writer) error {
		for i := LSN(1); i <= n; i++ {
			chunkSize := 0 // inline
			if i%500 == 0 {
				chunkSize = 1 // a bucket of chunks
			}
			if err := w.AppendTxn(sampleTxn(i*10, 2), chunkSize); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var trimmed int
	if err := db.Update(func(w *Writer) error { trimmed, err = w.Trim(n / 2 * 10); return err }); err != nil {
		t.Fatal(err)
	}
	if trimmed != n/2 {
		t.Fatalf("trimmed %d, want %d", trimmed, n/2)
	}
	var left []LSN
	var stats QueueStats
	err = db.View(func(r *Reader) error {
		if err := r.Txns(0, func(h *TxnHeader, _ *TxnCursor) error { left = append(left, h.EndLSN); return nil }); err != nil {
			return err
		}
		stats, err = r.QueueStats()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != n/2 || left[0] != (n/2+1)*10 || left[len(left)-1] != n*10 || stats.Transactions != n/2 {
		t.Fatalf("after the trim: %d entries (%v … %v), stats %+v", len(left), left[:1], left[len(left)-1:], stats)
	}
	if err := db.Update(func(w *Writer) error { trimmed, err = w.Trim(n * 10); return err }); err != nil {
		t.Fatal(err)
	}
	db.View(func(r *Reader) error { stats, err = r.QueueStats(); return err })
	if trimmed != n/2 || stats.Transactions != 0 || stats.Bytes != 0 {
		t.Fatalf("full trim: trimmed %d, stats %+v", trimmed, stats)
	}
}

func TestStatePersistsAndLocks(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	slot := &SlotState{SystemID: "7300", Database: "shop", Slot: "lakeside", Publication: "pub", ConsistentPoint: 42}
	rel := &Relation{Key: RelationKey{OID: 16384, LSN: 42}, Schema: "public", Name: "stock",
		ReplicaIdentity: 'd', Columns: []Column{{Name: "id", TypeOID: 20, TypeMod: -1, Key: true}}}
	err = db.Update(func(w *Writer) error {
		if err := w.SetSlotState(slot); err != nil {
			return err
		}
		if err := w.PutRelation(rel); err != nil {
			return err
		}
		if err := w.SetCheckpoint(100); err != nil {
			return err
		}
		return w.SetCheckpoint(90) // never backwards
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: err = %v, want ErrLocked", err)
	}
	db.Close()
	db, err = Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(r *Reader) error {
		cp, err := r.Checkpoint()
		if err != nil || cp != 100 {
			t.Errorf("checkpoint = %v, %v", cp, err)
		}
		s, err := r.SlotState()
		if err != nil || !reflect.DeepEqual(s, slot) {
			t.Errorf("slot = %+v, %v", s, err)
		}
		rels, err := r.Relations()
		if err != nil || !reflect.DeepEqual(rels[rel.Key], rel) {
			t.Errorf("relations = %+v, %v", rels, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
