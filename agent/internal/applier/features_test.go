package applier

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

func TestTimeTravel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`, "items")
	a := h.applier()
	type point struct {
		version int64
		at      time.Time
		rows    []string
	}
	var points []point
	steps := []string{
		`INSERT INTO items SELECT g, g, 'a' FROM generate_series(1, 50) g`,
		`UPDATE items SET v = -v WHERE id < 20`,
		`DELETE FROM items WHERE id > 40`,
		`TRUNCATE items`,
		`INSERT INTO items VALUES (7, 7, 'again')`,
	}
	for _, s := range steps {
		h.exec(s)
		h.apply(a)
		snap := h.snapshot("public.items")
		points = append(points, point{version: snap.Version(), at: snap.Timestamp(), rows: h.pgRows("items")})
		time.Sleep(5 * time.Millisecond) // distinct commit timestamps
	}
	tb, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.items"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range points {
		s, err := tb.SnapshotAt(context.Background(), p.version)
		if err != nil {
			t.Fatal(err)
		}
		h.compare("version "+time.Duration(p.version).String(), p.rows, h.deltaRows(s, "items"))
		s, err = tb.SnapshotAsOf(context.Background(), p.at)
		if err != nil {
			t.Fatal(err)
		}
		if s.Version() != p.version {
			t.Errorf("as of %s: version %d, want %d", p.at, s.Version(), p.version)
		}
		h.compare("timestamp "+p.at.String(), p.rows, h.deltaRows(s, "items"))
	}
	ci := h.snapshot("public.items").CommitInfo()
	if ci == nil || ci.EngineInfo != "lakeside/test" || ci.Extra["lakeside"] == nil {
		t.Errorf("commitInfo = %+v", ci)
	}
	if h.snapshot("public.items").Version() != points[len(points)-1].version {
		t.Error("unexpected versions")
	}
	s, _ := tb.SnapshotAt(context.Background(), points[3].version)
	if ci := s.CommitInfo(); ci == nil || ci.Operation != "TRUNCATE" {
		t.Errorf("truncate commit has commitInfo %+v", ci)
	}
}

func TestSoftDeleteToastAndSchemaChanges(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, big text);
		ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL;
		CREATE TABLE full_log (who text, what int4);
		ALTER TABLE full_log REPLICA IDENTITY FULL;`, "items", "full_log")
	a := h.applier(func(c *Config) { c.SoftDelete = true })
	h.exec(`INSERT INTO items SELECT g, g, repeat(md5(g::text), 100) FROM generate_series(1, 20) g`,
		`INSERT INTO full_log VALUES ('a', 1), ('a', 1), ('b', 2)`)
	h.apply(a)
	h.exec(
		`UPDATE items SET v = v + 100 WHERE id <= 5`, // big is unchanged TOAST
		`DELETE FROM items WHERE id = 6`,
		`ALTER TABLE items ADD COLUMN extra text`,
		`UPDATE items SET extra = 'e' || id WHERE id <= 3`,
		`INSERT INTO items VALUES (100, 100, 'new', 'x')`,
		// A second schema change queued behind the first.
		`ALTER TABLE items DROP COLUMN v`,
		`UPDATE items SET big = 'small' WHERE id = 2`,
		`INSERT INTO items VALUES (101, 'z', 'y')`,
		`DELETE FROM full_log WHERE ctid = (SELECT min(ctid) FROM full_log WHERE who = 'a')`,
		`UPDATE full_log SET what = 5 WHERE who = 'b'`,
	)
	h.apply(a)
	h.checkMirror("items")
	h.checkMirror("full_log")

	snap := h.snapshot("public.items")
	st := snap.Schema()
	for _, c := range []string{"id", "big", "extra", colDeleted} {
		if f, _ := st.Field(c); f == nil {
			t.Errorf("mirror schema %s lacks %s", st, c)
		}
	}
	// The dropped column is gone from the schema, as from the table.
	if f, _ := st.Field("v"); f != nil {
		t.Errorf("mirror schema %s still has the dropped column v", st)
	}
	rows, err := snap.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, del := st.Field(colDeleted)
	_, idIdx := st.Field("id")
	deleted := 0
	for _, r := range rows {
		if r[del] == true {
			deleted++
			if r[idIdx] != int64(6) {
				t.Errorf("soft-deleted row %v", r)
			}
		}
	}
	if deleted != 1 {
		t.Errorf("%d soft-deleted rows, want 1", deleted)
	}
	// The changelog lists unchanged TOAST columns and the before image of
	// the REPLICA IDENTITY FULL table.
	cl := h.checkChangelog("full_log", []string{"insert", "insert", "insert", "delete", "update"})
	cst := h.snapshot("public.full_log_changes").Schema()
	_, before := cst.Field(colBefore)
	if b, ok := cl[4][before].(delta.Row); !ok || b[0] != "b" || b[1] != int32(2) {
		t.Errorf("update's _before = %v", cl[4][before])
	}
	items := h.checkChangelog("items", nil)
	ist := h.snapshot("public.items_changes").Schema()
	_, unch := ist.Field(colUnchanged)
	_, op := ist.Field(colOp)
	n := 0
	for _, r := range items {
		if r[op] == "update" && r[unch] != nil {
			if !slices.Equal(r[unch].([]any), []any{"big"}) {
				t.Errorf("_unchanged = %v", r[unch])
			}
			n++
		}
	}
	if n != 8 {
		t.Errorf("%d updates with unchanged TOAST, want 8", n)
	}
}
