package applier

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lakeside/lakeside/store"
)

// TestTableNamesNeverBecomePaths captures through a publication FOR ALL
// TABLES, beside tables a hostile owner names "../../../pwned" and renames
// to "/../public.stock": only the configured tables get Delta tables, each
// in a directory inside the tables directory named safely after its
// configured name (a configured name with a slash and dots too), a table
// renamed to another's name does not reach that table's mirror, and a
// renamed configured table goes on into its own, found by its OID.
func TestTableNamesNeverBecomePaths(t *testing.T) {
	h := newHarness(t, `
		CREATE TABLE stock (id int PRIMARY KEY, qty int);
		CREATE TABLE other (id int PRIMARY KEY, secret text);
		CREATE TABLE "we/ird ..name" (id int PRIMARY KEY, v text);
		CREATE TABLE "../../../pwned" (id int PRIMARY KEY);
		INSERT INTO stock SELECT g, g FROM generate_series(1, 10) g;
		INSERT INTO "we/ird ..name" VALUES (1, 'a');
		CREATE PUBLICATION lakeside_test FOR ALL TABLES;`, "stock", "we/ird ..name")
	a := h.applier()
	h.exec(`INSERT INTO "../../../pwned" VALUES (1)`,
		`ALTER TABLE other RENAME TO "/../public.stock"`,
		`INSERT INTO "/../public.stock" VALUES (99, 'leak')`,
		`UPDATE stock SET qty = qty + 1 WHERE id <= 3`,
		`INSERT INTO "we/ird ..name" VALUES (2, 'b')`,
		`ALTER TABLE stock RENAME TO stock_renamed`,
		`INSERT INTO stock_renamed VALUES (11, 11)`,
		`DELETE FROM stock_renamed WHERE id = 1`)
	h.apply(a)

	weird := store.TableDirName("public", "we/ird ..name")
	if weird != "public.we%2Fird%20%2E%2Ename" {
		t.Errorf("directory of public.\"we/ird ..name\": %q", weird)
	}
	dirs := h.tableDirs()
	want := []string{"public.stock", "public.stock_changes", weird, weird + "_changes"}
	slices.Sort(want)
	if !slices.Equal(dirs, want) {
		t.Errorf("tables directory holds %v, want %v", dirs, want)
	}
	for _, p := range []string{filepath.Join(h.tablesDir, "../../../pwned"), filepath.Join(filepath.Dir(h.tablesDir), "public.stock")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists: a table name became a path", p)
		}
	}
	h.compare("mirror of public.stock", h.pgRows("stock_renamed"), h.deltaRows(h.snapshot("public.stock"), "stock_renamed"))
	h.compare("mirror of "+weird, h.pgRows(`"we/ird ..name"`), h.deltaRows(h.snapshot(weird), `"we/ird ..name"`))
	if n := h.src.Status().IgnoredChanges; n < 2 {
		t.Errorf("%d changes of tables not configured were counted, want at least 2", n)
	}
}
