package applier

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestChangeDataFeedReproducesPostgreSQLChanges applies a workload of
// inserts, updates (key changes too), deletes and a truncate one statement
// per flush, with the change data feed turned on after the first flush,
// and compares the changes a change data reader gets from each mirror
// version with the difference PostgreSQL's table shows across the
// statement: a row only before is a delete, only after an insert, a row
// whose values changed an update pre- and post-image.
func TestChangeDataFeedReproducesPostgreSQLChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE c (id int PRIMARY KEY, v text, n int);
		INSERT INTO c SELECT g, 'v' || g, g FROM generate_series(1, 50) g;`, "c")
	small := func(c *Config) { c.TargetFileRows = 20 }
	h.apply(h.applier(small))
	if s := h.snapshot("public.c"); delta.ChangeDataFeedEnabled(s.Metadata()) {
		t.Fatal("change data feed on before it was turned on")
	}
	a := h.applier(small, func(c *Config) { c.ChangeDataFeed = true })
	tbl, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.c"))
	if err != nil {
		t.Fatal(err)
	}
	// cdc says whether a version must have change data files: yes where
	// rows of committed files change, no for a truncate (its removes are
	// its deletes); inserts have them when they rewrite a file.
	const yes, no, either = 1, -1, 0
	// ddl, run before the rows before are read, changes no row in
	// PostgreSQL: the mirror's REWRITE for it (the column's default
	// filled in) has dataChange false and no changes.
	steps := []struct {
		ddl, sql string
		cdc      int
	}{
		{"", `UPDATE c SET v = 'u' || id WHERE id % 7 = 0`, yes},
		{"", `INSERT INTO c SELECT g, 'new' || g, g FROM generate_series(51, 60) g`, either},
		{"", `INSERT INTO c SELECT g, 'far' || g, g FROM generate_series(1000, 1100) g`, either},
		{"", `INSERT INTO c SELECT g, 'tail' || g, g FROM generate_series(2000, 2100) g`, either},
		{"", `UPDATE c SET n = n + 1 WHERE id IN (SELECT id FROM c ORDER BY random() LIMIT 9)`, yes},
		{"", `DELETE FROM c WHERE id % 5 = 0`, yes},
		{"", `UPDATE c SET id = id + 10000, n = -n WHERE id % 11 = 1`, yes},
		{"", `UPDATE c SET n = NULL WHERE id BETWEEN 20 AND 30`, yes},
		{"", `DELETE FROM c WHERE id = 4242`, either},
		{"", `TRUNCATE c`, no},
		{"", `INSERT INTO c SELECT g, 'again' || g, g FROM generate_series(1, 30) g`, either},
		{"", `UPDATE c SET v = NULL WHERE id < 3`, yes},
		{`ALTER TABLE c ADD COLUMN d int DEFAULT 7`, `UPDATE c SET v = 'w' WHERE id = 5`, yes},
	}
	for i, st := range steps {
		if st.ddl != "" {
			h.exec(st.ddl)
		}
		before := h.pgRows("c")
		from := h.snapshot("public.c").Version() + 1
		h.exec(st.sql)
		h.apply(a)
		to := h.snapshot("public.c").Version()
		if to < from {
			if want := diffRows(before, h.pgRows("c")); len(want) > 0 {
				t.Fatalf("step %d (%s): no mirror version for %d changes", i, st.sql, len(want))
			}
			continue
		}
		files, err := tbl.ChangeFiles(context.Background(), from, to)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.sql, err)
		}
		hasCDC := false
		for _, f := range files {
			hasCDC = hasCDC || len(f.CDC) > 0
		}
		if st.cdc == yes && !hasCDC || st.cdc == no && hasCDC {
			t.Errorf("step %d (%s): change data files %v", i, st.sql, hasCDC)
		}
		h.compare("changes of step "+st.sql, diffRows(before, h.pgRows("c")), h.changeRows(tbl, from, to, "c"))
	}
	s := h.snapshot("public.c")
	if !delta.ChangeDataFeedEnabled(s.Metadata()) || s.Protocol().MinWriterVersion < 4 {
		t.Fatalf("mirror metadata %v, protocol %+v", s.Metadata().Configuration, s.Protocol())
	}
	h.checkMirror("c")
}

// changeRows returns the changes of versions from to to of a mirror as
// "<change type> ‖ <row>", with the columns of the PostgreSQL table and
// then the mirror's extra columns, sorted.
func (h *harness) changeRows(tbl *delta.Table, from, to int64, table string, extra ...string) []string {
	h.t.Helper()
	changes, err := tbl.ReadChanges(context.Background(), from, to)
	if err != nil {
		h.t.Fatal(err)
	}
	s := h.snapshot("public." + table)
	st := s.Schema()
	cols := h.pgColumns(table)
	for _, e := range extra {
		cols = append(cols, pgColumn{name: e})
	}
	var out []string
	for _, c := range changes {
		parts := []string{c.Type}
		for _, col := range cols {
			f, j := st.Field(col.name)
			if f == nil {
				h.t.Fatalf("mirror has no column %q", col.name)
			}
			var v any
			if j < len(c.Row) {
				v = c.Row[j] // a version before the column has no value
			}
			parts = append(parts, canon(v, f.Type))
		}
		out = append(out, strings.Join(parts, " ‖ "))
	}
	slices.Sort(out)
	return out
}

// diffRows returns the changes that turn the rows before into the rows
// after, both canonical rows whose first column is the key, as
// changeRows renders them, sorted.
func diffRows(before, after []string) []string {
	byKey := func(rows []string) map[string]string {
		m := map[string]string{}
		for _, r := range rows {
			k, _, _ := strings.Cut(r, " ‖ ")
			m[k] = r
		}
		return m
	}
	b, a := byKey(before), byKey(after)
	var out []string
	for k, r := range b {
		switch n, ok := a[k]; {
		case !ok:
			out = append(out, delta.ChangeDelete+" ‖ "+r)
		case n != r:
			out = append(out, delta.ChangeUpdatePreimage+" ‖ "+r, delta.ChangeUpdatePostimage+" ‖ "+n)
		}
	}
	for k, r := range a {
		if _, ok := b[k]; !ok {
			out = append(out, delta.ChangeInsert+" ‖ "+r)
		}
	}
	slices.Sort(out)
	return out
}

// TestChangeDataFeedOfSoftDeletes: with soft delete, a delete in
// PostgreSQL is an update of the mirror's _deleted from false to true, and
// an insert of a soft-deleted key one from true to false with the new
// values; other changes are as without soft delete.
func TestChangeDataFeedOfSoftDeletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE s (id int PRIMARY KEY, v text);
		INSERT INTO s SELECT g, 'v' || g FROM generate_series(1, 2000) g;`, "s")
	a := h.applier(func(c *Config) { c.TargetFileRows = 300; c.SoftDelete = true; c.ChangeDataFeed = true })
	h.apply(a)
	tbl, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.s"))
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot into the new mirror went through the appender and
	// reads as the inserts of every row.
	if m := mirrorOf(t, a, "public.s"); m.appended == 0 {
		t.Fatal("the snapshot of a new mirror was not appended")
	}
	var inserts []string
	for _, r := range h.pgRows("s") {
		inserts = append(inserts, delta.ChangeInsert+" ‖ "+r+" ‖ false")
	}
	h.compare("changes of the snapshot", inserts, h.changeRows(tbl, 0, h.snapshot("public.s").Version(), "s", colDeleted))
	// gone holds the rows soft-deleted in the mirror, by key.
	gone := map[string]string{}
	for _, sql := range []string{
		`DELETE FROM s WHERE id % 4 = 0`,
		`UPDATE s SET v = 'u' || id WHERE id % 3 = 0`,
		`INSERT INTO s SELECT g, 'back' || g FROM generate_series(4, 1200, 8) g`,
		`INSERT INTO s VALUES (2001, 'new'), (0, 'low')`,
		`UPDATE s SET id = id + 10000 WHERE id = 5`,
	} {
		before := h.pgRows("s")
		from := h.snapshot("public.s").Version() + 1
		h.exec(sql)
		h.apply(a)
		var want []string
		for _, c := range diffRows(before, h.pgRows("s")) {
			typ, row, _ := strings.Cut(c, " ‖ ")
			k, _, _ := strings.Cut(row, " ‖ ")
			switch typ {
			case delta.ChangeDelete:
				want = append(want, delta.ChangeUpdatePreimage+" ‖ "+row+" ‖ false", delta.ChangeUpdatePostimage+" ‖ "+row+" ‖ true")
				gone[k] = row
			case delta.ChangeInsert:
				if old, ok := gone[k]; ok {
					want = append(want, delta.ChangeUpdatePreimage+" ‖ "+old+" ‖ true", delta.ChangeUpdatePostimage+" ‖ "+row+" ‖ false")
					delete(gone, k)
					continue
				}
				want = append(want, c+" ‖ false")
			default:
				want = append(want, c+" ‖ false")
			}
		}
		slices.Sort(want)
		h.compare("changes of "+sql, want, h.changeRows(tbl, from, h.snapshot("public.s").Version(), "s", colDeleted))
	}
	h.checkMirror("s")
}

