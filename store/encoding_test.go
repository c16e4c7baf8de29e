package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// valueShapes are the values a change can hold, one of each kind at its
// edges: the smallest and largest integers and floats, empty and large
// texts, unchanged-TOAST markers, and arrays empty, of nulls and nested.
func valueShapes() []Value {
	large := bytes.Repeat([]byte("x"), 1<<20)
	vs := []Value{
		{Kind: KindNull},
		{Kind: KindUnchanged},
		{Kind: KindBool},
		{Kind: KindBool, Int: 1},
		{Kind: KindNumeric, Bytes: []byte("NaN")},
		{Kind: KindNumeric, Bytes: []byte("-" + strings.Repeat("9", 131072) + "." + strings.Repeat("9", 16383))},
		{Kind: KindString},
		{Kind: KindString, Bytes: []byte{}},
		{Kind: KindString, Bytes: large},
		{Kind: KindBytes, Bytes: []byte{0}},
		{Kind: KindBytes, Bytes: large},
		{Kind: KindArray},
		{Kind: KindArray, Elems: []Value{{Kind: KindNull}}},
		{Kind: KindArray, Elems: []Value{{Kind: KindArray, Elems: []Value{{Kind: KindInt32, Int: math.MinInt32}, {Kind: KindNull}}}, {Kind: KindArray}}},
	}
	for _, k := range []Kind{KindInt16, KindInt32, KindInt64, KindDate, KindTimestamp, KindTime, KindTooLarge} {
		for _, n := range []int64{0, -1, 1, math.MinInt64, math.MaxInt64, math.MinInt32, math.MaxInt32} {
			vs = append(vs, Value{Kind: k, Int: n})
		}
	}
	for _, f := range []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, math.SmallestNonzeroFloat64} {
		vs = append(vs, Value{Kind: KindFloat64, Int: int64(math.Float64bits(f))})
		vs = append(vs, Value{Kind: KindFloat32, Int: int64(math.Float32bits(float32(f)))})
	}
	return vs
}

// tupleShapes are the tuples a change can carry: none (nil), empty, all
// null, all unchanged TOAST, one of every value, and each value alone.
func tupleShapes() [][]Value {
	all := valueShapes()
	nulls := make([]Value, 1600) // PostgreSQL's most columns a table can have
	unchanged := make([]Value, 3)
	for i := range unchanged {
		unchanged[i].Kind = KindUnchanged
	}
	shapes := [][]Value{nil, {}, {{Kind: KindNull}}, {{Kind: KindNull}, {Kind: KindNull}}, nulls, unchanged, all}
	for _, v := range all {
		shapes = append(shapes, []Value{v})
	}
	return shapes
}

// changeShapes are changes of every operation with every tuple shape as
// their new and their old row.
func changeShapes() []Change {
	var out []Change
	rel := RelationKey{OID: math.MaxUint32, LSN: math.MaxUint64}
	for i, tuple := range tupleShapes() {
		out = append(out,
			Change{Op: OpInsert, Relation: rel, New: tuple},
			Change{Op: OpUpdate, Relation: RelationKey{OID: 1}, New: tuple, Old: tuple, OldIsKey: i%2 == 0},
			Change{Op: OpUpdate, Relation: rel, New: tuple},
			Change{Op: OpDelete, Relation: rel, Old: tuple, OldIsKey: true},
			Change{Op: OpDelete, Relation: rel, Old: tuple},
		)
	}
	return append(out, Change{Op: OpTruncate, Relation: RelationKey{OID: 0, LSN: 0}})
}

