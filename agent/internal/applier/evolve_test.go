package applier

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// TestSchemaChangesFollowTheTable runs each schema change a migration makes
// with changes before and after it, and compares the mirror with the
// PostgreSQL table, column by column under its names now, after each; the
// changelog keeps every change once, under the columns' names now.
func TestSchemaChangesFollowTheTable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE add_default (id int4 PRIMARY KEY, v text);
		CREATE TABLE key_type (id int4 PRIMARY KEY, v text);
		CREATE TABLE col_type (id int4 PRIMARY KEY, a int4, n numeric(6,2));
		CREATE TABLE col_text (id int4 PRIMARY KEY, c int4);
		CREATE TABLE renamed (id int4 PRIMARY KEY, c text, d int4);
		CREATE TABLE new_key (id int4 PRIMARY KEY, code text NOT NULL, v int4);
		CREATE TABLE no_key (who text, what int4);
		ALTER TABLE no_key REPLICA IDENTITY FULL;
		CREATE TABLE readded (id int4 PRIMARY KEY, c text);
		CREATE TABLE key_renamed (id int4 PRIMARY KEY, v text);
		CREATE TABLE index_identity (id int4 PRIMARY KEY, code text NOT NULL, v int4);
		CREATE UNIQUE INDEX index_identity_code ON index_identity (code);`,
		"add_default", "key_type", "col_type", "col_text", "renamed", "new_key", "no_key", "readded", "key_renamed", "index_identity")
	a := h.applier()
	h.exec(`INSERT INTO add_default SELECT g, 'v' || g FROM generate_series(1, 50) g`,
		`INSERT INTO key_type SELECT g, 'v' || g FROM generate_series(1, 50) g`,
		`INSERT INTO col_type SELECT g, g * 1000, g / 8.0 FROM generate_series(1, 50) g`,
		`INSERT INTO col_text SELECT g, g FROM generate_series(1, 50) g`,
		`INSERT INTO renamed SELECT g, 'c' || g, g FROM generate_series(1, 50) g`,
		`INSERT INTO new_key SELECT g, 'k' || g, g FROM generate_series(1, 50) g`,
		`INSERT INTO no_key SELECT 'w' || (g % 5), g % 3 FROM generate_series(1, 30) g`,
		`INSERT INTO readded SELECT g, 'old' || g FROM generate_series(1, 10) g`,
		`INSERT INTO key_renamed SELECT g, 'v' || g FROM generate_series(1, 50) g`,
		`INSERT INTO index_identity SELECT g, 'k' || g, g FROM generate_series(1, 50) g`)
	h.apply(a)

	columnsOf := func(table string) []string {
		var out []string
		for _, f := range h.snapshot("public." + table).Schema().Fields {
			out = append(out, f.Name)
		}
		return out
	}
	noShadow := func(table string) {
		t.Helper()
		for _, name := range []string{table, table + "_changes"} {
			for _, c := range columnsOf(name) {
				if strings.Contains(c, "__") {
					t.Errorf("%s has a shadow column %q: %v", name, c, columnsOf(name))
				}
			}
		}
	}
	steps := []struct {
		name, table string
		sql         []string
	}{
		{"add column with a constant default", "add_default", []string{
			`ALTER TABLE add_default ADD COLUMN d int DEFAULT 7`,
			`UPDATE add_default SET v = 'u' WHERE id = 1`,
			`INSERT INTO add_default VALUES (100, 'n', 8)`}},
		{"key column type change", "key_type", []string{
			`UPDATE key_type SET v = 'before' WHERE id = 2`,
			`ALTER TABLE key_type ALTER COLUMN id TYPE bigint`,
			`INSERT INTO key_type VALUES (5000000000, 'big')`,
			`UPDATE key_type SET v = 'after' WHERE id IN (3, 5000000000)`,
			`DELETE FROM key_type WHERE id = 4`,
			`UPDATE key_type SET id = 6000000000 WHERE id = 5`}},
		{"non-key column type change", "col_type", []string{
			`ALTER TABLE col_type ALTER COLUMN a TYPE bigint, ALTER COLUMN n TYPE numeric(12,3)`,
			`UPDATE col_type SET a = a * 10000000 WHERE id <= 3`,
			`INSERT INTO col_type VALUES (100, 1, 1.125)`}},
		{"column renamed", "renamed", []string{
			`ALTER TABLE renamed RENAME COLUMN c TO c2`,
			`UPDATE renamed SET d = -d WHERE id <= 5`,
			`ALTER TABLE renamed RENAME COLUMN d TO c`,
			`INSERT INTO renamed VALUES (100, 'x', 1)`}},
		{"primary key replaced", "new_key", []string{
			`ALTER TABLE new_key DROP CONSTRAINT new_key_pkey`,
			`ALTER TABLE new_key ADD PRIMARY KEY (code)`,
			`UPDATE new_key SET v = -v WHERE code IN ('k1', 'k2')`,
			`DELETE FROM new_key WHERE code = 'k3'`,
			`UPDATE new_key SET id = 7 WHERE code = 'k8'`,
			`INSERT INTO new_key VALUES (1, 'dup-id', 0)`}},
		{"table without a key: column dropped and added", "no_key", []string{
			`ALTER TABLE no_key ADD COLUMN extra int DEFAULT 1`,
			`DELETE FROM no_key WHERE ctid = (SELECT min(ctid) FROM no_key WHERE who = 'w1')`,
			`UPDATE no_key SET what = 9 WHERE who = 'w2'`,
			`ALTER TABLE no_key DROP COLUMN what`,
			`DELETE FROM no_key WHERE ctid = (SELECT min(ctid) FROM no_key WHERE who = 'w3')`,
			`UPDATE no_key SET extra = 5 WHERE who = 'w4'`}},
		{"column dropped and added again", "readded", []string{
			`ALTER TABLE readded DROP COLUMN c`,
			`ALTER TABLE readded ADD COLUMN c int`,
			`INSERT INTO readded VALUES (100, 100)`,
			`UPDATE readded SET c = id WHERE id <= 3`}},
		{"key column renamed", "key_renamed", []string{
			`UPDATE key_renamed SET v = 'before' WHERE id = 2`,
			`ALTER TABLE key_renamed RENAME COLUMN id TO kid`,
			`UPDATE key_renamed SET v = 'after' WHERE kid IN (2, 3)`,
			`DELETE FROM key_renamed WHERE kid = 4`,
			`UPDATE key_renamed SET kid = 1000 WHERE kid = 5`,
			`INSERT INTO key_renamed VALUES (2000, 'new')`}},
		{"replica identity moved to a unique index", "index_identity", []string{
			`ALTER TABLE index_identity REPLICA IDENTITY USING INDEX index_identity_code`,
			`UPDATE index_identity SET v = -v WHERE code IN ('k1', 'k2')`,
			`DELETE FROM index_identity WHERE code = 'k3'`,
			`UPDATE index_identity SET code = 'k3' WHERE code = 'k4'`,
			`UPDATE index_identity SET id = 700 WHERE code = 'k8'`,
			`INSERT INTO index_identity VALUES (800, 'k800', 0)`}},
		{"column type change to text", "col_text", []string{
			`ALTER TABLE col_text ALTER COLUMN c TYPE text`,
			`UPDATE col_text SET c = 'x' || c WHERE id <= 2`,
			`INSERT INTO col_text VALUES (100, 'hundred')`}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			h.exec(s.sql...)
			h.apply(a)
			h.checkMirror(s.table)
			noShadow(s.table)
			// The changelog keeps every change once (checkChangelog
			// fails on a change held twice) and reads under the
			// names the table has now.
			rows := h.checkChangelog(s.table, nil)
			st := h.snapshot("public." + s.table + "_changes").Schema()
			for _, c := range h.pgColumns(s.table) {
				if f, _ := st.Field(c.name); f == nil {
					t.Errorf("changelog of %s lacks column %s: %s", s.table, c.name, st)
				}
			}
			if len(rows) == 0 {
				t.Errorf("changelog of %s is empty", s.table)
			}
		})
	}

	// A DDL with no row change after it: the catalog watcher records the
	// version, and the idle applier brings the tables to it.
	t.Run("schema change without a row change", func(t *testing.T) {
		h.exec(`ALTER TABLE add_default ADD COLUMN e text DEFAULT 'dflt'`, `ALTER TABLE renamed RENAME COLUMN c2 TO c3`)
		for _, want := range [][2]string{{"add_default", "e"}, {"renamed", "c3"}} {
			h.waitVersionWith(want[0], want[1])
		}
		h.apply(a)
		h.checkMirror("add_default")
		h.checkMirror("renamed")
		if f, _ := h.snapshot("public.renamed_changes").Schema().Field("c3"); f == nil {
			t.Errorf("renamed_changes has no column c3")
		}
	})

	// The history keeps its values under the names and types now.
	t.Run("changelog history", func(t *testing.T) {
		valuesOf := func(table, column, op string) []any {
			s := h.snapshot("public." + table + "_changes")
			rows, err := s.ReadRows(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, i := s.Schema().Field(column)
			_, o := s.Schema().Field(colOp)
			if i < 0 {
				t.Fatalf("%s_changes has no column %s", table, column)
			}
			var out []any
			for _, r := range rows {
				if r[o] == op {
					out = append(out, r[i])
				}
			}
			return out
		}
		// Rows inserted while the column was c show it under c3.
		if got := valuesOf("renamed", "c3", "insert"); !slices.Contains(got, any("c7")) {
			t.Errorf("renamed: history of c3 = %v, want c7 among them", got)
		}
		// The int4 values inserted before the change are longs now.
		if got := valuesOf("col_type", "a", "insert"); !slices.Contains(got, any(int64(7000))) {
			t.Errorf("col_type: history of a = %v, want 7000 as a long", got)
		}
		if f, _ := h.snapshot("public.key_type_changes").Schema().Field("id"); f == nil || f.Type != delta.TypeLong {
			t.Errorf("key_type_changes.id = %v, want long", f)
		}
	})
}

// TestTableWrittenBeforeColumnMappingIsSwitched opens a mirror written
// without column mapping, as earlier versions wrote it: the applier
// switches it to column mapping in a commit of its own, its files read as
// they are, and a rename then changes only the schema. It takes deletion
// vectors in a commit of its own too, and its legacy file keeps a row
// while a deletion vector deletes the other.
func TestTableWrittenBeforeColumnMappingIsSwitched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, `CREATE TABLE items (id int4 PRIMARY KEY, v text)`, "items")
	path := filepath.Join(h.tablesDir, "public.items")
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
	schema := delta.NewStructType(delta.NewField("id", delta.TypeInteger, true), delta.NewField("v", delta.TypeString, true))
	tbl, err := delta.Create(ctx, path, schema, nil, map[string]string{confKey: `["id"]`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	add, err := delta.WriteDataFile(ctx, path, schema, nil, nil,
		[]delta.Row{{int32(1), "old1"}, {int32(2), "old2"}}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	add.Tags = map[string]string{
		tagMinKey: hex.EncodeToString(typemap.AppendKey(nil, []any{int32(1)})),
		tagMaxKey: hex.EncodeToString(typemap.AppendKey(nil, []any{int32(2)})),
	}
	if _, err := tbl.Commit(ctx, 0, []delta.Action{add}); err != nil {
		t.Fatal(err)
	}
	h.exec(`INSERT INTO items VALUES (1, 'new1'), (3, 'new3')`)
	a := h.applier()
	h.apply(a)
	snap := h.snapshot("public.items")
	if p := snap.Protocol(); !slices.Contains(p.ReaderFeatures, delta.ColumnMappingFeature) || snap.ColumnMappingMode() != delta.ColumnMappingName ||
		!delta.DeletionVectorsEnabled(p, snap.Metadata()) {
		t.Fatalf("protocol %+v, mode %q: want column mapping in mode name and deletion vectors", p, snap.ColumnMappingMode())
	}
	if files := snap.Files(); !slices.ContainsFunc(files, func(f *delta.Add) bool { return f.Path == add.Path && f.DeletionVector != nil }) {
		t.Fatalf("files %v: want the legacy file with a deletion vector", files)
	}
	for _, f := range snap.Schema().Fields {
		if f.PhysicalName() != f.Name {
			t.Errorf("field %s has physical name %s, want its name", f.Name, f.PhysicalName())
		}
	}
	// The legacy file's row 2 stays; rows 1 and 3 are PostgreSQL's.
	h.exec(`INSERT INTO items VALUES (2, 'old2')`)
	h.exec(`ALTER TABLE items RENAME COLUMN v TO w`, `UPDATE items SET w = 'renamed' WHERE id = 3`)
	h.apply(a)
	h.checkMirror("items")
	if f, _ := h.snapshot("public.items").Schema().Field("w"); f == nil || f.PhysicalName() != "v" {
		t.Fatalf("renamed column %v, want physical name v", f)
	}
}

// waitVersionWith waits until the schema history has a version of table
// with a column named column.
func (h *harness) waitVersionWith(table, column string) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var found bool
		err := h.db.View(func(r *store.Reader) error {
			rels, err := r.Relations()
			for _, rel := range rels {
				if rel.Name == table && slices.ContainsFunc(rel.Columns, func(c store.Column) bool { return c.Name == column }) {
					found = true
				}
			}
			return err
		})
		if err != nil {
			h.t.Fatal(err)
		}
		if found {
			h.caughtUp()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("no schema version of %s with column %s", table, column)
}

// TestIdleApplierLeavesAFailingTableToItsRetry fails a table's first
// flush, lets the idle applier look for schema versions to apply while the
// table waits for its retry, then retries: the retry applies every change
// (a table the idle applier loaded would have been taken for one held out
// of the flush, and its changes passed over).
func TestIdleApplierLeavesAFailingTableToItsRetry(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	ctx := context.Background()
	h := newHarness(t, `CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL)`, "items")
	a := h.applier()
	failed := false
	a.failpoint.set(func(point, table string) error {
		if point == "after-commit" && table == "public.items_changes" && !failed {
			failed = true
			return errCrash
		}
		return nil
	})
	h.exec(`INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	h.caughtUp()
	var tableErrs tableErrors
	if err := a.applyAll(ctx); !errors.As(err, &tableErrs) {
		t.Fatalf("applyAll = %v, want the table's failure", err)
	}
	// Idle while the table waits for its retry.
	if upTo, _, _, err := a.nextBatch(); err != nil || upTo != 0 {
		t.Fatalf("nextBatch while the table waits = %s, %v; want nothing to apply", upTo, err)
	}
	a.evolveIdle(ctx)
	time.Sleep(1100 * time.Millisecond) // the first retry's backoff
	h.apply(a)
	h.checkMirror("items")
}

