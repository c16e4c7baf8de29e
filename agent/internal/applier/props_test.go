package applier

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestTablePropertiesAreSetOnNewAndExistingTables: tables created before
// TableProperties get them in their next commit, with their rows and other
// configuration as they were, and no later commit writes them again; a
// table created with them holds them from the start.
func TestTablePropertiesAreSetOnNewAndExistingTables(t *testing.T) {
	t.Parallel()
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

// TestChangelogRewriteRestoresPrunedFiles prunes a changelog's files (as
// delta.local_retention does) and changes a column's type: the rewrite of
// every changelog file first brings the pruned ones back through
// Config.Restore, so that no change is lost.
func TestChangelogRewriteRestoresPrunedFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE col_text (id int4 PRIMARY KEY, c int4);
		INSERT INTO col_text SELECT g, g FROM generate_series(1, 20) g`, "col_text")
	archive := t.TempDir()
	restored := 0
	a := h.applier(func(c *Config) {
		c.Restore = func(_ context.Context, table, path, dst string) error {
			data, err := os.ReadFile(filepath.Join(archive, table, filepath.FromSlash(path)))
			if err == nil {
				restored++
				err = os.WriteFile(dst, data, 0o600)
			}
			return err
		}
	})
	h.apply(a)
	h.exec(`UPDATE col_text SET c = c + 1 WHERE id <= 5`)
	h.apply(a)
	// Prune every changelog file: move it to the archive.
	root := filepath.Join(h.tablesDir, "public.col_text_changes")
	for _, f := range h.snapshot("public.col_text_changes").Files() {
		dst := filepath.Join(archive, "public.col_text_changes", filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(root, filepath.FromSlash(f.Path)), dst); err != nil {
			t.Fatal(err)
		}
	}

	h.exec(`ALTER TABLE col_text ALTER COLUMN c TYPE text`, `INSERT INTO col_text VALUES (100, 'hundred')`)
	h.apply(a)
	if restored == 0 {
		t.Fatal("no pruned file was restored")
	}
	h.checkMirror("col_text")
	rows := h.checkChangelog("col_text", nil)
	if len(rows) != 20+5+1 {
		t.Errorf("changelog holds %d changes after the rewrite, want 26", len(rows))
	}
}
