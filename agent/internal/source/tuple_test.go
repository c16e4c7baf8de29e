package source

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"testing"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// tupleData builds pgoutput TupleData; a nil column is NULL.
func tupleData(cols ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		if c == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	return b
}

func TestParseRowChange(t *testing.T) {
	rel := binary.BigEndian.AppendUint32(nil, 16384)
	upd := append(append(append([]byte{'U'}, binary.BigEndian.AppendUint32(nil, 777)...), rel...), 'K')
	upd = append(upd, tupleData([]byte("1"), nil)...)
	upd = append(append(upd, 'N'), tupleData([]byte("2"), []byte("x"))...)
	rc, err := parseRowChange(upd, true)
	if err != nil {
		t.Fatal(err)
	}
	if rc.op != store.OpUpdate || rc.xid != 777 || rc.relation != 16384 || rc.oldKind != 'K' {
		t.Fatalf("parsed %+v", rc)
	}
	rd := newRelationDecoder(typemap.New(), &store.Relation{Schema: "s", Name: "t", Columns: []store.Column{{Name: "id", TypeOID: 20}, {Name: "v", TypeOID: 25}}}, DefaultMaxValueBytes)
	var slab valueSlab
	newVals, err := rd.decodeTuple(rc.new, &slab)
	if err != nil || newVals[0].Int != 2 || string(newVals[1].Bytes) != "x" {
		t.Fatalf("new = %+v, %v", newVals, err)
	}
	oldVals, err := rd.decodeTuple(rc.old, &slab)
	if err != nil || oldVals[0].Int != 1 || oldVals[1].Kind != store.KindNull {
		t.Fatalf("old = %+v, %v", oldVals, err)
	}
	for i := 1; i < len(upd); i++ {
		if _, err := parseRowChange(upd[:i], true); err == nil {
			t.Fatalf("truncated message of %d bytes parsed without error", i)
		}
	}
}

// FuzzParseRowChange: no input may crash the parser or the tuple decoder.
func FuzzParseRowChange(f *testing.F) {
	ins := append([]byte{'I', 0, 0, 64, 0, 'N'}, tupleData([]byte("42"), []byte("text"))...)
	f.Add(ins, false)
	rd := newRelationDecoder(typemap.New(), &store.Relation{Columns: []store.Column{{Name: "a", TypeOID: 20}, {Name: "b", TypeOID: 25}}}, DefaultMaxValueBytes)
	f.Fuzz(func(t *testing.T, data []byte, inStream bool) {
		if len(data) == 0 {
			return
		}
		data[0] = "IUD"[int(data[0])%3]
		rc, err := parseRowChange(data, inStream)
		if err != nil {
			return
		}
		var slab valueSlab
		rd.decodeTuple(rc.new, &slab)
		rd.decodeTuple(rc.old, &slab)
	})
}

// TestValueLargerThanTheLimit decodes a value longer than the decoder
// keeps, from the stream and from COPY, as its size alone; a value of
// exactly the limit is kept.
func TestValueLargerThanTheLimit(t *testing.T) {
	rel := &store.Relation{Schema: "s", Name: "t", Columns: []store.Column{{Name: "id", TypeOID: 20}, {Name: "v", TypeOID: 25}, {Name: "w", TypeOID: 17}}}
	rd := newRelationDecoder(typemap.New(), rel, 5)
	var slab valueSlab
	vals, err := rd.decodeTuple(tupleData([]byte("1"), []byte("12345"), []byte(`\x00010203`)), &slab)
	if err != nil {
		t.Fatal(err)
	}
	if vals[0].Int != 1 || vals[1].Kind != store.KindString || string(vals[1].Bytes) != "12345" ||
		vals[2].Kind != store.KindTooLarge || vals[2].Int != 10 || vals[2].Bytes != nil {
		t.Fatalf("stream: %+v", vals)
	}
	texts := make([][]byte, 3)
	vals, err = rd.decodeCopyRow([]byte("2\t123456\t\\\\x00"), &slab, new(byteSlab), texts)
	if err != nil {
		t.Fatal(err)
	}
	if vals[0].Int != 2 || vals[1].Kind != store.KindTooLarge || vals[1].Int != 6 || texts[1] != nil ||
		vals[2].Kind != store.KindBytes || len(vals[2].Bytes) != 1 {
		t.Fatalf("copy: %+v", vals)
	}
}

// TestLargeRowMessageKeepsNothingOfItsBuffer decodes a row message of
// more than largeMessage bytes, then overwrites the message: the values
// kept are intact, arrays' elements too.
func TestLargeRowMessageKeepsNothingOfItsBuffer(t *testing.T) {
	big := bytes.Repeat([]byte("x"), largeMessage)
	msg := append([]byte{'I', 0, 0, 0, 7, 'N'}, tupleData([]byte("5"), big, []byte(`{a,"b c"}`))...)
	rel := &store.Relation{Key: store.RelationKey{OID: 7}, Schema: "s", Name: "t",
		Columns: []store.Column{{Name: "id", TypeOID: 20}, {Name: "v", TypeOID: 25}, {Name: "a", TypeOID: 1009}}}
	st := &stream{rels: map[uint32]*relationDecoder{7: newRelationDecoder(typemap.New(), rel, DefaultMaxValueBytes)},
		tables: map[uint32]*capturedTable{7: {}}}
	_, c, captured, err := st.rowChangeOf(msg)
	if err != nil || !captured {
		t.Fatalf("captured %v, err %v", captured, err)
	}
	for i := range msg {
		msg[i] = 0
	}
	if v := c.New; v[0].Int != 5 || !bytes.Equal(v[1].Bytes, big) || len(v[2].Elems) != 2 ||
		string(v[2].Elems[0].Bytes) != "a" || string(v[2].Elems[1].Bytes) != "b c" {
		t.Fatalf("values after the message was reused: id %d, text of %d bytes, array %+v", v[0].Int, len(v[1].Bytes), v[2].Elems)
	}
}

// TestWideTransactionSpillsByBytes adds changes of 1 MiB values to a
// transaction and to a stream block: each goes to the spool once it holds
// spillBytes of values, long before spillChanges changes.
func TestWideTransactionSpillsByBytes(t *testing.T) {
	value := bytes.Repeat([]byte("v"), 1<<20)
	change := store.Change{Op: store.OpInsert, New: []store.Value{{Kind: store.KindString, Bytes: value}}}
	for _, streamed := range []bool{false, true} {
		w := newQueueWriter(nil, slog.New(slog.DiscardHandler), 0, nil, nil)
		st := &stream{s: &Source{writer: w}, inTxn: !streamed, inStream: streamed}
		n := 0
		for n < spillChanges && len(w.ops) == 0 {
			if err := st.add(1, change); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if len(w.ops) == 0 {
			t.Fatalf("streamed %v: %d changes of 1 MiB held in memory", streamed, n)
		}
		op := <-w.ops
		if op.kind != opSpoolAppend || len(op.changes)*len(value) > spillBytes {
			t.Fatalf("streamed %v: spilled %d changes of 1 MiB (kind %v), want at most %d MiB", streamed, len(op.changes), op.kind, spillBytes>>20)
		}
	}
}