// TestColumnAddedInTheTransactionOfRows adds a column with a default in
// the middle of a transaction that inserts and updates rows before and
// after it, as migrations run in one transaction do: every row that
// exists when the column is added has its default in the mirror, as in
// PostgreSQL, wherever it is in the flush.
func TestColumnAddedInTheTransactionOfRows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE m (id int PRIMARY KEY, a text, b int);
		INSERT INTO m SELECT g, 'a' || g, g FROM generate_series(1, 50) g;`, "m")
	a := h.applier()
	h.apply(a)
	h.exec(`BEGIN`,
		`INSERT INTO m VALUES (102, 'new', 1)`,
		`UPDATE m SET a = 'before' WHERE id = 4`,
		`ALTER TABLE m ADD COLUMN e text DEFAULT 'dflt'`,
		`INSERT INTO m VALUES (103, 'after', 2)`,
		`UPDATE m SET e = 'upd' WHERE id = 2`,
		`UPDATE m SET a = 'later' WHERE id = 102`,
		`COMMIT`)
	h.apply(a)
	h.checkMirror("m")
	// And in a flush of its own, with rows of the old version only.
	h.exec(`BEGIN`, `INSERT INTO m VALUES (200, 'x', 3)`, `ALTER TABLE m ADD COLUMN f int DEFAULT 7`, `COMMIT`,
		`UPDATE m SET b = -b WHERE id = 1`)
	h.apply(a)
	h.checkMirror("m")
}
