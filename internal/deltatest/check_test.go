package deltatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestCheckFindsFaults runs Check on a sound table and then on the same
// table with one fault at a time: each is reported.
func TestCheckFindsFaults(t *testing.T) {
	ctx := context.Background()
	build := func(t *testing.T) (string, *delta.Table, *delta.Add) {
		dir := t.TempDir()
		st, maxID, err := delta.AssignColumnIDs(delta.NewStructType(delta.NewField("id", delta.TypeLong, true), delta.NewField("p", delta.TypeString, true)), 0)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := delta.Create(ctx, dir, st, []string{"p"}, map[string]string{delta.ColumnMappingModeKey: delta.ColumnMappingName,
			delta.ColumnMappingMaxIDKey: fmt.Sprint(maxID)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		add, err := snap.WriteFile(ctx, map[string]any{"p": "a"}, []delta.Row{{int64(1), "a"}}, delta.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(ctx, 0, []delta.Action{add}); err != nil {
			t.Fatal(err)
		}
		return dir, tbl, add
	}
	dir, _, _ := build(t)
	if err := Check(ctx, dir); err != nil {
		t.Fatalf("a sound table: %v", err)
	}
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, dir string, tbl *delta.Table, add *delta.Add)
		want  string
	}{
		{"a missing file", func(t *testing.T, dir string, _ *delta.Table, add *delta.Add) {
			p, _ := delta.ResolvePath(dir, add.Path)
			os.Remove(p)
		}, "no such file"},
		{"stats by logical name", func(t *testing.T, _ string, tbl *delta.Table, add *delta.Add) {
			c := *add
			c.Path, c.Stats = add.Path+".x", `{"numRecords":1,"minValues":{"id":1}}`
			copyFile(t, tbl, add.Path, c.Path)
			if _, err := tbl.Commit(ctx, 1, []delta.Action{&c}); err != nil {
				t.Fatal(err)
			}
		}, "not a column's physical name"},
		{"partition values by logical name", func(t *testing.T, _ string, tbl *delta.Table, add *delta.Add) {
			c := *add
			v := "a"
			c.Path, c.PartitionValues = add.Path+".y", map[string]*string{"p": &v}
			copyFile(t, tbl, add.Path, c.Path)
			if _, err := tbl.Commit(ctx, 1, []delta.Action{&c}); err != nil {
				t.Fatal(err)
			}
		}, "not a partition column's physical name"},
		{"a dangling _last_checkpoint", func(t *testing.T, _ string, tbl *delta.Table, _ *delta.Add) {
			os.WriteFile(filepath.Join(tbl.LogPath(), delta.LastCheckpointName), []byte(`{"version":1,"size":2}`), 0o644)
		}, "_last_checkpoint names version 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, tbl, add := build(t)
			c.fault(t, dir, tbl, add)
			err := Check(ctx, dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check: %v, want %q", err, c.want)
			}
		})
	}
}

func copyFile(t *testing.T, tbl *delta.Table, from, to string) {
	t.Helper()
	src, _ := delta.ResolvePath(tbl.Path(), from)
	dst, _ := delta.ResolvePath(tbl.Path(), to)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
