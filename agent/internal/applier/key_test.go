package applier

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// TestFullIdentityTableIsKeyedByItsPrimaryKey captures a table with a
// primary key under REPLICA IDENTITY FULL: its mirror is keyed by the
// primary key, not by every column, and stays equal to PostgreSQL through
// updates, deletes and a column added and filled.
func TestFullIdentityTableIsKeyedByItsPrimaryKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE f (id int PRIMARY KEY, v text, n int);
		ALTER TABLE f REPLICA IDENTITY FULL;
		INSERT INTO f SELECT g, 'v' || g, g FROM generate_series(1, 100) g;`, "f")
	a := h.applier()
	h.apply(a)
	h.exec(`UPDATE f SET v = 'u' WHERE id % 3 = 0`, `DELETE FROM f WHERE id % 10 = 0`,
		`ALTER TABLE f ADD COLUMN extra text`, `UPDATE f SET extra = 'x', n = n + 1 WHERE id % 4 = 0`,
		`INSERT INTO f VALUES (1000, 'new', 1, 'e')`, `UPDATE f SET id = 2000 WHERE id = 1`)
	h.apply(a)
	h.checkMirror("f")
	h.checkChangelog("f", nil)
	if key := keyColumns(t, h.snapshot("public.f")); key != `["id"]` {
		t.Fatalf("mirror keyed by %s, want it keyed by [\"id\"]", key)
	}
}

// keyColumns returns the names of the columns a mirror is keyed by (its
// lakeside.key holds their physical names), as JSON, or "multiset".
func keyColumns(t *testing.T, s *delta.Snapshot) string {
	t.Helper()
	conf := s.Metadata().Configuration
	if conf[confMultiset] == "true" {
		return "multiset"
	}
	var physical []string
	if err := json.Unmarshal([]byte(conf[confKey]), &physical); err != nil {
		t.Fatalf("bad %s %q: %v", confKey, conf[confKey], err)
	}
	names := []string{}
	for _, p := range physical {
		for _, f := range s.Schema().Fields {
			if f.PhysicalName() == p {
				names = append(names, f.Name)
			}
		}
	}
	out, _ := json.Marshal(names)
	return string(out)
}

// TestMultisetMirrorIsRekeyed builds a mirror as an earlier version did
// for a REPLICA IDENTITY FULL table with a primary key (a multiset keyed by
// every column: its schema versions did not know the primary key), then
// lets the schema history know it, as capture now records it: the next
// applier rewrites the mirror keyed by the primary key, in one commit that
// keeps every row, and applies later changes by it.
func TestMultisetMirrorIsRekeyed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, `
		CREATE TABLE f (id int PRIMARY KEY, v text);
		ALTER TABLE f REPLICA IDENTITY FULL;
		INSERT INTO f SELECT g, 'v' || g FROM generate_series(1, 500) g;`, "f")
	setPrimaryKeys := func(known bool) {
		t.Helper()
		var rels map[store.RelationKey]*store.Relation
		if err := h.db.View(func(r *store.Reader) (err error) { rels, err = r.Relations(); return err }); err != nil {
			t.Fatal(err)
		}
		err := h.db.Update(func(w *store.Writer) error {
			for _, rel := range rels {
				for i := range rel.Columns {
					rel.Columns[i].PrimaryKey = known && rel.Columns[i].Name == "id"
				}
				if err := w.PutRelation(rel); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	h.exec(`UPDATE f SET v = 'u' WHERE id % 7 = 0`)
	h.caughtUp()
	setPrimaryKeys(false)
	h.apply(h.applier())
	if conf := h.snapshot("public.f").Metadata().Configuration; conf[confMultiset] != "true" {
		t.Fatalf("the old mirror's configuration %v is not a multiset", conf)
	}
	h.checkMirror("f")
	before := h.snapshot("public.f").Version()

	h.exec(`UPDATE f SET v = 'after' WHERE id % 5 = 0`, `DELETE FROM f WHERE id % 11 = 0`)
	h.caughtUp()
	setPrimaryKeys(true)
	h.apply(h.applier())
	if key := keyColumns(t, h.snapshot("public.f")); key != `["id"]` {
		t.Fatalf("mirror keyed by %s after the upgrade, want it keyed by [\"id\"]", key)
	}
	tbl, err := delta.Open(ctx, filepath.Join(h.tablesDir, "public.f"))
	if err != nil {
		t.Fatal(err)
	}
	rekeyed, err := tbl.SnapshotAt(ctx, before+1)
	if err != nil {
		t.Fatal(err)
	}
	if rows, err := rekeyed.ReadRows(ctx); err != nil || len(rows) != 500 {
		t.Fatalf("the rekeyed version holds %d rows (%v), want 500", len(rows), err)
	}
	h.checkMirror("f")
	h.checkChangelog("f", nil)
}

// TestKeyConfIsJSON checks that lakeside.key reads back as written for
// physical names of any bytes a PostgreSQL column name may hold (the names
// of columns written before column mapping).
func TestKeyConfIsJSON(t *testing.T) {
	names := []string{"id", "a\x01b", "é\t\"q\"", `back\slash`}
	var got []string
	if err := json.Unmarshal([]byte(keyConf(names)), &got); err != nil || !slices.Equal(got, names) {
		t.Fatalf("keyConf(%q) = %s, reads back as %q (%v)", names, keyConf(names), got, err)
	}
}
