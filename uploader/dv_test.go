package uploader_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// deleteRowsWithDV deletes the first row of every data file of the local
// table with deletion vectors stored in one file, as a merge-on-read
// merge does, enabling them first.
func (l *localTable) deleteRowsWithDV() string {
	l.t.Helper()
	ctx := l.t.Context()
	snap, err := l.tbl.Snapshot(ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	proto, md, err := delta.EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		l.t.Fatal(err)
	}
	files := snap.Files()
	dvs := make([]*delta.DeletionVector, len(files))
	for i := range dvs {
		dvs[i] = delta.NewDeletionVector(0)
	}
	descs, err := delta.StoreDeletionVectors(l.tbl.Path(), dvs, 0)
	if err != nil {
		l.t.Fatal(err)
	}
	actions := []delta.Action{proto, md}
	for i, f := range files {
		rm, add, err := delta.DeletionVectorActions(f, descs[i], time.Now().UnixMilli())
		if err != nil {
			l.t.Fatal(err)
		}
		actions = append(actions, rm, add)
	}
	v, err := l.tbl.Commit(ctx, l.version, actions)
	if err != nil {
		l.t.Fatal(err)
	}
	l.version = v
	p, err := descs[0].FilePath("")
	if err != nil {
		l.t.Fatal(err)
	}
	return filepath.ToSlash(p)
}

// TestReplicateDeletionVectorFiles replicates a table whose rows are
// deleted with deletion vectors in a file: the file goes up before the
// commit that names it, and the remote reads the same rows as the local
// table at every version.
func TestReplicateDeletionVectorFiles(t *testing.T) {
	b := fileBackend(t)
	root := t.TempDir()
	lt := newLocalTable(t, root, "public.items")
	order := newOrderChecker(t, root)
	u := newUploader(t, openDB(t, t.TempDir()), b, root, withHook(order.hook))
	for range 3 {
		lt.commit(3, 20)
	}
	dvPath := lt.deleteRowsWithDV()
	lt.commit(3, 20)
	if err := u.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := checkRemoteEqualsLocal(t, b, lt, lt.version); got != lt.version {
		t.Fatalf("remote at %d, local at %d", got, lt.version)
	}
	if ok, err := u.Uploaded(lt.name, dvPath); !ok || err != nil {
		t.Errorf("Uploaded(%s) = %v, %v", dvPath, ok, err)
	}
	if got := rowsAt(t, lt.tbl.Path(), lt.version); len(got) != 4*3-3 {
		t.Errorf("local table has %d rows, want 9", len(got))
	}
}
