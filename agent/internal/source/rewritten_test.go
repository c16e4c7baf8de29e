package source

import (
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestColumnAddedAfterATruncateIsNoRewrite checks which schema changes
// after a TRUNCATE (which gives the table a new file node) ask for the
// table's rows to be copied again: a column added with no default or a
// constant one does not, as without the truncate, when capture has
// decoded the truncate before; one added with a volatile default does,
// after the truncate or in its transaction, and when capture decodes the
// truncate only after the column was added.
func TestColumnAddedAfterATruncateIsNoRewrite(t *testing.T) {
	t.Parallel()
	const reload = `TRUNCATE items; INSERT INTO items SELECT g, g, 'r' FROM generate_series(1, 20) g`
	for _, c := range []struct {
		name string
		// steps run in turn, each in a transaction; stopped runs them
		// while the source is stopped.
		steps   []string
		stopped bool
		copied  bool
	}{
		{"no default", []string{reload, `ALTER TABLE items ADD COLUMN c int`}, false, false},
		{"a constant default", []string{reload, `ALTER TABLE items ADD COLUMN c int DEFAULT 7`}, false, false},
		{"a volatile default", []string{reload, `ALTER TABLE items ADD COLUMN c int8 DEFAULT (random() * 1000)::int8`}, false, true},
		{"a volatile default in the truncate's transaction", []string{
			reload + `; ALTER TABLE items ADD COLUMN c int8 DEFAULT (random() * 1000)::int8`}, false, true},
		{"a volatile default before the truncate is decoded", []string{
			reload, `ALTER TABLE items ADD COLUMN c int8 DEFAULT (random() * 1000)::int8`}, true, true},
		{"a type changed", []string{reload, `ALTER TABLE items ALTER COLUMN v TYPE text USING v * 2`}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.exec(itemsTable, `INSERT INTO items SELECT g, g, 'n' FROM generate_series(1, 10) g`)
			h.cfg.Tables = []Table{{"public", "items"}}
			h.recordBackfills()
			h.start()
			h.waitStreaming()
			h.waitXid(h.xid(`INSERT INTO items VALUES (100, 1, 'x')`))
			if c.stopped {
				if err := h.stop(); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range c.steps {
				xid := h.xid(s)
				if !c.stopped && strings.Contains(s, "INSERT") {
					// (PostgreSQL sends nothing of a transaction
					// that changes no row.)
					h.waitXid(xid)
				}
			}
			if c.stopped {
				h.start()
				h.waitStreaming()
			}
			h.waitXid(h.xid(`INSERT INTO items (id, v) VALUES (101, 1)`))
			id := h.identities()[0]
			if got := id.Current().BackfillRequest > 0; got != c.copied {
				t.Fatalf("copy asked for = %v (generation %+v), want %v", got, id.Current(), c.copied)
			}
		})
	}
}

// TestValueChangingRewriteIsCopied checks which rewrites of a table, which
// PostgreSQL sends no change for, ask for its rows to be copied again, and
// from a truncate when the keys may have changed: a type change with USING
// does, to another type or to the same one, of a table or of a partitioned
// one, and a column added to a partitioned table with a volatile default;
// VACUUM FULL and CLUSTER do not, nor does a column renamed or added
// (with a constant default) after one, once capture has seen the table's
// new storage.
func TestValueChangingRewriteIsCopied(t *testing.T) {
	t.Parallel()
	const partitioned = `CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text) PARTITION BY RANGE (id);
		CREATE TABLE items_low PARTITION OF items FOR VALUES FROM (MINVALUE) TO (50);
		CREATE TABLE items_high PARTITION OF items FOR VALUES FROM (50) TO (MAXVALUE)`
	// seen waits until capture has seen the table's new storage.
	const seen = "(seen)"
	for _, c := range []struct {
		name  string
		table string
		steps []string
		// reason is the copy's, none for no copy.
		reason string
	}{
		{"a type changed with USING", itemsTable, []string{`ALTER TABLE items ALTER COLUMN v TYPE numeric USING v * 2`}, ReasonRewritten},
		{"the same type with USING", itemsTable, []string{`ALTER TABLE items ALTER COLUMN v TYPE int8 USING v * 2`}, ReasonRewritten},
		{"a text rewritten in place", itemsTable, []string{`ALTER TABLE items ALTER COLUMN note TYPE text USING upper(note)`}, ReasonRewritten},
		{"the keys rewritten", itemsTable, []string{`ALTER TABLE items ALTER COLUMN id TYPE int8 USING id + 1000`}, ReasonKeysRewritten},
		{"a partitioned table's type changed with USING", partitioned, []string{`ALTER TABLE items ALTER COLUMN v TYPE numeric USING v * 2`}, ReasonRewritten},
		{"a partitioned table's type kept with USING", partitioned, []string{`ALTER TABLE items ALTER COLUMN v TYPE int8 USING v * 2`}, ReasonRewritten},
		{"a partitioned table's column added with a volatile default", partitioned, []string{`ALTER TABLE items ADD COLUMN r int8 DEFAULT (random() * 1000)::int8`}, ReasonRewritten},
		{"VACUUM FULL", itemsTable, []string{`VACUUM FULL items`, seen}, ""},
		{"CLUSTER", itemsTable, []string{`CLUSTER items USING items_pkey`, seen}, ""},
		{"a partitioned table's VACUUM FULL", partitioned, []string{`VACUUM FULL items`, seen}, ""},
		{"VACUUM FULL, then a column renamed", itemsTable, []string{`VACUUM FULL items`, seen, `ALTER TABLE items RENAME COLUMN note TO remark`}, ""},
		{"VACUUM FULL, then a column added", itemsTable, []string{`VACUUM FULL items`, seen, `ALTER TABLE items ADD COLUMN c int DEFAULT 7`}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			logs := h.recordLog()
			h.exec(c.table, `INSERT INTO items SELECT g, g, 'n' FROM generate_series(1, 100) g`)
			h.cfg.Tables = []Table{{"public", "items"}}
			h.cfg.WatchInterval = 100 * time.Millisecond
			calls := h.recordBackfills()
			h.start()
			h.waitStreaming()
			h.waitXid(h.xid(`INSERT INTO items VALUES (1000, 1, 'x')`))
			for _, s := range c.steps {
				if s == seen {
					logs.wait(t, "a captured table has new storage that holds the values it had")
					continue
				}
				h.exec(s)
			}
			if c.reason != "" {
				if got := h.waitBackfill(calls); got.reason != c.reason {
					t.Fatalf("a copy asked for with reason %q, want %q", got.reason, c.reason)
				}
				return
			}
			// A change after the steps: the stream has acted on
			// what the watcher saw of them.
			h.waitXid(h.xid(`INSERT INTO items (id, v) VALUES (1001, 1)`))
			select {
			case got := <-calls:
				t.Fatalf("a copy was asked for (%s)", got.reason)
			default:
			}
		})
	}
}

