package applier

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mirrorOf returns the mirror of a source table the applier holds.
func mirrorOf(t *testing.T, a *Applier, name string) *mirror {
	t.Helper()
	st := a.tables[name]
	if st == nil {
		t.Fatalf("the applier holds no table %s", name)
	}
	return st.mirror
}

// orphanFiles returns the data files under a table's directory that no
// commit of its log adds.
func orphanFiles(t *testing.T, dir string) []string {
	t.Helper()
	added := map[string]bool{}
	logs, err := filepath.Glob(filepath.Join(dir, "_delta_log", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range logs {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var action struct {
				Add *struct{ Path string } `json:"add"`
			}
			if err := json.Unmarshal(sc.Bytes(), &action); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if action.Add != nil {
				added[action.Add.Path] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	var orphans []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".parquet") || strings.Contains(path, "_delta_log") {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !added[filepath.ToSlash(rel)] {
			orphans = append(orphans, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return orphans
}

// TestMirrorAppendsInsertsInKeyOrder: inserts above every key of the
// mirror, in key order, are written straight into data files (the pending
// set sees none of them); a flush whose appended rows are followed by
// changes that do not fit merges those changes over the appended files,
// finding unchanged TOAST values there, and commits none of the files it
// rewrote; a few rows in key order go through the pending set, writing no
// file; a column added in the middle ends the appending; inserts after
// changes of lower keys are appended; a TRUNCATE drops what was appended,
// and the rows after it are appended anew. After each flush the mirror
// equals PostgreSQL.
func TestMirrorAppendsInsertsInKeyOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE seq (id int8 PRIMARY KEY, v text, big text);
		ALTER TABLE seq ALTER big SET STORAGE EXTERNAL;`, "seq")
	// Copy-on-write: with deletion vectors the appender never takes the
	// rows of the last file.
	a := h.applier(func(c *Config) { c.TargetFileRows = 1000; c.DeletionVectors = false })
	const dir = "public.seq"
	files := func() int { return h.snapshot(dir).NumFiles() }
	noOrphans := func() {
		t.Helper()
		if o := orphanFiles(t, filepath.Join(h.tablesDir, dir)); len(o) > 0 {
			t.Fatalf("data files no commit adds: %v (appended files the same flush rewrites are deleted)", o)
		}
	}

	var m *mirror
	for _, step := range []struct {
		what, sql string
		// appended is the count of rows appended so far, files the
		// mirror's file count after the step.
		appended int64
		files    int
	}{
		{"a bulk load in key order, in files of 1000, 1000 and 400 rows",
			`INSERT INTO seq SELECT g, 'load ' || g FROM generate_series(1, 2400) g`, 2400, 3},
		{"more in key order, after the rows of the last file, which held less than half of 1000: files of 1000 and 450 replace it",
			`INSERT INTO seq SELECT g, 'more ' || g FROM generate_series(2401, 3450) g`, 3450, 4},
		{"a few rows in key order, merged into the last file as before",
			`INSERT INTO seq SELECT g, 'few ' || g FROM generate_series(3451, 3550) g`, 3450, 4},
	} {
		h.exec(step.sql)
		h.apply(a)
		h.checkMirror("seq")
		m = mirrorOf(t, a, dir)
		if m.appended != step.appended || files() != step.files {
			t.Fatalf("%s: %d rows appended, %d files; want %d and %d", step.what, m.appended, files(), step.appended, step.files)
		}
	}

	// Appended rows, then changes that do not fit, in one flush: the key
	// change of row 4300 keeps its unchanged TOAST value, which only the
	// appended file holds.
	h.exec(`BEGIN`,
		`INSERT INTO seq SELECT g, 'late ' || g, CASE WHEN g = 4300 THEN repeat('toast ', 2000) END FROM generate_series(3551, 4900) g`,
		`UPDATE seq SET v = 'changed' WHERE id = 10`,
		`DELETE FROM seq WHERE id = 4100`,
		`UPDATE seq SET v = 'changed too' WHERE id = 4200`,
		`UPDATE seq SET id = 9000 WHERE id = 4300`,
		`INSERT INTO seq VALUES (5000, 'after')`,
		`COMMIT`)
	h.apply(a)
	h.checkMirror("seq")
	if m.appended != 4800 {
		t.Fatalf("%d rows appended, want 4800: the 1350 inserts before the first update", m.appended)
	}
	var big string
	if err := h.conn.QueryRow(t.Context(), `SELECT big FROM seq WHERE id = 9000`).Scan(&big); err != nil || len(big) != 12000 {
		t.Fatalf("moved row's TOAST value: %d bytes, %v; the test needs 12000", len(big), err)
	}
	noOrphans()

	// A column added between appended inserts of one flush.
	h.exec(`INSERT INTO seq SELECT g, 'before the column' FROM generate_series(9001, 10100) g`,
		`ALTER TABLE seq ADD COLUMN w int4`,
		`INSERT INTO seq VALUES (10101, 'with the column', NULL, 7), (10102, 'also', NULL, 8)`)
	h.apply(a)
	h.checkMirror("seq")
	if m.appended != 5900 {
		t.Fatalf("%d rows appended, want 5900: the 1100 before the new column", m.appended)
	}

	// Changes of lower keys, then a load in key order, in one flush: the
	// load is appended, the changes merged.
	h.exec(`BEGIN; UPDATE seq SET v = 'first' WHERE id = 3; DELETE FROM seq WHERE id = 10102; ` +
		`INSERT INTO seq SELECT g, 'after changes' FROM generate_series(11000, 12099) g; COMMIT`)
	h.apply(a)
	h.checkMirror("seq")
	if m.appended != 7000 {
		t.Fatalf("%d rows appended, want 7000: the 1100 inserts after changes of lower keys", m.appended)
	}

	// Appended rows, then a TRUNCATE, then one row: only that row stays.
	h.exec(`BEGIN`, `INSERT INTO seq SELECT g, 'gone' FROM generate_series(20000, 22500) g`, `TRUNCATE seq`,
		`INSERT INTO seq VALUES (1, 'after truncate')`, `COMMIT`)
	h.apply(a)
	h.checkMirror("seq")
	noOrphans()

	// A reload: a TRUNCATE, then rows in key order, in one flush. The rows
	// are appended, though the committed files hold keys above them, and
	// the last of those files (400 rows) is not taken in. The changes
	// after them are merged over the appended files alone: the key change
	// of row 1500 finds its unchanged TOAST value there, and the insert of
	// row 500 brings back none of the truncated rows around it.
	h.exec(`INSERT INTO seq SELECT g, 'base ' || g FROM generate_series(2, 2400) g`)
	h.apply(a)
	appended := m.appended
	h.exec(`BEGIN`, `TRUNCATE seq`,
		`INSERT INTO seq SELECT g, 'reload ' || g, CASE WHEN g = 1500 THEN repeat('toast ', 2000) END FROM generate_series(1001, 3000) g`,
		`UPDATE seq SET id = 9500 WHERE id = 1500`,
		`INSERT INTO seq VALUES (500, 'below the reload')`,
		`DELETE FROM seq WHERE id = 2000`,
		`COMMIT`)
	h.apply(a)
	h.checkMirror("seq")
	if got := m.appended - appended; got != 2000 {
		t.Fatalf("reload: %d rows appended, want the 2000 after the truncate", got)
	}
	noOrphans()

	// Loads with a TRUNCATE between each, in one flush: each is appended,
	// only the last stays, and no file of the others is left behind.
	appended = m.appended
	h.exec(`BEGIN`, `INSERT INTO seq SELECT g, 'first' FROM generate_series(10001, 11100) g`, `TRUNCATE seq`,
		`INSERT INTO seq SELECT g, 'second' FROM generate_series(20001, 21100) g`, `TRUNCATE seq`,
		`INSERT INTO seq SELECT g, 'third' FROM generate_series(30001, 31100) g`, `COMMIT`)
	h.apply(a)
	h.checkMirror("seq")
	if got := m.appended - appended; got != 3300 {
		t.Fatalf("three loads between truncates: %d rows appended, want 3300", got)
	}
	noOrphans()
	h.checkChangelog("seq", nil)
}

// TestMirrorAppendsInterleavedRanges: inserts that interleave sequences of
// keys in ranges of their own (writers each loading a range) are appended,
// each range into files of its own, as long as there are at most
// maxAppendRuns of them; a key between two runs goes to the lower one; a
// key inside a run's range ends the appending and is merged; more ranges
// than that, or one row twice in a table without a key, go through the
// pending set. After each flush the mirror equals PostgreSQL.
func TestMirrorAppendsInterleavedRanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE ranges (id int8 PRIMARY KEY, v text);
		CREATE TABLE bag (a int8, b text);
		ALTER TABLE bag REPLICA IDENTITY FULL;`, "ranges", "bag")
	a := h.applier(func(c *Config) { c.TargetFileRows = 1000 })
	const dir = "public.ranges"

	// interleave inserts n rows of ranges ranges, of 1M keys each from
	// base, one of each range after the other.
	interleave := func(base, ranges, n int) string {
		return fmt.Sprintf(`INSERT INTO ranges SELECT %d + (g %% %d) * 1000000 + g / %d, 'row ' || g
			FROM generate_series(0, %d) g ORDER BY g`, base, ranges, ranges, n-1)
	}
	var m *mirror
	for _, step := range []struct {
		what  string
		sqls  []string
		table string
		// appended is the count of rows appended so far, files the
		// mirror's file count after the step.
		appended int64
		files    int
	}{
		{"4 ranges of 2000 rows, interleaved: 2 files each",
			[]string{interleave(0, 4, 8000)}, dir, 8000, 8},
		{"5 ranges interleaved, more than maxAppendRuns: merged",
			[]string{interleave(10_000_000, 5, 5000)}, dir, 8000, 13},
		{"2 ranges interleaved, then a key between them, appended to the lower, and one inside a range, merged with the rest",
			[]string{`BEGIN`, interleave(20_000_000, 2, 3000),
				`INSERT INTO ranges VALUES (20500000, 'between')`,
				`INSERT INTO ranges VALUES (20400000, 'inside'), (21001500, 'after')`,
				`COMMIT`}, dir, 11001, 18},
	} {
		h.exec(step.sqls...)
		h.apply(a)
		h.checkMirror("ranges")
		m = mirrorOf(t, a, step.table)
		if files := h.snapshot(step.table).NumFiles(); m.appended != step.appended || files != step.files {
			t.Fatalf("%s: %d rows appended, %d files; want %d and %d", step.what, m.appended, files, step.appended, step.files)
		}
	}
	if o := orphanFiles(t, filepath.Join(h.tablesDir, dir)); len(o) > 0 {
		t.Fatalf("data files no commit adds: %v", o)
	}

	// Rows twice among the first rows of a table without a key: the
	// copies are kept, through the pending set.
	h.exec(`INSERT INTO bag SELECT g, 'copy' FROM generate_series(1, 2000) g`,
		`INSERT INTO bag VALUES (5000, 'twice'), (5000, 'twice')`)
	h.apply(a)
	h.checkMirror("bag")
	h.exec(`INSERT INTO bag SELECT 6000 + g % 2, 'twice' FROM generate_series(1, 1200) g ORDER BY g`)
	h.apply(a)
	h.checkMirror("bag")
	if n := mirrorOf(t, a, "public.bag").appended; n != 2001 {
		t.Fatalf("%d rows of bag appended, want 2001: the first copy of (5000, twice) ends the first flush's run, the second is merged, and the alternating copies go through the pending set", n)
	}
	h.checkChangelog("ranges", nil)
}
