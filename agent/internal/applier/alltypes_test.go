package applier

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// allTypesSetup is a table with a column of each type of Debezium's
// PostgreSQL type list, and rows of their edge values.
const allTypesSetup = `
	CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
	CREATE TYPE pair AS (a int, b text);
	CREATE DOMAIN qty AS int CHECK (VALUE >= 0);
	CREATE TABLE every (
		id int PRIMARY KEY,
		b boolean, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision,
		n numeric(10,3), nu numeric, m money,
		c char(3), vc varchar(5), t text, nm name, by bytea,
		d date, ts timestamp, tstz timestamptz, tm time, tmtz timetz, iv interval,
		bt bit(3), vb varbit, inet_ inet, cidr_ cidr, mac macaddr, mac8 macaddr8,
		pt point, ln line, ls lseg, bx box, pa path, pg polygon, ci circle,
		r4 int4range, rts tstzrange, mr int4multirange,
		js json, jb jsonb, x xml, u uuid,
		e mood, dq qty, cp pair,
		ai int[], at text[], ad date[], an numeric(5,2)[], ae mood[], acp pair[], aq qty[], agrid int[],
		ab bool[], af float8[], aby bytea[], ats timestamptz[], am money[], ainet inet[], ajb jsonb[], ar int4range[],
		apt point[], auu uuid[], aiv interval[], abit bit(3)[], anu numeric[], atm time[], ax xml[]);
	INSERT INTO every VALUES
		(1, true, -32768, -2147483648, -9223372036854775808, 'NaN', '-Infinity',
		 -9999999.999, 'NaN', '-92233720368547758.08',
		 'a', 'abcde', '', 'nm', '\x00ff',
		 '4714-11-24 BC', '4713-01-01 00:00:00 BC', '-infinity', '00:00:00', '00:00:00+14', '-178000000 years',
		 '101', '', '::1', '10.0.0.0/8', '08:00:2b:01:02:03', '08:00:2b:01:02:03:04:05',
		 '(1,2)', '{1,2,3}', '[(0,0),(1,1)]', '((0,0),(1,1))', '[(0,0),(1,1),(2,0)]', '((0,0),(1,1),(2,0))', '<(0,0),1>',
		 '[1,10)', '[2026-01-01 00:00+00,2026-02-01 00:00+00)', '{[1,3),[5,7)}',
		 '{"a": [1, null]}', '{"b": {"c": true}}', '<a>x</a>', '00000000-0000-0000-0000-000000000000',
		 'sad', 0, ROW(1, 'x'),
		 '{1,NULL,3}', '{"a,b",NULL,""}', '{-infinity,2026-01-01}', '{1.5,NaN,NULL}', '{sad,happy}', ARRAY[ROW(1,'x')::pair, NULL], '{0,1}', '{{1,2},{3,4}}',
		 '{true,NULL,false}', '{NaN,-Infinity,1.5}', '{"\\x00ff",NULL}', '{-infinity,"2026-01-01 00:00+00"}', '{-1.50,NULL}', '{::1,10.0.0.1}',
		 ARRAY['{"a": 1}'::jsonb, '[]'], '{"[1,2)",empty}', '{"(1,2)",NULL}', '{00000000-0000-0000-0000-000000000000}',
		 '{"1 day","-178000000 years"}', '{101,000}', '{NaN,Infinity,1.5}', '{00:00,24:00}', ARRAY['<a/>'::xml, NULL]),
		(2, false, 32767, 2147483647, 9223372036854775807, '1.4e-45', 'Infinity',
		 9999999.999, 'Infinity', '92233720368547758.07',
		 'xyz', '', repeat('long ', 1000), 'n', '',
		 '5874897-12-31', '294276-12-31 23:59:59.999999', 'infinity', '24:00:00', '23:59:59.999999-12', '178000000 years',
		 '000', '1010101', '2001:db8::1/64', '2001:db8::/32', 'ff:ff:ff:ff:ff:ff', 'ff:ff:ff:ff:ff:ff:ff:ff',
		 '(-1.5,1e+300)', '{1,-1,0}', '[(1,1),(2,2)]', '((2,2),(1,1))', '((0,0),(1,1))', '((0,0),(1,0),(1,1))', '<(1,1),0.5>',
		 'empty', '(,)', '{}',
		 '[]', '{}', '<?xml version="1.0"?><r/>', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
		 'happy', 2147483647, ROW(NULL, NULL),
		 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '[0:1]={5,6}',
		 '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'),
		(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 '0001-01-01', '9999-12-31 23:59:59.999999', '2026-06-01 12:00:00.123456+02', NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
		 'null', 'null', NULL, NULL, NULL, NULL, NULL,
		 NULL, '{NULL}', '{9999-12-31,0001-01-01}', '{999.99,-999.99}', '{NULL}', NULL, NULL, NULL,
		 NULL, NULL, NULL, NULL, '{92233720368547758.07}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);`

// TestEveryTypeAgainstPostgreSQL captures a column of every type of
// Debezium's PostgreSQL type list, at its edges (numeric NaN and
// ±Infinity, the smallest and largest integers, BC and far-future dates
// and timestamps, ±infinity, bit strings, network, geometric, range and
// multirange types, json, jsonb and xml, an enum, a domain, a composite,
// money, arrays of them with NULLs and of more than one dimension), by
// snapshot and by stream: every value read back from the Delta tables
// equals PostgreSQL's, but for the columns each changelog row lists in
// _replaced, which are exactly those that differ. It logs what each value
// becomes.
func TestEveryTypeAgainstPostgreSQL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, allTypesSetup, "every")
	a := h.applier()
	h.apply(a)
	// The same rows again, streamed: each id moved up by 10.
	h.exec(`INSERT INTO every SELECT id + 10, b, i2, i4, i8, f4, f8, n, nu, m, c, vc, t, nm, by, d, ts, tstz, tm, tmtz, iv,
		bt, vb, inet_, cidr_, mac, mac8, pt, ln, ls, bx, pa, pg, ci, r4, rts, mr, js, jb, x, u, e, dq, cp,
		ai, at, ad, an, ae, acp, aq, agrid, ab, af, aby, ats, am, ainet, ajb, ar, apt, auu, aiv, abit, anu, atm, ax FROM every`)
	h.apply(a)
	checked, replaced := h.checkReplaced("every")
	if checked != 6 || replaced == 0 {
		t.Fatalf("checked %d rows with %d replaced values, want 6 rows and some replaced", checked, replaced)
	}
	h.checkMirror("every")

	// What each value becomes, for the record.
	cols := h.pgColumns("every")
	schema := h.snapshot("public.every").Schema()
	rows, err := h.snapshot("public.every").ReadRows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = exactSQL(pgx.Identifier{c.name}.Sanitize(), c.typ)
	}
	pg := map[string][]string{}
	for _, row := range h.textRows("SELECT " + strings.Join(exprs, ", ") + " FROM every WHERE id < 10") {
		pg[row[0]] = row
	}
	var b strings.Builder
	for _, r := range rows {
		_, idIdx := schema.Field("id")
		id := canon(r[idIdx], schema.Fields[idIdx].Type)
		want, ok := pg[id]
		if !ok {
			continue
		}
		for i, c := range cols {
			f, j := schema.Field(c.name)
			got := canon(r[j], f.Type)
			mark := "="
			if got != want[i] {
				mark = "replaced ->"
			}
			fmt.Fprintf(&b, "\n  row %s %-6s %-26s %-12s %.60s %s %.40s", id, c.name, c.typ, f.Type.String(), want[i], mark, got)
		}
	}
	t.Logf("every type:%s", b.String())
}
