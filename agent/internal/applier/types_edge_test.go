package applier

import (
	"fmt"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestDomainsMoneyAndArraysKeepTheirTypes captures columns whose types
// capture once kept as one string per value: a domain (and a domain over
// a domain) gets its base type, money a decimal of two places, an array of
// an enum or a composite type array<string>, an array of a domain the
// array of its base type, an array declared of two dimensions
// array<array<...>>. Their values equal PostgreSQL's, and an array a
// column's Delta type cannot hold (of other dimensions than declared, or
// bounds other than from 1) is listed in _replaced rather than flattened.
func TestDomainsMoneyAndArraysKeepTheirTypes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE DOMAIN price AS numeric(8,2) CHECK (VALUE >= 0);
		CREATE DOMAIN dear AS price CHECK (VALUE > 100);
		CREATE DOMAIN qty AS int;
		CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TYPE pair AS (a int, b text);
		CREATE TABLE typed (id int PRIMARY KEY, p price, d dear, q qty, m money, moods mood[], pairs pair[], qs qty[],
			grid int[], words text[], cube int[][]);
		INSERT INTO typed VALUES
			(1, 12.5, 150, 7, '-1234.56', '{sad,happy}', ARRAY[ROW(1,'x')::pair, NULL], '{1,2}', '{1,2,3}', '{a,b}', '{{1,NULL},{3,4},{5,6}}'),
			(2, 0, 101, NULL, '92233720368547758.07', '{}', NULL, NULL, '{{1,2},{3,4}}', '{{a,b},{c,d}}', '{7,8}');`, "typed")
	a := h.applier()
	h.apply(a)
	h.exec(`UPDATE typed SET m = m + '1.01', moods = '{ok}' WHERE id = 1`, `INSERT INTO typed (id, grid) VALUES (3, '[0:1]={5,6}')`)
	h.apply(a)

	schema := h.snapshot("public.typed").Schema()
	want := map[string]string{
		"p": "decimal(8,2)", "d": "decimal(8,2)", "q": "integer", "m": "decimal(19,2)",
		"moods": "array<string>", "pairs": "array<string>", "qs": "array<integer>", "grid": "array<integer>", "words": "array<string>",
		"cube": "array<array<integer>>",
	}
	for name, typ := range want {
		f, _ := schema.Field(name)
		if f == nil || f.Type.String() != typ {
			t.Errorf("column %s: %v, want %s", name, f, typ)
		}
	}
	// Every column of rows without a multi-dimensional array equals
	// PostgreSQL's (money compared as the decimal it is).
	h.exec(`CREATE VIEW typed_pg AS SELECT id, p::numeric(8,2) AS p, d::numeric(8,2) AS d, q::int AS q, m::numeric(19,2) AS m,
		moods::text[] AS moods, pairs::text[] AS pairs, qs::int[] AS qs, grid, words FROM typed WHERE id = 1`)
	// The declared two dimensions keep their shape.
	var cube []any
	for _, r := range h.deltaRowsRaw("public.typed") {
		if r["id"] == int32(1) {
			cube, _ = r["cube"].([]any)
		}
	}
	if fmt.Sprint(cube) != "[[1 <nil>] [3 4] [5 6]]" {
		t.Errorf("row 1's cube read back as %v, want [[1 <nil>] [3 4] [5 6]]", cube)
	}
	h.compare("mirror of typed", h.pgRows("typed_pg"), filterRows(h.deltaRows(h.snapshot("public.typed"), "typed_pg"), "1 ‖"))

	cl := h.snapshot("public.typed_changes")
	rows, err := cl.ReadRows(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st := cl.Schema()
	_, idIdx := st.Field("id")
	_, replIdx := st.Field(colReplaced)
	_, gridIdx := st.Field("grid")
	_, wordsIdx := st.Field("words")
	replaced := map[int32][]any{}
	for _, r := range rows {
		if l, ok := r[replIdx].([]any); ok {
			replaced[r[idIdx].(int32)] = l
		}
		if r[idIdx].(int32) == 2 {
			if r[gridIdx] != nil || canon(r[wordsIdx], &delta.ArrayType{ElementType: delta.TypeString}) != "{{a,b},{c,d}}" {
				t.Errorf("row 2: grid %v, words %v; want null and the text as its one element", r[gridIdx], r[wordsIdx])
			}
		}
	}
	if got := fmt.Sprint(replaced[2]); got != "[grid words cube]" {
		t.Errorf("row 2 lists %v in _replaced, want [grid words cube]", got)
	}
	if got := replaced[3]; len(got) != 1 || got[0] != "grid" {
		t.Errorf("row 3 lists %v in _replaced, want [grid]", got)
	}
	if got := replaced[1]; got != nil {
		t.Errorf("row 1 lists %v in _replaced, want nothing", got)
	}
}

// filterRows returns the canonical rows that start with prefix.
func filterRows(rows []string, prefix string) []string {
	var out []string
	for _, r := range rows {
		if len(r) >= len(prefix) && r[:len(prefix)] == prefix {
			out = append(out, r)
		}
	}
	return out
}

// deltaRowsRaw reads the latest version of a Delta table as maps of its
// column names to the values delta's reader returns.
func (h *harness) deltaRowsRaw(table string) []map[string]any {
	h.t.Helper()
	s := h.snapshot(table)
	rows, err := s.ReadRows(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	names := s.Schema().FieldNames()
	out := make([]map[string]any, len(rows))
	for i, r := range rows {
		out[i] = map[string]any{}
		for j, n := range names {
			out[i][n] = r[j]
		}
	}
	return out
}