// TestChangeDataFeedOfMultiset: a mirror of a table without a key holds
// copies of rows; its changes are the copies gained (inserts) and lost
// (deletes), an update one of each.
func TestChangeDataFeedOfMultiset(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE m (a int, b text);
		ALTER TABLE m REPLICA IDENTITY FULL;
		INSERT INTO m SELECT g % 10, 'b' || (g % 3) FROM generate_series(1, 60) g;`, "m")
	a := h.applier(func(c *Config) { c.TargetFileRows = 8; c.ChangeDataFeed = true })
	h.apply(a)
	tbl, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.m"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		`INSERT INTO m VALUES (1, 'b1'), (1, 'b1'), (5, 'x')`,
		`DELETE FROM m WHERE ctid IN (SELECT ctid FROM m WHERE a = 2 LIMIT 2)`,
		`UPDATE m SET b = 'u' WHERE a = 3`,
		`DELETE FROM m WHERE a = 4`,
	} {
		before := h.pgRows("m")
		from := h.snapshot("public.m").Version() + 1
		h.exec(sql)
		h.apply(a)
		count := map[string]int{}
		for _, r := range before {
			count[r]--
		}
		for _, r := range h.pgRows("m") {
			count[r]++
		}
		var want []string
		for r, n := range count {
			for ; n > 0; n-- {
				want = append(want, delta.ChangeInsert+" ‖ "+r)
			}
			for ; n < 0; n++ {
				want = append(want, delta.ChangeDelete+" ‖ "+r)
			}
		}
		slices.Sort(want)
		h.compare("changes of "+sql, want, h.changeRows(tbl, from, h.snapshot("public.m").Version(), "m"))
	}
	h.checkMirror("m")
}

// TestChangeDataFeedOfANewMirror fills an empty mirror in one transaction
// that inserts rows in key order, which the appender writes, then
// changes some of them: the flush's merge rewrites appended files that
// no version holds yet, and the version reads as the inserts of the rows
// PostgreSQL holds at its end. The next flush is fed as usual.
func TestChangeDataFeedOfANewMirror(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE n (id int PRIMARY KEY, v text);`, "n")
	a := h.applier(func(c *Config) { c.TargetFileRows = 500; c.ChangeDataFeed = true })
	h.apply(a)
	var tbl *delta.Table
	for _, sqls := range [][]string{
		{`BEGIN`, `INSERT INTO n SELECT g, 'v' || g FROM generate_series(1, 3000) g`,
			`UPDATE n SET v = 'u' WHERE id % 100 = 0`, `DELETE FROM n WHERE id % 70 = 0`,
			`UPDATE n SET id = id + 5000 WHERE id % 333 = 0`, `COMMIT`},
		{`UPDATE n SET v = 'w' WHERE id % 90 = 1`, `DELETE FROM n WHERE id BETWEEN 1000 AND 1010`},
	} {
		before := h.pgRows("n")
		from := int64(0) // the mirror is created by its first change
		if tbl != nil {
			from = h.snapshot("public.n").Version() + 1
		}
		h.exec(sqls...)
		h.apply(a)
		if tbl == nil {
			var err error
			if tbl, err = delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.n")); err != nil {
				t.Fatal(err)
			}
		}
		h.compare("changes of "+strings.Join(sqls, "; "), diffRows(before, h.pgRows("n")), h.changeRows(tbl, from, h.snapshot("public.n").Version(), "n"))
	}
	if m := mirrorOf(t, a, "public.n"); m.appended == 0 {
		t.Fatal("the rows of the new mirror were not appended")
	}
	h.checkMirror("n")
}
