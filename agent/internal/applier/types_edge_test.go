package applier

import (
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestDomainsMoneyAndArraysKeepTheirTypes captures columns whose types
// capture once kept as one string per value: a domain (and a domain over
// a domain) gets its base type, money a decimal of two places, an array of
// an enum or a composite type array<string>, an array of a domain the
// array of its base type. Their values equal PostgreSQL's, and a
// multi-dimensional array, which a list cannot hold, is listed in
// _replaced rather than flattened.
func TestDomainsMoneyAndArraysKeepTheirTypes(t *testing.T) {
	h := newHarness(t, `
		CREATE DOMAIN price AS numeric(8,2) CHECK (VALUE >= 0);
		CREATE DOMAIN dear AS price CHECK (VALUE > 100);
		CREATE DOMAIN qty AS int;
		CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TYPE pair AS (a int, b text);
		CREATE TABLE typed (id int PRIMARY KEY, p price, d dear, q qty, m money, moods mood[], pairs pair[], qs qty[],
			grid int[], words text[]);
		INSERT INTO typed VALUES
			(1, 12.5, 150, 7, '-1234.56', '{sad,happy}', ARRAY[ROW(1,'x')::pair, NULL], '{1,2}', '{1,2,3}', '{a,b}'),
			(2, 0, 101, NULL, '92233720368547758.07', '{}', NULL, NULL, '{{1,2},{3,4}}', '{{a,b},{c,d}}');`, "typed")
	a := h.applier()
	h.apply(a)
	h.exec(`UPDATE typed SET m = m + '1.01', moods = '{ok}' WHERE id = 1`, `INSERT INTO typed (id, grid) VALUES (3, '[0:1]={5,6}')`)
	h.apply(a)

	schema := h.snapshot("public.typed").Schema()
	want := map[string]string{
		"p": "decimal(8,2)", "d": "decimal(8,2)", "q": "integer", "m": "decimal(19,2)",
		"moods": "array<string>", "pairs": "array<string>", "qs": "array<integer>", "grid": "array<integer>", "words": "array<string>",
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
	if got := replaced[2]; len(got) != 2 || got[0] != "grid" || got[1] != "words" {
		t.Errorf("row 2 lists %v in _replaced, want [grid words]", got)
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
