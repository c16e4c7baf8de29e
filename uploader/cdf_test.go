package uploader_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
)

// TestChangeDataFilesAreUploaded commits a version with a change data
// file: the replica gets it with the version, as it gets data files.
func TestChangeDataFilesAreUploaded(t *testing.T) {
	b := fileBackend(t)
	root := t.TempDir()
	lt := newLocalTable(t, root, "public.items")
	lt.commit(3, 10)
	cw, err := delta.NewChangeDataWriter(lt.tbl.Path(), testSchema, nil, nil, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cw.Write([]delta.Row{{int64(1), "x", delta.ChangeInsert}}); err != nil {
		t.Fatal(err)
	}
	add, err := cw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if lt.version, err = lt.tbl.Commit(t.Context(), lt.version, []delta.Action{delta.CDCOf(add)}); err != nil {
		t.Fatal(err)
	}
	u := newUploader(t, openDB(t, t.TempDir()), b, root)
	if err := u.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := checkRemoteEqualsLocal(t, b, lt, lt.version); got != lt.version {
		t.Fatalf("remote at %d, local at %d", got, lt.version)
	}
	local, err := os.ReadFile(filepath.Join(lt.tbl.Path(), filepath.FromSlash(add.Path)))
	if err != nil {
		t.Fatal(err)
	}
	remote, err := os.ReadFile(filepath.Join(b.download(t, lt.name), filepath.FromSlash(add.Path)))
	if err != nil {
		t.Fatalf("change data file not on the replica: %v", err)
	}
	if string(remote) != string(local) {
		t.Fatal("the replica's change data file differs")
	}
	if ok, err := u.Uploaded(lt.name, add.Path); !ok || err != nil {
		t.Errorf("Uploaded(%s) = %v, %v", add.Path, ok, err)
	}
}
