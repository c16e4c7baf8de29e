package uploader_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestRestoreBringsBackAPrunedFile uploads a table, deletes a data file
// locally as pruning does, and restores it from the replica byte for byte;
// a file the replica lacks is an error and leaves nothing behind.
func TestRestoreBringsBackAPrunedFile(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	b := fileBackend(t)
	u := newUploader(t, openDB(t, t.TempDir()), b, root)
	lt := newLocalTable(t, root, "public.t")
	lt.commit(100, 50)
	if err := u.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := lt.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rel := snap.Files()[0].Path
	local := filepath.Join(root, "public.t", filepath.FromSlash(rel))
	want, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(local); err != nil {
		t.Fatal(err)
	}
	if err := u.Restore(ctx, "public.t", rel, local); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(local); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restored file differs (%v)", err)
	}
	missing := filepath.Join(root, "public.t", "part-missing.parquet")
	if err := u.Restore(ctx, "public.t", "part-missing.parquet", missing); err == nil {
		t.Error("restore of a file the replica lacks succeeded")
	}
	entries, _ := os.ReadDir(filepath.Join(root, "public.t"))
	for _, e := range entries {
		if e.Name() != "_delta_log" && e.Name() != filepath.Base(rel) {
			t.Errorf("restore left %s behind", e.Name())
		}
	}
}
