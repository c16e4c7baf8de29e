package uploader_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/s3test"
)

// eachBackend runs fn against the file backend and against versitygw.
func eachBackend(t *testing.T, fn func(t *testing.T, newBackend func(t *testing.T) *backend)) {
	t.Run("file", func(t *testing.T) {
		fn(t, func(t *testing.T) *backend { return fileBackend(t) })
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		fn(t, func(t *testing.T) *backend { return s3Backend(t, srv) })
	})
}

// TestReplicateInOrder replicates two tables across two checkpoints in
// several passes: the remote equals the local table at every version it
// reaches, every request respects invariant 4, a pass with nothing new sends
// no request, and _last_checkpoint follows.
func TestReplicateInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		root := t.TempDir()
		tables := []*localTable{newLocalTable(t, root, "public.items"), newLocalTable(t, root, "public.items_changes")}
		order := newOrderChecker(t, root)
		u := newUploader(t, openDB(t, t.TempDir()), b, root, func(o *uploader.Options) { o.Hook = order.hook })
		ctx := t.Context()
		for round, n := range []int{4, 7, 12} { // versions 1..4, ..11, ..23
			for range n {
				for _, lt := range tables {
					lt.commit(3, 20)
				}
			}
			if err := u.SyncOnce(ctx); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for _, lt := range tables {
				if got := checkRemoteEqualsLocal(t, b, lt, lt.version); got != lt.version {
					t.Fatalf("round %d: remote at %d, local at %d", round, got, lt.version)
				}
				st := u.Status()
				for _, ts := range st.Tables {
					if ts.BacklogVersions != 0 || ts.RemoteVersion != ts.LocalVersion || ts.LastError != "" {
						t.Fatalf("status after sync: %+v", ts)
					}
				}
			}
		}
		before := u.Status().Requests
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if got := u.Status().Requests; got != before {
			t.Errorf("an idle pass sent %d requests", got-before)
		}
		st := u.Status()
		perVersion := float64(st.Requests) / float64(st.Versions)
		t.Logf("%s: %d requests for %d versions: %.2f per version", b.name, st.Requests, st.Versions, perVersion)
		// One data file and one commit per version, a checkpoint every 10
		// and a few _last_checkpoint puts.
		if perVersion > 2.3 {
			t.Errorf("%.2f requests per version", perVersion)
		}
		for _, lt := range tables {
			dir := b.download(t, lt.name)
			v, _, ok := readLastCheckpointVersion(t, dir)
			if !ok || v != 20 {
				t.Errorf("remote _last_checkpoint of %s names %d (%v), want 20", lt.name, v, ok)
			}
			// Vacuum safety: every data file of the table is uploaded.
			snap, err := lt.tbl.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range snap.Files() {
				if ok, err := u.Uploaded(lt.name, f.Path); !ok || err != nil {
					t.Errorf("Uploaded(%s) = %v, %v", f.Path, ok, err)
				}
			}
			if ok, _ := u.Uploaded(lt.name, "part-not-there.parquet"); ok {
				t.Error("Uploaded reports an unknown file")
			}
			if ok, _ := u.Uploaded(lt.name, delta.LogDirName+"/"+delta.CommitFileName(lt.version)); !ok {
				t.Error("Uploaded does not report the last commit")
			}
		}
	})
}

// TestConflictStopsTable points two uploaders with different local tables at
// one site: the second stops the table with ErrRemoteConflict, stays stopped
// after a restart, and the remote keeps the first one's table.
func TestConflictStopsTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		ctx := t.Context()
		rootA, rootB := t.TempDir(), t.TempDir()
		a := newLocalTable(t, rootA, "public.items")
		other := newLocalTable(t, rootB, "public.items")
		for range 3 {
			a.commit(2, 10)
			other.commit(5, 10)
		}
		ua := newUploader(t, openDB(t, t.TempDir()), b, rootA)
		if err := ua.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		dbB := t.TempDir()
		ub := newUploader(t, openDB(t, dbB), b, rootB)
		err := ub.SyncOnce(ctx)
		if !errors.Is(err, uploader.ErrRemoteConflict) {
			t.Fatalf("second uploader: err = %v, want ErrRemoteConflict", err)
		}
		t.Logf("conflict error: %v", err)
		st := ub.Status()
		if len(st.Tables) != 1 || st.Tables[0].Stopped == "" || !st.Online {
			t.Fatalf("status = %+v", st)
		}
		checkRemoteEqualsLocal(t, b, a, a.version)

		// The first agent keeps going; the second stays stopped.
		a.commit(2, 10)
		if err := ua.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ub.SyncOnce(ctx); !errors.Is(err, uploader.ErrTableStopped) {
			t.Fatalf("stopped table: err = %v", err)
		}
		checkRemoteEqualsLocal(t, b, a, a.version)
	})
}

func readLastCheckpointVersion(t testing.TB, dir string) (int64, []byte, bool) {
	t.Helper()
	tbl, err := delta.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	_ = tbl
	data, err := readFile(filepath.Join(dir, delta.LogDirName, delta.LastCheckpointName))
	if err != nil {
		return 0, nil, false
	}
	var lc struct{ Version int64 }
	if err := jsonUnmarshal(data, &lc); err != nil {
		return 0, nil, false
	}
	return lc.Version, data, true
}