// TestRewritten checks the rule that tells a rewrite that changed values
// from the storage and columns stamp a version has and the baseline.
func TestRewritten(t *testing.T) {
	prev := &store.Relation{Key: store.RelationKey{OID: 7, LSN: 1}, Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, AttNum: 1}, {Name: "v", TypeOID: 23, TypeMod: -1, AttNum: 2}}}
	renamed := &store.Relation{Key: store.RelationKey{OID: 7}, Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, AttNum: 1}, {Name: "w", TypeOID: 23, TypeMod: -1, AttNum: 2}}}
	retyped := &store.Relation{Key: store.RelationKey{OID: 7}, Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, AttNum: 1}, {Name: "v", TypeOID: 20, TypeMod: -1, AttNum: 2}}}
	with := func(r *store.Relation, node uint32, stamp int64) *store.Relation {
		c := *r
		c.FileNode, c.ColumnsStamp = node, stamp
		return &c
	}
	for _, c := range []struct {
		name string
		was  tableState
		rel  *store.Relation
		want bool
	}{
		{"same storage, new stamp (a rename)", tableState{fileNode: 10, stamp: 1}, with(renamed, 10, 2), false},
		{"new storage, same stamp (VACUUM FULL)", tableState{fileNode: 10, stamp: 1}, with(prev, 11, 1), false},
		{"new storage, new stamp, same shape (USING)", tableState{fileNode: 10, stamp: 1}, with(prev, 11, 2), true},
		{"new storage, new stamp, a rename", tableState{fileNode: 10, stamp: 1}, with(renamed, 11, 2), true},
		{"new storage, stamps unknown, a type changed", tableState{fileNode: 10, stamp: 0}, with(retyped, 11, 2), true},
		{"new storage, stamps unknown, a rename", tableState{fileNode: 10, stamp: 0}, with(renamed, 11, 0), false},
		{"storage unknown", tableState{fileNode: 0, stamp: 1}, with(retyped, 11, 2), false},
		{"another table", tableState{fileNode: 10, stamp: 1}, &store.Relation{Key: store.RelationKey{OID: 8}, FileNode: 11, ColumnsStamp: 2}, false},
	} {
		if got := rewritten(prev, c.was, c.rel); got != c.want {
			t.Errorf("%s: rewritten = %v, want %v", c.name, got, c.want)
		}
	}
	if rewritten(nil, tableState{fileNode: 10, stamp: 1}, with(prev, 11, 2)) {
		t.Error("a first version is taken for a rewrite")
	}
	for _, c := range []struct {
		was, now int64
		want     bool
	}{{3, 3, false}, {3, 4, true}, {0, 3, true}, {3, 0, true}} {
		if got := keysRewritten(tableState{keyStamp: c.was}, &store.Relation{KeyStamp: c.now}); got != c.want {
			t.Errorf("keysRewritten from key stamp %d to %d = %v, want %v", c.was, c.now, got, c.want)
		}
	}
}
