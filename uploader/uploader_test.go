package uploader_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
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
// reaches, every request respects invariant 4 (docs/architecture.md), a pass
// with nothing new sends no request, and _last_checkpoint follows.
func TestReplicateInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		root := t.TempDir()
		tables := []*localTable{newLocalTable(t, root, "public.items"), newLocalTable(t, root, "public.items_changes")}
		order := newOrderChecker(t, root)
		u := newUploader(t, openDB(t, t.TempDir()), b, root, withHook(order.hook))
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

// TestReplicaStartsFromLocalCheckpoint points a new remote at tables whose
// oldest commits were removed locally (log retention after an upload to an
// earlier target). The remote starts at the oldest local checkpoint that
// every later commit is local for: it gets that checkpoint, the data files of
// its snapshot and the commits after it, and then equals the local table at
// every version from there. An older checkpoint that some later commit is
// missing for goes up neither then nor later; with no usable checkpoint the
// pass fails with ErrLocal and uploads nothing.
func TestReplicaStartsFromLocalCheckpoint(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		ctx := t.Context()
		root := t.TempDir()
		lt := newLocalTable(t, root, "public.items")
		for range 25 { // versions 1..25, checkpoints at 10 and 20
			lt.commit(3, 20)
		}
		logDir := filepath.Join(lt.tbl.Path(), delta.LogDirName)
		// Retention removed commits 0..12: checkpoint 10 is left but not
		// usable, checkpoint 20 is.
		for v := range int64(13) {
			if err := os.Remove(filepath.Join(logDir, delta.CommitFileName(v))); err != nil {
				t.Fatal(err)
			}
		}
		var commits []int64
		var u *uploader.Uploader
		var atFirstPut sync.Once
		var backlog uploader.Backlog
		u = newUploader(t, openDB(t, t.TempDir()), b, root, withHook(func(_ context.Context, r request) error {
			if r.Op == "put" {
				atFirstPut.Do(func() { backlog = u.Backlog() })
			}
			if _, rel, _ := strings.Cut(r.Key, "/"); r.After && r.Op == "put" {
				if v, ok := parseCommit(rel); ok {
					commits = append(commits, v)
				}
			}
			return nil
		}))
		for pass := range 2 {
			if err := u.SyncOnce(ctx); err != nil {
				t.Fatalf("pass %d: %v", pass, err)
			}
		}
		if want := []int64{21, 22, 23, 24, 25}; !slices.Equal(commits, want) {
			t.Errorf("commits uploaded: %v, want %v", commits, want)
		}
		// Before the first upload, the backlog was what the copy had to
		// upload: versions 20 (its checkpoint and snapshot) to 25.
		if want := restartBacklog(t, lt.tbl, 20, lt.version); backlog.Versions != 6 || backlog.Bytes != want {
			t.Errorf("backlog before the first upload: %d versions, %d bytes; want 6 versions, %d bytes", backlog.Versions, backlog.Bytes, want)
		}
		dir := b.download(t, lt.name)
		for v := int64(20); v <= lt.version; v++ {
			if got, want := rowsAt(t, dir, v), rowsAt(t, lt.tbl.Path(), v); !slices.Equal(got, want) {
				t.Fatalf("version %d: remote has %d rows, local %d", v, len(got), len(want))
			}
		}
		if got := rowsAt(t, dir, lt.version); len(got) != 3*25 {
			t.Fatalf("remote latest has %d rows, want %d", len(got), 3*25)
		}
		if v, _, ok := readLastCheckpointVersion(t, dir); !ok || v != 20 {
			t.Errorf("remote _last_checkpoint names %d (%v), want 20", v, ok)
		}
		if _, err := os.Stat(filepath.Join(dir, delta.LogDirName, delta.CheckpointFileName(10))); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("checkpoint 10, which commits 11 and 12 are missing for, is on the remote: %v", err)
		}
		st := u.Status()
		if len(st.Tables) != 1 || st.Tables[0].RemoteVersion != lt.version || st.Tables[0].LastError != "" {
			t.Fatalf("status = %+v", st)
		}

		// Another table whose log lost every checkpoint it could start
		// from: a clear error, nothing uploaded.
		lost := newLocalTable(t, root, "public.lost")
		for range 12 {
			lost.commit(1, 10)
		}
		lostLog := filepath.Join(lost.tbl.Path(), delta.LogDirName)
		for v := range int64(11) {
			os.Remove(filepath.Join(lostLog, delta.CommitFileName(v)))
		}
		os.Remove(filepath.Join(lostLog, delta.CheckpointFileName(10)))
		err := u.SyncOnce(ctx)
		if !errors.Is(err, uploader.ErrLocal) || !strings.Contains(err.Error(), "no local checkpoint") {
			t.Fatalf("err = %v, want ErrLocal naming the missing checkpoint", err)
		}
		t.Logf("error: %v", err)
		var keys []string
		if b.server != nil {
			keys = listRemote(t, b, "lake/"+site+"/"+lost.name)
		} else {
			filepath.WalkDir(b.download(t, lost.name), func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					keys = append(keys, p)
				}
				return nil
			})
		}
		if len(keys) != 0 {
			t.Errorf("the remote got %v", keys)
		}
	})
}

// restartBacklog returns the bytes a remote copy of tbl that starts from
// checkpoint start has to upload up to version latest: the checkpoint and
// the data files of its snapshot, then each later commit, the data files
// it adds and its checkpoint, if any.
func restartBacklog(t *testing.T, tbl *delta.Table, start, latest int64) int64 {
	t.Helper()
	ctx := t.Context()
	size := func(name string) int64 {
		info, err := os.Stat(filepath.Join(tbl.LogPath(), name))
		if errors.Is(err, fs.ErrNotExist) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	snap, err := tbl.SnapshotAt(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	n := size(delta.CheckpointFileName(start))
	for _, f := range snap.Files() {
		n += f.Size
	}
	for v := start + 1; v <= latest; v++ {
		n += size(delta.CommitFileName(v)) + size(delta.CheckpointFileName(v))
		actions, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range actions {
			if add, ok := a.(*delta.Add); ok {
				n += add.Size
			}
		}
	}
	return n
}
