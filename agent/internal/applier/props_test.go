package applier

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestTablePropertiesAreSetOnNewAndExistingTables: tables created before
// TableProperties get them in their next commit, with their rows and other
// configuration as they were, and no later commit writes them again; a
// table created with them holds them from the start.
func TestTablePropertiesAreSetOnNewAndExistingTables(t *testing.T) {
	h := newHarness(t, `CREATE TABLE old (id int PRIMARY KEY, v text); INSERT INTO old VALUES (1, 'a');
		CREATE TABLE fresh (id int PRIMARY KEY)`, "old", "fresh")
	h.apply(h.applier())
	props := map[string]string{"delta.deletedFileRetentionDuration": "interval 7 days",
		"delta.logRetentionDuration": "interval 30 days"}
	for _, name := range []string{"public.old", "public.old_changes"} {
		conf := h.snapshot(name).Metadata().Configuration
		for k := range props {
			if _, ok := conf[k]; ok {
				t.Fatalf("%s has %s before it was asked for", name, k)
			}
		}
	}

	b := h.applier(func(c *Config) { c.TableProperties = props })
	h.exec(`INSERT INTO old VALUES (2, 'b')`, `INSERT INTO fresh VALUES (1)`)
	h.apply(b)
	for _, name := range []string{"public.old", "public.old_changes", "public.fresh", "public.fresh_changes"} {
		conf := h.snapshot(name).Metadata().Configuration
		for k, v := range props {
			if conf[k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, conf[k], v)
			}
		}
		if conf["delta.columnMapping.mode"] != "name" {
			t.Errorf("%s lost its configuration: %v", name, conf)
		}
	}
	h.checkMirror("old")
	h.checkMirror("fresh")

	h.exec(`INSERT INTO old VALUES (3, 'c')`)
	h.apply(b)
	tbl, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, "public.old"))
	if err != nil {
		t.Fatal(err)
	}
	acts, err := tbl.ReadCommit(context.Background(), h.snapshot("public.old").Version())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		if _, ok := a.(*delta.Metadata); ok {
			t.Error("the commit after the properties were set wrote a metaData again")
		}
	}
	h.checkMirror("old")
}
