package applier

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// typesSetup adds to the shared types table (testdata/sql/types.sql) an
// items table for volume, and a table without a primary key under REPLICA
// IDENTITY FULL.
var typesSetup = typesTableSQL() + `
CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text);
CREATE TABLE log (who text, what int4, at timestamptz);
ALTER TABLE log REPLICA IDENTITY FULL;
INSERT INTO items SELECT g, g * 10, 'snap' FROM generate_series(1, 3000) g;
INSERT INTO log VALUES ('a', 1, '2024-01-01 10:00+00'), ('a', 1, '2024-01-01 10:00+00'), ('b', 2, NULL);
`

const typesRows = `
INSERT INTO types VALUES
 (1, true, -32768, 2147483647, -9223372036854775808, 1.5, 3.141592653589793, 123456789.125, 0.1,
  'plain', 'varchar', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50]}', '{"b": {"c": null}}', 'happy',
  '1 year 2 mons 3 days 04:05:06.789', '192.168.0.1/24', '\x00ff10', '2024-02-29', '2024-10-27 02:30:00',
  '2024-03-31 01:30:00+02', '23:59:59.999999', '{1,NULL,3}', '{"a,b","c\"d",NULL,""}', '{1.5,NaN}',
  '{"2024-03-31 03:30:00+00",NULL}', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)),
 (2, false, 0, 0, 0, 'NaN', '-Infinity', -0.001, '1234567890123456789012345678901234567890.0123456789',
  'grüße 日本語 🎉 ''quoted'' \ back', '', '     ', '00000000-0000-0000-0000-000000000000', '[]', '[]', 'sad',
  '-00:00:01', '::1', '', '1900-01-01', '1900-01-01 00:00:00', '1969-12-31 23:59:59.5+00', '00:00:00',
  '{}', '{}', '{}', '{}', 'small'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 1, 1, 1, 'Infinity', 'NaN', 'NaN', 'NaN', 'x', 'y', 'z', NULL, 'null', '"s"', 'ok', '0', '10.0.0.0/8',
  '\x', 'infinity', '-infinity', 'infinity', '12:00', '{{1,2},{3,4}}', '{{a},{b}}', NULL, NULL, NULL)`

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, typesSetup, "types", "items", "log")
	a := h.applier(func(c *Config) { c.TargetFileRows = 1000; c.MergeMemoryKeys = 700; c.FlushChanges = 5000 })
	h.exec(typesRows)
	h.apply(a)
	for _, tb := range []string{"types", "items", "log"} {
		h.checkMirror(tb)
	}

	h.exec(
		// Only i4 changes: big is an unchanged TOAST value.
		`UPDATE types SET i4 = i4 - 1 WHERE id = 1`,
		`UPDATE types SET (b, i2, n, nu, t, ba, d, tstz, ai, at, big) = (NOT b, 7, 1.001, -0.5, 'changed', '\xdead', '1970-01-01', '1969-12-31 23:59:59.5+00', '{7}', '{x}', 'now small') WHERE id = 2`,
		`DELETE FROM types WHERE id = 3`,
		// A key change with an unchanged TOAST value.
		`UPDATE types SET id = 10 WHERE id = 1`,
		`UPDATE items SET v = v + 1 WHERE id % 7 = 0`,
		`DELETE FROM items WHERE id % 11 = 0`,
		`INSERT INTO items SELECT g, g, 'big txn' FROM generate_series(100001, 112000) g`,
		`UPDATE log SET what = 3 WHERE who = 'b'`,
		`DELETE FROM log WHERE ctid = (SELECT min(ctid) FROM log WHERE who = 'a')`,
		`INSERT INTO log VALUES ('c', 4, now())`,
	)
	h.apply(a)
	for _, tb := range []string{"types", "items", "log"} {
		h.checkMirror(tb)
	}
	if n := h.snapshot("public.items").NumFiles(); n < 10 {
		t.Errorf("items mirror has %d files; want clustered files of at most 1000 rows", n)
	}

	h.exec(`TRUNCATE items`, `INSERT INTO items VALUES (1, 1, 'after truncate')`, typesRows[:0]+`UPDATE types SET big = big || 'x' WHERE id = 10`)
	h.apply(a)
	for _, tb := range []string{"types", "items", "log"} {
		h.checkMirror(tb)
	}

	// The queue is empty and the applied position is recorded.
	var left int
	var applied store.LSN
	h.db.View(func(r *store.Reader) error {
		txns, _ := r.ReadTxns(0, 0)
		left = len(txns)
		applied, _ = r.Applied()
		return nil
	})
	if left != 0 {
		t.Errorf("queue holds %d transactions after applying", left)
	}
	for _, ts := range a.Tables() {
		if ts.AppliedLSN > applied || ts.AppliedLSN == 0 {
			t.Errorf("table %s applied %s, state says %s", ts.Name, ts.AppliedLSN, applied)
		}
	}
	h.checkChangelog("items", nil)
}

// checkChangelog checks that the changelog holds each (_lsn, _seq) once, in
// commit order, and, when want is given, the expected _op sequence.
func (h *harness) checkChangelog(table string, want []string) []delta.Row {
	h.t.Helper()
	s := h.snapshot("public." + table + "_changes")
	rows, err := s.ReadRows(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	st := s.Schema()
	_, lsn := st.Field(colLSN)
	_, seq := st.Field(colSeq)
	_, op := st.Field(colOp)
	slices.SortFunc(rows, func(a, b delta.Row) int {
		if c := a[lsn].(int64) - b[lsn].(int64); c != 0 {
			return int(c / max(1, abs(c)))
		}
		return int(a[seq].(int64) - b[seq].(int64))
	})
	seen := map[string]bool{}
	var ops []string
	for _, r := range rows {
		k := fmt.Sprint(r[lsn], "/", r[seq])
		if seen[k] {
			h.t.Errorf("changelog of %s holds %s twice", table, k)
		}
		seen[k] = true
		ops = append(ops, r[op].(string))
	}
	if want != nil && !slices.Equal(ops, want) {
		h.t.Errorf("changelog of %s: ops %v, want %v", table, ops, want)
	}
	return rows
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// typesTableSQL reads the shared table with a column of every mapped type.
func typesTableSQL() string {
	b, err := os.ReadFile("../../../testdata/sql/types.sql")
	if err != nil {
		panic(err)
	}
	return string(b)
}