// decodeEveryWay decodes data with each of the chunk decoders and checks
// that each gives want (the decoder without values, its values nil).
func decodeEveryWay(t *testing.T, data []byte, subXid uint32, want []Change) {
	t.Helper()
	check := func(how string, sub uint32, got []Change, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if sub != subXid || !reflect.DeepEqual(canonChanges(got), canonChanges(want)) {
			t.Fatalf("%s: the round trip differs (subxid %d, want %d)", how, sub, subXid)
		}
	}
	sub, got, err := decodeChunk(data)
	check("copied", sub, got, err)
	sub, got, err = decodeSharedChunk(data)
	check("shared", sub, got, err)
	mem := new(ChunkMemory)
	for round := range 2 { // the second into memory the first used
		sub, got, err = decodeRecycledChunk(data, mem)
		check(fmt.Sprintf("recycled (round %d)", round), sub, got, err)
	}
	// Without values: the second round into the changes of a larger
	// chunk, as ChunksWithoutValues reuses them.
	reuse := make([]Change, len(want)+3)
	for i := range reuse {
		reuse[i] = Change{Op: OpDelete, Relation: RelationKey{OID: 99, LSN: 99}, New: []Value{{Kind: KindBool}}, Old: []Value{}, OldIsKey: true}
	}
	for _, into := range [][]Change{nil, reuse} {
		sub, got, err = decodeChunkWithoutValues(data, into)
		if err != nil {
			t.Fatalf("without values: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("without values: %d changes, want %d", len(got), len(want))
		}
		for i := range want {
			w := Change{Op: want[i].Op, Relation: want[i].Relation, OldIsKey: want[i].OldIsKey}
			if sub != subXid || !reflect.DeepEqual(got[i], w) {
				t.Fatalf("without values: change %d is %+v, want %+v", i, got[i], w)
			}
		}
	}
}

// TestChunkRoundTripEveryShape encodes every shape of change alone and at
// every position of a chunk (first, inside, last) and decodes it with every
// decoder. A delete of an all-null row at the end of a chunk once failed
// to decode ("truncated length"), which stopped the applier for good.
func TestChunkRoundTripEveryShape(t *testing.T) {
	shapes := changeShapes()
	filler := Change{Op: OpInsert, Relation: RelationKey{OID: 7, LSN: 8}, New: []Value{{Kind: KindInt32, Int: 1}}}
	for i, c := range shapes {
		for _, chunk := range [][]Change{{c}, {c, filler}, {filler, c, filler}, {filler, c}} {
			decodeEveryWay(t, encodeChunk(uint32(i), chunk), uint32(i), chunk)
		}
	}
	decodeEveryWay(t, encodeChunk(math.MaxUint32, shapes), math.MaxUint32, shapes)
}

// TestChunkRoundTripRandom encodes random chunks of random changes, built
// from the shapes, and decodes them with every decoder.
func TestChunkRoundTripRandom(t *testing.T) {
	tuples := tupleShapes()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 29))
		chunk := randomChunk(rng, tuples)
		sub := rng.Uint32()
		decodeEveryWay(t, encodeChunk(sub, chunk), sub, chunk)
	}
}

// randomChunk returns up to 20 changes whose rows are small random tuples
// or tuples of the shapes.
func randomChunk(rng *rand.Rand, tuples [][]Value) []Change {
	values := valueShapes()
	tuple := func() []Value {
		if rng.IntN(3) == 0 {
			return tuples[rng.IntN(len(tuples))]
		}
		if rng.IntN(8) == 0 {
			return nil
		}
		vs := make([]Value, rng.IntN(6))
		for i := range vs {
			if v := values[rng.IntN(len(values))]; len(v.Bytes) < 1024 {
				vs[i] = v
			}
		}
		return vs
	}
	chunk := make([]Change, 1+rng.IntN(20))
	for i := range chunk {
		chunk[i] = Change{Op: Op(1 + rng.IntN(4)), Relation: RelationKey{OID: rng.Uint32(), LSN: LSN(rng.Uint64())},
			New: tuple(), Old: tuple(), OldIsKey: rng.IntN(2) == 0}
	}
	return chunk
}

// FuzzChunkRoundTrip builds a chunk from the fuzzer's bytes, which pick
// the changes' operations and tuples, and checks that every decoder gives
// it back as encoded.
func FuzzChunkRoundTrip(f *testing.F) {
	f.Add([]byte{3, 4, 0, 0}, uint32(0))
	f.Add([]byte{1, 2, 2, 5, 3, 0, 6, 6}, uint32(1))
	tuples := tupleShapes()
	f.Fuzz(func(t *testing.T, picks []byte, subXid uint32) {
		if len(picks) > 64 {
			picks = picks[:64]
		}
		var chunk []Change
		for len(picks) >= 3 {
			op, n, o := picks[0], int(picks[1]), int(picks[2])
			picks = picks[3:]
			chunk = append(chunk, Change{Op: Op(1 + op%4), Relation: RelationKey{OID: binary.LittleEndian.Uint32([]byte{op, byte(n), byte(o), 0})},
				New: tuples[n%len(tuples)], Old: tuples[o%len(tuples)], OldIsKey: op&0x80 != 0})
		}
		if chunk == nil {
			chunk = []Change{}
		}
		decodeEveryWay(t, encodeChunk(subXid, chunk), subXid, chunk)
	})
}

