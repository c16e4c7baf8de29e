package store

import (
	"errors"
	"reflect"
	"testing"
)

func testIdentity() *TableIdentity {
	return &TableIdentity{Table: "public.stock", Generations: []TableGeneration{
		{OID: 16384, Generation: 1},
		{OID: 1<<32 - 1, Generation: 2, Since: 0x1_0000_0040, Backfill: "recreated", BackfillRequest: 300},
	}}
}

// TestTableIdentityRoundTrip records identities and reads them back, by
// name and all at once, and ClearSlotState forgets them.
func TestTableIdentityRoundTrip(t *testing.T) {
	db := openTest(t)
	a, b := testIdentity(), &TableIdentity{Table: "app.orders", Generations: []TableGeneration{{OID: 7, Generation: 1}}}
	if err := db.Update(func(w *Writer) error {
		if got, err := w.TableIdentities(); err != nil || got != nil {
			t.Fatalf("identities of a new file: %v, %v", got, err)
		}
		if err := w.PutTableIdentity(a); err != nil {
			return err
		}
		return w.PutTableIdentity(b)
	}); err != nil {
		t.Fatal(err)
	}
	err := db.View(func(r *Reader) error {
		all, err := r.TableIdentities()
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(all, []*TableIdentity{b, a}) {
			t.Errorf("identities = %+v, want %+v and %+v", all, b, a)
		}
		one, err := r.TableIdentity("public.stock")
		if err != nil || !reflect.DeepEqual(one, a) || one.Current().OID != 1<<32-1 || one.Current().Generation != 2 {
			t.Errorf("identity public.stock = %+v, %v", one, err)
		}
		if none, err := r.TableIdentity("public.none"); none != nil || err != nil {
			t.Errorf("identity of an unknown table = %+v, %v", none, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(w *Writer) error { return w.ClearSlotState() }); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) error {
		all, err := r.TableIdentities()
		if err != nil || len(all) != 0 {
			t.Errorf("identities after ClearSlotState = %+v, %v", all, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTableIdentityBeforeBackfillRequests reads a record written before
// generations had a BackfillRequest: each reads as zero.
func TestTableIdentityBeforeBackfillRequests(t *testing.T) {
	want := testIdentity()
	e := newEncoder(recordIdentity, 64)
	e.str(want.Table)
	e.uvarint(uint64(len(want.Generations)))
	for i := range want.Generations {
		g := &want.Generations[i]
		e.uvarint(uint64(g.OID))
		e.uvarint(g.Generation)
		e.uvarint(uint64(g.Since))
		e.str(g.Backfill)
		g.BackfillRequest = 0
	}
	got, err := decodeIdentity(e.finish())
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("old record = %+v, %v; want %+v", got, err, want)
	}
}

// TestCorruptTableIdentityIsReported damages an identity record every way
// the framing catches: a flipped bit, a cut, another record type, trailing
// bytes, no generation, an OID out of range, and a record under another
// name's key.
func TestCorruptTableIdentityIsReported(t *testing.T) {
	good := encodeIdentity(testIdentity())
	reframe := func(record byte, payload []byte) []byte {
		e := newEncoder(record, len(payload))
		e.buf = append(e.buf, payload...)
		return e.finish()
	}
	payload := good[2 : len(good)-4]
	noGen := newEncoder(recordIdentity, 16)
	noGen.str("public.stock")
	noGen.uvarint(0)
	bigOID := newEncoder(recordIdentity, 16)
	bigOID.str("public.stock")
	bigOID.uvarint(1)
	bigOID.uvarint(1 << 32)
	bigOID.uvarint(1)
	bigOID.uvarint(0)
	bigOID.str("")
	flipped := append([]byte(nil), good...)
	flipped[5] ^= 0x10
	cases := map[string][]byte{
		"flipped bit":   flipped,
		"cut":           good[:len(good)-3],
		"cut payload":   reframe(recordIdentity, payload[:len(payload)-2]),
		"other type":    reframe(recordRelation, payload),
		"trailing":      reframe(recordIdentity, append(append([]byte(nil), payload...), 0)),
		"no generation": noGen.finish(),
		"OID too large": bigOID.finish(),
		"huge count":    reframe(recordIdentity, append([]byte{0}, 0xff, 0xff, 0xff, 0x0f)),
	}
	for name, data := range cases {
		if _, err := decodeIdentity(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := decodeIdentity(good); err != nil {
		t.Fatalf("the undamaged record: %v", err)
	}

	db := openTest(t)
	if err := db.Update(func(w *Writer) error {
		b, err := w.tx.CreateBucketIfNotExists(bucketTables)
		if err != nil {
			return err
		}
		return b.Put([]byte("public.other"), good)
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(r *Reader) error {
		_, err := r.TableIdentities()
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("a record under another name's key: err = %v, want ErrCorrupt", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDeriveTableIdentities derives identities from a schema history
// recorded before they were kept: versions group by the table they were
// captured as (or their own name in the oldest records), and a table's
// OIDs are its generations in the order they were first seen.
func TestDeriveTableIdentities(t *testing.T) {
	rels := map[RelationKey]*Relation{}
	add := func(oid uint32, lsn LSN, schema, name, table string) {
		k := RelationKey{OID: oid, LSN: lsn}
		rels[k] = &Relation{Key: k, Schema: schema, Name: name, Table: table}
	}
	add(100, 10, "public", "stock", "public.stock")
	add(100, 50, "public", "stock2", "public.stock") // renamed: same OID
	add(200, 80, "public", "stock", "public.stock")  // re-created
	add(200, 90, "public", "stock", "public.stock")
	add(300, 5, "app", "orders", "") // recorded before Table was kept
	got := DeriveTableIdentities(rels)
	want := []*TableIdentity{
		{Table: "app.orders", Generations: []TableGeneration{{OID: 300, Generation: 1}}},
		{Table: "public.stock", Generations: []TableGeneration{{OID: 100, Generation: 1}, {OID: 200, Generation: 2, Since: 80}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("derived %+v, want %+v", got, want)
	}
	if got := DeriveTableIdentities(nil); len(got) != 0 {
		t.Fatalf("derived %+v from no history", got)
	}
}
