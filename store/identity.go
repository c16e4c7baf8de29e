package store

import (
	"cmp"
	"fmt"
	"slices"
)

// bucketTables holds the identity of each captured table, by the name of
// its Delta tables; created on first write.
var bucketTables = []byte("tables")

// recordIdentity is a TableIdentity record.
const recordIdentity byte = 'I'

// TableIdentity is what makes a captured table the same table across
// renames and re-creations: the name its Delta tables were given when it
// was first captured, and the PostgreSQL tables (OIDs) it has been since.
// A rename keeps the OID, so it changes nothing here; a table dropped and
// created again under its configured name is a new generation.
type TableIdentity struct {
	// Table is "schema.table", the configured name the table was first
	// captured as: every schema version of its OIDs records it as
	// Relation.Table, so its Delta tables keep their directories
	// whatever PostgreSQL and source.tables call the table later.
	Table string
	// Generations are the PostgreSQL tables captured as Table, oldest
	// first; the last is the one captured now.
	Generations []TableGeneration
}

// TableGeneration is one PostgreSQL table (OID) captured as a
// TableIdentity.
type TableGeneration struct {
	OID uint32
	// Generation counts from 1, up by one each time the table is
	// re-created.
	Generation uint64
	// Since is the position in the stream from which the OID is captured:
	// zero for the first generation, which is captured from the start.
	Since LSN
	// Backfill, when not empty, is why the rows the table holds must be
	// copied into the queue (for example, it was re-created); it is
	// cleared once the copy has been asked for.
	Backfill string
	// BackfillRequest numbers the reasons recorded in Backfill, up by
	// one each: a copy asked for under one number is not taken for a
	// reason recorded after it was asked (a rewrite just after a
	// re-creation), which is then asked for in turn.
	BackfillRequest uint64
}

// Current returns the generation captured now.
func (t *TableIdentity) Current() TableGeneration {
	if len(t.Generations) == 0 {
		return TableGeneration{}
	}
	return t.Generations[len(t.Generations)-1]
}

// TableIdentities returns every recorded table identity, ordered by name.
func (r *Reader) TableIdentities() ([]*TableIdentity, error) {
	b := r.tx.Bucket(bucketTables)
	if b == nil {
		return nil, nil
	}
	var out []*TableIdentity
	err := b.ForEach(func(k, v []byte) error {
		t, err := decodeIdentity(v)
		if err != nil {
			return fmt.Errorf("table identity %q: %w", k, err)
		}
		if t.Table != string(k) {
			return fmt.Errorf("table identity %q: %w: record names %q", k, ErrCorrupt, t.Table)
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// TableIdentity returns the identity recorded under a Delta table name, or
// nil.
func (r *Reader) TableIdentity(table string) (*TableIdentity, error) {
	b := r.tx.Bucket(bucketTables)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(table))
	if v == nil {
		return nil, nil
	}
	t, err := decodeIdentity(v)
	if err != nil {
		return nil, fmt.Errorf("table identity %q: %w", table, err)
	}
	return t, nil
}

// PutTableIdentity records a table identity, replacing the one of the same
// name.
func (w *Writer) PutTableIdentity(t *TableIdentity) error {
	if t.Table == "" || len(t.Generations) == 0 {
		return fmt.Errorf("put table identity %q: no name or no generation", t.Table)
	}
	b, err := w.tx.CreateBucketIfNotExists(bucketTables)
	if err != nil {
		return fmt.Errorf("put table identity: %w", err)
	}
	return b.Put([]byte(t.Table), encodeIdentity(t))
}

// clearTableIdentities forgets every table identity (see ClearSlotState).
func (w *Writer) clearTableIdentities() error {
	if w.tx.Bucket(bucketTables) == nil {
		return nil
	}
	if err := w.tx.DeleteBucket(bucketTables); err != nil {
		return fmt.Errorf("clear %s: %w", bucketTables, err)
	}
	return nil
}

// DeriveTableIdentities returns the identities a schema history recorded
// before identities were kept implies: one per Relation.TableName, whose
// generations are its OIDs in the order they were first seen (a table
// re-created under its configured name was captured under the new OID into
// the same Delta tables from the next start on).
func DeriveTableIdentities(rels map[RelationKey]*Relation) []*TableIdentity {
	type first struct {
		oid uint32
		lsn LSN
	}
	firsts := map[string]map[uint32]LSN{}
	for k, r := range rels {
		name := r.TableName()
		m := firsts[name]
		if m == nil {
			m = map[uint32]LSN{}
			firsts[name] = m
		}
		if l, ok := m[k.OID]; !ok || k.LSN < l {
			m[k.OID] = k.LSN
		}
	}
	out := make([]*TableIdentity, 0, len(firsts))
	for name, m := range firsts {
		var oids []first
		for oid, l := range m {
			oids = append(oids, first{oid, l})
		}
		slices.SortFunc(oids, func(a, b first) int { return cmp.Or(cmp.Compare(a.lsn, b.lsn), cmp.Compare(a.oid, b.oid)) })
		t := &TableIdentity{Table: name}
		for i, f := range oids {
			g := TableGeneration{OID: f.oid, Generation: uint64(i + 1)}
			if i > 0 {
				g.Since = f.lsn
			}
			t.Generations = append(t.Generations, g)
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *TableIdentity) int { return cmp.Compare(a.Table, b.Table) })
	return out
}

func encodeIdentity(t *TableIdentity) []byte {
	e := newEncoder(recordIdentity, 16+len(t.Table)+24*len(t.Generations))
	e.str(t.Table)
	e.uvarint(uint64(len(t.Generations)))
	for _, g := range t.Generations {
		e.uvarint(uint64(g.OID))
		e.uvarint(g.Generation)
		e.uvarint(uint64(g.Since))
		e.str(g.Backfill)
	}
	for _, g := range t.Generations {
		e.uvarint(g.BackfillRequest)
	}
	return e.finish()
}

func decodeIdentity(data []byte) (*TableIdentity, error) {
	d := newDecoder(recordIdentity, data)
	t := &TableIdentity{Table: d.str()}
	// Each generation takes at least four bytes.
	n := d.length(4)
	if d.err == nil && n == 0 {
		d.err = fmt.Errorf("%w: table identity without a generation", ErrCorrupt)
	}
	t.Generations = make([]TableGeneration, n)
	for i := range t.Generations {
		g := &t.Generations[i]
		oid := d.uvarint()
		if d.err == nil && oid > 1<<32-1 {
			d.err = fmt.Errorf("%w: OID %d", ErrCorrupt, oid)
		}
		g.OID = uint32(oid)
		g.Generation = d.uvarint()
		g.Since = LSN(d.uvarint())
		g.Backfill = d.str()
	}
	// Each generation's BackfillRequest was added after the first
	// records; older ones end before them.
	if len(d.buf) > 0 {
		for i := range t.Generations {
			t.Generations[i].BackfillRequest = d.uvarint()
		}
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("decode table identity: %w", err)
	}
	return t, nil
}
