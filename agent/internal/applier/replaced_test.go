package applier

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/delta"
)

// exactSQL returns an SQL expression giving the exact text of expr, a value
// of type typ, in the format canon gives Delta values: unlike canonSQL, it
// maps no value the Delta type cannot hold to what the applier writes.
func exactSQL(expr, typ string) string {
	if strings.HasSuffix(typ, "[]") {
		// A list of elements, or the dimensions and text of an array of
		// more dimensions or other bounds.
		elem := exactSQL(fmt.Sprintf("(%s)[o]", expr), strings.TrimSuffix(typ, "[]"))
		return fmt.Sprintf(`CASE WHEN %[1]s IS NULL THEN NULL WHEN array_ndims(%[1]s) > 1 OR array_lower(%[1]s, 1) <> 1 THEN array_dims(%[1]s) || %[1]s::text
			ELSE coalesce((SELECT string_agg(coalesce(%[2]s, 'NULL'), '|' ORDER BY o) FROM generate_subscripts(%[1]s, 1) s(o)), '') END`, expr, elem)
	}
	switch {
	case typ == "date":
		return fmt.Sprintf(`CASE WHEN %[1]s BETWEEN '0001-01-01' AND '9999-12-31' THEN to_char(%[1]s, 'YYYY-MM-DD') ELSE %[1]s::text END`, expr)
	case typ == "timestamp without time zone":
		return fmt.Sprintf(`CASE WHEN %[1]s BETWEEN '0001-01-01' AND '9999-12-31 23:59:59.999999' THEN to_char(%[1]s, 'YYYY-MM-DD"T"HH24:MI:SS.US') ELSE %[1]s::text END`, expr)
	case typ == "timestamp with time zone":
		return fmt.Sprintf(`CASE WHEN %[1]s BETWEEN '0001-01-01 00:00+00' AND '9999-12-31 23:59:59.999999+00' THEN to_char(%[1]s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') ELSE %[1]s::text END`, expr)
	case strings.HasPrefix(typ, "numeric"):
		return expr + "::text"
	case typ == "money":
		return expr + "::numeric::text"
	}
	return canonSQL(expr, typ)
}

