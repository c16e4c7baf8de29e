package source

import (
	"strings"
	"testing"
)

// TestColumnAddedAfterATruncateIsNoRewrite checks which schema changes
// after a TRUNCATE (which gives the table a new file node) ask for the
// table's rows to be copied again: a column added with no default or a
// constant one does not, as without the truncate, when capture has
// decoded the truncate before; one added with a volatile default does,
// after the truncate or in its transaction, and when capture decodes the
// truncate only after the column was added.
func TestColumnAddedAfterATruncateIsNoRewrite(t *testing.T) {
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