// TestQueueRoundTripEveryShape queues transactions whose changes are every
// shape, one change at each position of a chunk of small chunks, and reads
// them back whole with every cursor.
func TestQueueRoundTripEveryShape(t *testing.T) {
	db := openTest(t)
	shapes := changeShapes()
	txns := []*Txn{
		{TxnHeader: TxnHeader{Xid: 1, CommitLSN: 10, EndLSN: 11}, Changes: shapes},
		{TxnHeader: TxnHeader{Xid: 2, CommitLSN: 20, EndLSN: 21}, Changes: shapes[len(shapes)-2:]},
		{TxnHeader: TxnHeader{Xid: 3, CommitLSN: 30, EndLSN: 31}, Changes: shapes[4:5]},
	}
	for _, chunkSize := range []int{0, 1, 3, 7} {
		if err := db.Update(func(w *Writer) error {
			if _, err := w.Trim(math.MaxUint64); err != nil {
				return err
			}
			for _, txn := range txns {
				txn.TxnHeader.Changes = int64(len(txn.Changes))
				if err := w.AppendTxn(txn, chunkSize); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		err := db.View(func(r *Reader) error {
			i := 0
			return r.Txns(0, func(h *TxnHeader, cur *TxnCursor) error {
				want := txns[i].Changes
				i++
				got, err := cur.Changes()
				if err != nil {
					return fmt.Errorf("chunks of %d: transaction %d: %w", chunkSize, h.Xid, err)
				}
				if !reflect.DeepEqual(canonChanges(got), canonChanges(want)) {
					return fmt.Errorf("chunks of %d: transaction %d differs", chunkSize, h.Xid)
				}
				var recycled []Change
				pool := new(ChunkPool)
				if err := cur.RecycledChunks(pool, func(chs []Change, mem *ChunkMemory) error {
					for _, c := range chs {
						c.New, c.Old = canonValues(c.New), canonValues(c.Old)
						recycled = append(recycled, c)
					}
					pool.Put(mem)
					return nil
				}); err != nil {
					return fmt.Errorf("chunks of %d: transaction %d, recycled: %w", chunkSize, h.Xid, err)
				}
				if !reflect.DeepEqual(canonChanges(recycled), canonChanges(want)) {
					return fmt.Errorf("chunks of %d: transaction %d differs, recycled", chunkSize, h.Xid)
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// canonChanges copies changes for comparison: the encoding keeps a nil
// tuple apart from an empty one, but not a value's nil bytes or elements
// from empty ones (its kind tells a null from an empty text).
func canonChanges(changes []Change) []Change {
	out := make([]Change, len(changes))
	for i, c := range changes {
		c.New, c.Old = canonValues(c.New), canonValues(c.Old)
		out[i] = c
	}
	return out
}

func canonValues(vs []Value) []Value {
	if vs == nil {
		return nil
	}
	out := make([]Value, len(vs))
	for i, v := range vs {
		out[i] = Value{Kind: v.Kind, Int: v.Int}
		if len(v.Bytes) > 0 {
			out[i].Bytes = v.Bytes
		}
		if len(v.Elems) > 0 {
			out[i].Elems = canonValues(v.Elems)
		}
	}
	return out
}

// encodeChunk returns the record of a slice of changes, as queued or
// spooled.
func encodeChunk(subXid uint32, changes []Change) []byte {
	var e encoder
	e.chunk(subXid, changes)
	return e.buf
}

// benchChunkChanges returns a chunk of n inserted rows shaped like the
// orders table of make bench: a key, a hash as text, an amount, a
// timestamp, a flag and a quantity.
func benchChunkChanges(n int) []Change {
	changes := make([]Change, n)
	for i := range changes {
		changes[i] = Change{Op: OpInsert, Relation: RelationKey{OID: 16384, LSN: 100}, New: []Value{
			{Kind: KindInt64, Int: int64(i)},
			{Kind: KindString, Bytes: []byte(fmt.Sprintf("%032x", i*7919))},
			{Kind: KindNumeric, Bytes: []byte(fmt.Sprintf("%d.%02d", i%10000, i%100))},
			{Kind: KindTimestamp, Int: 1767225600000000 + int64(i)*1000000},
			{Kind: KindBool, Int: int64(i % 2)},
			{Kind: KindInt32, Int: int64(i % 1000)},
		}}
	}
	return changes
}

// BenchmarkDecodeChunk decodes a chunk of store.DefaultChunkSize inserted
// rows with their values (as the applier reads a chunk) and without them
// (as the live view passes over a large transaction).
func BenchmarkDecodeChunk(b *testing.B) {
	data := encodeChunk(0, benchChunkChanges(DefaultChunkSize))
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeSharedChunk(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("without values", func(b *testing.B) {
		b.ReportAllocs()
		var scratch []Change
		for b.Loop() {
			var err error
			if _, scratch, err = decodeChunkWithoutValues(data, scratch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestTxnHeaderFlags round-trips the header's flags, and reads a header
// written before Copied as it was.
func TestTxnHeaderFlags(t *testing.T) {
	at := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	for _, h := range []TxnHeader{
		{Xid: 7, CommitLSN: 100, EndLSN: 101, CommitTime: at, Changes: 3},
		{CommitLSN: 200, EndLSN: 200, CommitTime: at, Snapshot: true, Changes: 1 << 20},
		{CommitLSN: 300, EndLSN: 301, CommitTime: at, Copied: true, Changes: 16384},
	} {
		got, err := decodeTxnHeader(encodeTxnHeader(&h))
		if err != nil || got != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
	// Before Copied, the byte of flags was 1 for a snapshot, else 0.
	old := newEncoder(recordTxnHeader, 40)
	old.uvarint(9)
	old.uvarint(400)
	old.uvarint(401)
	old.varint(at.UnixMicro())
	old.byte1(1)
	old.varint(5)
	if got, err := decodeTxnHeader(old.finish()); err != nil || !got.Snapshot || got.Copied || got.Changes != 5 {
		t.Fatalf("a header written before Copied reads as %+v, %v", got, err)
	}
}
