// Package deltatest helps tests build Delta tables whose commits and data
// files carry chosen times, as vacuum tests need, and check the commits a
// compaction made.
package deltatest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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

// OptimizeVersions returns the versions of tbl whose commitInfo says
// OPTIMIZE, and checks each as such a commit must be: its adds and removes
// have dataChange false, and it writes no change data. each, when set, is
// called with every such version and its actions.
func OptimizeVersions(t testing.TB, tbl *delta.Table, each func(v int64, acts []delta.Action)) []int64 {
	t.Helper()
	ctx := context.Background()
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for v := int64(1); v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		optimize := slices.ContainsFunc(acts, func(a delta.Action) bool {
			ci, ok := a.(*delta.CommitInfo)
			return ok && ci.Operation == delta.OperationOptimize
		})
		if !optimize {
			continue
		}
		out = append(out, v)
		for _, a := range acts {
			switch a := a.(type) {
			case *delta.Add:
				if a.DataChange {
					t.Errorf("%s version %d: OPTIMIZE adds %s with dataChange true", tbl.Path(), v, a.Path)
				}
			case *delta.Remove:
				if a.DataChange {
					t.Errorf("%s version %d: OPTIMIZE removes %s with dataChange true", tbl.Path(), v, a.Path)
				}
			case *delta.AddCDC:
				t.Errorf("%s version %d: OPTIMIZE writes change data %s", tbl.Path(), v, a.Path)
			}
		}
		if each != nil {
			each(v, acts)
		}
	}
	return out
}
