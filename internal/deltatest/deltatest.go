// Package deltatest helps tests build Delta tables whose commits and data
// files carry chosen times, as vacuum tests need.
package deltatest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// Rewrite commits a new version of tbl, at time at, that replaces every data
// file of the table with one new file holding row (a copy-on-write rewrite:
// the old files get remove tombstones dated at). The new file's modification
// time is set to at. It returns the new file's path relative to the table
// root.
func Rewrite(t testing.TB, tbl *delta.Table, at time.Time, row delta.Row) string {
	t.Helper()
	ctx := context.Background()
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add, err := snap.WriteFile(ctx, nil, []delta.Row{row}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(tbl.Path(), filepath.FromSlash(add.Path)), at, at); err != nil {
		t.Fatal(err)
	}
	acts := []delta.Action{add, &delta.CommitInfo{Operation: "WRITE", Timestamp: at.UnixMilli()}}
	for _, f := range snap.Files() {
		acts = append(acts, delta.RemoveOf(f, at.UnixMilli(), true))
	}
	if _, err := tbl.Commit(ctx, snap.Version(), acts); err != nil {
		t.Fatal(err)
	}
	return add.Path
}
