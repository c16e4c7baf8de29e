package applier

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// TestDataColumnNames gives a table's columns Delta names that no reader
// takes for one another or for a column it adds: names the applier uses
// and change data feed readers add, case aside, get "__col"; names equal
// case aside get "__col", "__col2"…; a column keeps its name while it is
// still one of its own, whatever happens to the others.
func TestDataColumnNames(t *testing.T) {
	c := newColumns(typemap.New(), slog.New(slog.DiscardHandler), noWarnings{})
	rel := func(names ...string) *store.Relation {
		r := &store.Relation{Key: store.RelationKey{OID: 7, LSN: store.LSN(len(c.cols) + 1)}}
		for _, n := range names {
			attnum := len(r.Columns) + 1
			if i := strings.IndexByte(n, '@'); i >= 0 {
				n, attnum = n[:i], int(n[i+1]-'0')
			}
			r.Columns = append(r.Columns, store.Column{Name: n, AttNum: attnum, TypeOID: 25})
		}
		return r
	}
	check := func(r *store.Relation, want ...string) {
		t.Helper()
		got := c.names(r)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("names of %v: %v, want %v", r.Columns, got, want)
		}
		c.evolve(r)
	}
	check(rel("id", "_op", "_op__col", "A", "a", "_change_type", "_Commit_Version", "_LSN", "x__col"),
		"id", "_op__col", "_op__col__col", "A", "a__col", "_change_type__col", "_Commit_Version__col", "_LSN__col", "x__col")
	// "A" (attnum 4) is dropped: "a" keeps its name; a new "A" takes the
	// name free again.
	check(rel("id@1", "_op@2", "_op__col@3", "a@5", "A@9"),
		"id", "_op__col", "_op__col__col", "a__col", "A")
	// A third column of the same name, case aside.
	check(rel("id@1", "a@5", "A@9", "a_@7", "A@8"), "id", "a__col", "A", "a_", "A__col2")
	// Renamed in PostgreSQL: the name follows, the others stay.
	check(rel("id@1", "b@5", "A@9"), "id", "b", "A")
}

func TestNameForms(t *testing.T) {
	for _, tc := range []struct {
		name, base string
		want       bool
	}{
		{"a", "a", true}, {"a__col", "a", true}, {"a__col2", "a", true}, {"a__col17", "a", true},
		{"a__col1", "a", false}, {"a__col02", "a", false}, {"a__colx", "a", false}, {"A", "a", false}, {"ab", "a", false},
	} {
		if got := nameForms(tc.name, tc.base); got != tc.want {
			t.Errorf("nameForms(%q, %q) = %v, want %v", tc.name, tc.base, got, tc.want)
		}
	}
}

// TestClashingColumnNamesKeepTheirValues captures a table whose column
// names clash with the applier's and the change data feed's, and with
// each other case aside, with the change data feed on: both Delta tables
// name every column once (case aside), every value is where its column
// went, and the names hold after a restart and a dropped column.
func TestClashingColumnNamesKeepTheirValues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE clash (id int PRIMARY KEY, "_op" text, "_op__col" text, "A" text, "a" text,
			"_change_type" text, "_Commit_Version" text, "_LSN" int);
		INSERT INTO clash VALUES (1, 'a', 'b', 'upper', 'lower', 'ct', 'cv', 7);`, "clash")
	cdf := func(c *Config) { c.ChangeDataFeed = true }
	h.apply(h.applier(cdf))
	h.exec(`UPDATE clash SET "_op" = 'a2', "a" = 'lower2' WHERE id = 1`,
		`INSERT INTO clash VALUES (2, 'x', 'y', 'U', 'L', 'c', 'v', 8)`)
	h.apply(h.applier(cdf))
	h.exec(`CREATE VIEW clash_named AS SELECT id, "_op" AS "_op__col", "_op__col" AS "_op__col__col", "A", "a" AS "a__col",
		"_change_type" AS "_change_type__col", "_Commit_Version" AS "_Commit_Version__col", "_LSN" AS "_LSN__col" FROM clash`)
	uniqueFolded := func(table string) {
		t.Helper()
		seen := map[string]string{}
		for _, f := range h.snapshot(table).Schema().Fields {
			if prev, ok := seen[strings.ToLower(f.Name)]; ok {
				t.Fatalf("%s has columns %q and %q", table, prev, f.Name)
			}
			seen[strings.ToLower(f.Name)] = f.Name
		}
	}
	uniqueFolded("public.clash")
	uniqueFolded("public.clash_changes")
	h.compare("mirror of clash", h.pgRows("clash_named"), h.deltaRows(h.snapshot("public.clash"), "clash_named"))

	// A restart (a new applier) and a dropped column rename nothing.
	h.exec(`DROP VIEW clash_named`, `ALTER TABLE clash DROP COLUMN "A"`, `UPDATE clash SET "a" = 'after' WHERE id = 2`,
		`CREATE OR REPLACE VIEW clash_named2 AS SELECT id, "_op" AS "_op__col", "_op__col" AS "_op__col__col", "a" AS "a__col",
		"_change_type" AS "_change_type__col", "_Commit_Version" AS "_Commit_Version__col", "_LSN" AS "_LSN__col" FROM clash`)
	h.apply(h.applier(cdf))
	uniqueFolded("public.clash")
	h.compare("mirror of clash after the drop", h.pgRows("clash_named2"), h.deltaRows(h.snapshot("public.clash"), "clash_named2"))
}