// TestReplacedValuesAreListed inserts, updates and deletes values at the
// edges of the date, time and decimal types: every changelog row lists in
// _replaced exactly the columns whose stored value differs from the one
// PostgreSQL holds (compared value by value, as PostgreSQL prints it and
// as the Delta table holds it), and the count of replaced values follows.
func TestReplacedValuesAreListed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE edges (id int PRIMARY KEY, d date, ts timestamp, tstz timestamptz, n numeric(5,2), da date[], na numeric(3,1)[]);
		INSERT INTO edges VALUES
			(1, '2026-01-01', '2026-01-01 12:00:00.5', '2026-01-01 12:00+00', 1.5, '{2026-01-01}', '{1.5}'),
			(2, 'infinity', 'infinity', '-infinity', 'NaN', '{infinity,2026-01-01}', '{NaN,NULL}'),
			(3, '5874897-12-31', '294276-12-31 23:59:59.999999', '0001-01-01 00:00+00', 999.99, NULL, '{}'),
			(4, '-infinity', '1999-01-01', NULL, NULL, '{}', NULL);`, "edges")
	a := h.applier()
	h.apply(a)
	h.exec(`UPDATE edges SET n = 'NaN', ts = '-infinity' WHERE id = 1`,
		`INSERT INTO edges VALUES (5, '9999-12-31', '294247-01-10 04:00:54.775808', 'infinity', -999.99, '{-infinity}', '{99.9}')`,
		`DELETE FROM edges WHERE id = 3`)
	h.apply(a)

	checked, replacedTotal := h.checkReplaced("edges")
	if checked != 4 {
		t.Fatalf("checked %d rows, want 4", checked)
	}
	if got := a.Replaced()["public.edges"]; got != int64(replacedTotal) || got == 0 {
		t.Errorf("Replaced counts %d values for public.edges; the changelog lists %d", got, replacedTotal)
	}
	h.checkChangelog("edges", nil)
}

// TestTooLargeValuesAreListed captures values larger than capture keeps,
// copied by the initial snapshot and streamed, in text, bytea, numeric,
// jsonb and array columns: each is null in both Delta tables and listed in
// _replaced (checked against PostgreSQL value by value), a value of
// exactly the limit is kept, and the count of replaced values follows.
func TestTooLargeValuesAreListed(t *testing.T) {
	t.Parallel()
	const limit = 1000
	h := newHarnessWith(t, func(c *source.Config) { c.MaxValueBytes = limit }, `
		CREATE TABLE big (id int PRIMARY KEY, t text, b bytea, n numeric, j jsonb, a text[]);
		INSERT INTO big VALUES
			(1, repeat('x', 1001), NULL, 1.5, NULL, NULL),
			(2, repeat('y', 1000), '\x00', 2.5, '{}', '{a}');`, "big")
	a := h.applier()
	h.apply(a)
	h.exec(`INSERT INTO big VALUES (3, 'small', decode(repeat('ab', 500), 'hex'), repeat('9', 1001)::numeric,
			('{"k": "' || repeat('z', 1000) || '"}')::jsonb, ARRAY[repeat('q', 600), repeat('r', 600)])`,
		`UPDATE big SET t = 'now small', b = decode(repeat('cd', 499), 'hex') WHERE id = 1`,
		`UPDATE big SET t = repeat('w', 2000) WHERE id = 2`)
	h.apply(a)

	checked, replacedTotal := h.checkReplaced("big")
	if checked != 3 {
		t.Fatalf("checked %d rows, want 3", checked)
	}
	// Row 1 copied (t), row 3 inserted (b, n, j, a), row 2 updated (t).
	if got := a.Replaced()["public.big"]; got != int64(replacedTotal) || got != 6 {
		t.Errorf("Replaced counts %d values for public.big; the changelog lists %d, want 6", got, replacedTotal)
	}
	// The mirror holds PostgreSQL's rows with the values too large, by
	// the size of their text, null.
	nulled := func(c string) string {
		return fmt.Sprintf("CASE WHEN octet_length(%[1]s::text) > %[2]d THEN NULL ELSE %[1]s END AS %[1]s", c, limit)
	}
	h.exec(`CREATE VIEW big_kept AS SELECT id, ` + strings.Join([]string{nulled("t"), nulled("b"), nulled("n"), nulled("j"), nulled("a")}, ", ") + ` FROM big`)
	h.compare("mirror of big", h.pgRows("big_kept"), h.deltaRows(h.snapshot("public.big"), "big_kept"))
}

// checkReplaced compares the latest changelog row of each row of table (an
// int key "id") with PostgreSQL's row, value by value (exactSQL against
// canon), and checks that _replaced lists exactly the columns that differ.
// It returns how many rows it checked and how many values the changelog
// lists as replaced in all.
func (h *harness) checkReplaced(table string) (checked, replacedTotal int) {
	t := h.t
	t.Helper()
	cols := h.pgColumns(table)
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = exactSQL(pgx.Identifier{c.name}.Sanitize(), c.typ)
	}
	pg := map[string][]string{}
	for _, row := range h.textRows("SELECT " + strings.Join(exprs, ", ") + " FROM " + table) {
		pg[row[0]] = row
	}

	// The latest changelog row of each id that is still there.
	s := h.snapshot("public." + table + "_changes")
	changes, err := s.ReadRows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st := s.Schema()
	_, lsnIdx := st.Field(colLSN)
	_, replIdx := st.Field(colReplaced)
	if replIdx < 0 {
		t.Fatal("the changelog has no _replaced column")
	}
	latest := map[string]delta.Row{}
	for _, r := range changes {
		_, idIdx := st.Field("id")
		id := canon(r[idIdx], delta.TypeInteger)
		if cur, ok := latest[id]; !ok || r[lsnIdx].(int64) > cur[lsnIdx].(int64) {
			latest[id] = r
		}
	}
	for id, want := range pg {
		r := latest[id]
		if r == nil {
			t.Fatalf("no changelog row for id %s", id)
		}
		var listed []string
		if l, ok := r[replIdx].([]any); ok {
			for _, c := range l {
				listed = append(listed, c.(string))
			}
		}
		var differ []string
		for i, c := range cols {
			f, j := st.Field(c.name)
			if got := canon(r[j], f.Type); got != want[i] {
				differ = append(differ, c.name)
			}
		}
		slices.Sort(listed)
		slices.Sort(differ)
		if !slices.Equal(listed, differ) {
			t.Errorf("id %s: _replaced lists %v; the values that differ from PostgreSQL's are %v", id, listed, differ)
		}
		checked++
	}
	for _, r := range changes {
		if l, ok := r[replIdx].([]any); ok {
			replacedTotal += len(l)
		}
	}
	return checked, replacedTotal
}
