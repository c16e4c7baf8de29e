package uploader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
)

// rewriteTable is a local table where every version replaces the previous
// data file with a new one, at chosen times, so vacuum has tombstones to
// work on.
type rewriteTable struct {
	t       *testing.T
	tbl     *delta.Table
	name    string
	version int64
	day0    time.Time
	files   []string // files[v] is the data file version v added (v >= 1)
}

func newRewriteTable(t *testing.T, root, name string) *rewriteTable {
	t.Helper()
	day0 := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	tbl, err := delta.Create(t.Context(), filepath.Join(root, name), testSchema, nil, nil,
		&delta.CommitInfo{Operation: "CREATE TABLE", Timestamp: day0.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	return &rewriteTable{t: t, tbl: tbl, name: name, day0: day0, files: []string{""}}
}

func (r *rewriteTable) day(n int) time.Time { return r.day0.Add(time.Duration(n) * 24 * time.Hour) }

// rewrite commits a version, on the given day, that replaces the table's
// data file with a new one.
func (r *rewriteTable) rewrite(day int) {
	r.t.Helper()
	path := deltatest.Rewrite(r.t, r.tbl, r.day(day), delta.Row{int64(len(r.files)), randomString(20)})
	r.files = append(r.files, path)
	r.version++
}

func (r *rewriteTable) local(rel string) string {
	return filepath.Join(r.tbl.Path(), filepath.FromSlash(rel))
}

func (r *rewriteTable) existsLocally(rel string) bool {
	_, err := os.Stat(r.local(rel))
	return err == nil
}

// vacuum runs the local vacuum as the agent does, with the uploader's hooks.
func (r *rewriteTable) vacuum(u *uploader.Uploader, day int) *delta.VacuumResult {
	r.t.Helper()
	keep, before := u.VacuumOptions(r.name)
	res, err := r.tbl.Vacuum(context.Background(), delta.VacuumOptions{Now: r.day(day), KeepFrom: keep, BeforeDelete: before})
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func existsRemotely(t *testing.T, b *backend, key string) bool {
	t.Helper()
	rc, err := b.client.GetObject(context.Background(), key)
	if errors.Is(err, uploader.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	return true
}

// switchHook fails every request while down is set, counts deletes, and
// fails the first delete after it succeeded when failDelete is set (a crash
// between the remote delete and its record).
type switchHook struct {
	mu         sync.Mutex
	down       bool
	failDelete bool
	deletes    int
}

func (h *switchHook) hook(_ context.Context, r request) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return errors.New("remote unreachable")
	}
	if r.Op == "delete" && r.After {
		h.deletes++
		if h.failDelete {
			h.failDelete = false
			return errors.New("killed after the delete")
		}
	}
	return nil
}

func (h *switchHook) set(f func(h *switchHook)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// TestVacuumWithReplica runs the local vacuum and the remote deletes through
// an outage: a file is deleted locally only once the version that needs it
// is on the remote, the remote deletes a file only after the local vacuum
// removed it and once its own version no longer needs it, and a remote
// delete interrupted before it was recorded is finished after a restart and
// never repeated once recorded.
func TestVacuumWithReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		root := t.TempDir()
		dbDir := t.TempDir()
		db := openDB(t, dbDir)
		rt := newRewriteTable(t, root, "public.items")
		h := &switchHook{}
		u := newUploader(t, db, b, root, withHook(h.hook))
		ctx := t.Context()
		key := func(v int) string { return rt.name + "/" + rt.files[v] }

		// v1..v3 on days 0..2 while the remote is down: nothing is
		// uploaded, so a vacuum long after keeps every file.
		h.set(func(h *switchHook) { h.down = true })
		for d := range 3 {
			rt.rewrite(d)
		}
		if err := u.SyncOnce(ctx); err == nil {
			t.Fatal("sync succeeded with the remote down")
		}
		if res := rt.vacuum(u, 30); len(res.Files) != 0 {
			t.Fatalf("vacuum deleted %v before anything was uploaded", res.Files)
		}

		// The remote reaches v3; v4 (day 3) stays local.
		h.set(func(h *switchHook) { h.down = false })
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		rt.rewrite(3)
		// Inside the 7-day retention nothing goes, locally or remotely.
		if res := rt.vacuum(u, 5); len(res.Files) != 0 {
			t.Fatalf("vacuum inside the retention deleted %v", res.Files)
		}
		// Day 30: the files of v1..v3 are past the retention, but v3 is
		// the remote's current version and v4 is not uploaded yet. Locally,
		// v4 (not uploaded) keeps its file; v1..v3's go. The remote keeps
		// them all until it has v4.
		h.set(func(h *switchHook) { h.down = true })
		res := rt.vacuum(u, 30)
		if len(res.Files) != 3 || res.KeptFrom != 4 {
			t.Fatalf("vacuum deleted %d files, kept from %d; want 3 and 4", len(res.Files), res.KeptFrom)
		}
		if !rt.existsLocally(rt.files[4]) {
			t.Fatal("the file of a version not yet uploaded was deleted")
		}
		h.set(func(h *switchHook) { h.down = false })
		if n, err := u.DeleteRemote(ctx); err != nil || n != 0 {
			t.Fatalf("remote deleted %d files (%v) while its current version reads one of them", n, err)
		}
		if !existsRemotely(t, b, key(3)) || !existsRemotely(t, b, key(1)) {
			t.Fatal("remote file deleted before the remote passed the version that removed it")
		}

		// A planned remote delete whose local file is still there (as when
		// the local vacuum was interrupted after planning) waits for the
		// local delete.
		if err := os.WriteFile(rt.local(rt.files[2]), []byte("back"), 0o644); err != nil {
			t.Fatal(err)
		}

		// The remote gets v4; its first delete (of file 1 or 3, in path
		// order) is killed before it is recorded.
		h.set(func(h *switchHook) { h.failDelete = true })
		if err := u.SyncOnce(ctx); err == nil {
			t.Fatal("the killed delete did not fail the pass")
		}
		if existsRemotely(t, b, key(1)) && existsRemotely(t, b, key(3)) {
			t.Fatal("the killed delete did not reach the remote")
		}
		db.Close()

		// Restart: the delete is finished, file 3 goes, file 2 stays until
		// it is gone locally, file 4 (current) stays.
		db = openDB(t, dbDir)
		u = newUploader(t, db, b, root, withHook(h.hook))
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if existsRemotely(t, b, key(1)) || existsRemotely(t, b, key(3)) {
			t.Error("files 1 and 3 are still on the remote")
		}
		if !existsRemotely(t, b, key(2)) {
			t.Error("file 2 deleted remotely while it is still on local disk")
		}
		if !existsRemotely(t, b, key(4)) {
			t.Error("the current file deleted remotely")
		}
		if err := os.Remove(rt.local(rt.files[2])); err != nil {
			t.Fatal(err)
		}
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if existsRemotely(t, b, key(2)) {
			t.Error("file 2 still on the remote after its local delete")
		}
		deletes := h.deletes
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if h.deletes != deletes {
			t.Errorf("a recorded remote delete was repeated (%d more deletes)", h.deletes-deletes)
		}
		if got, want := deletes, 4; got != want { // the killed one twice, the other of 1 and 3, then 2
			t.Errorf("%d deletes, want %d", got, want)
		}
		err := db.View(func(r *store.Reader) error {
			return r.RemoteDeletes(b.target, rt.name, func(d store.RemoteDelete) error {
				return errors.New("pending delete left: " + d.Path)
			})
		})
		if err != nil {
			t.Error(err)
		}
		// The remote table still reads at its current version.
		if got, want := rowsAt(t, b.download(t, rt.name), 4), rowsAt(t, rt.tbl.Path(), 4); len(got) != 1 || got[0] != want[0] {
			t.Errorf("remote rows at v4 = %v, want %v", got, want)
		}
	})
}

// TestExpireLogWithReplica expires the local log while the remote lags: the
// remote deletes its old commits only once it has the checkpoint the log
// now starts from and its _last_checkpoint names it, and it still reads at
// every remaining version.
func TestExpireLogWithReplica(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		root := t.TempDir()
		rt := newRewriteTable(t, root, "public.items")
		h := &switchHook{}
		u := newUploader(t, openDB(t, t.TempDir()), b, root, withHook(h.hook))
		ctx := t.Context()
		for d := range 9 {
			rt.rewrite(d)
		}
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for d := 9; d < 12; d++ { // versions 10..12, checkpoint at 10
			rt.rewrite(d)
		}
		keep, before := u.VacuumOptions(rt.name)
		res, err := rt.tbl.ExpireLog(ctx, delta.VacuumOptions{Now: rt.day(60), KeepFrom: keep, BeforeDelete: before})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) != 10 || res.KeptFrom != 10 {
			t.Fatalf("expired %d log files, kept from %d; want 10 and 10", len(res.Files), res.KeptFrom)
		}
		commit := func(v int64) string { return rt.name + "/" + delta.LogDirName + "/" + delta.CommitFileName(v) }
		if n, err := u.DeleteRemote(ctx); err != nil || n != 0 || !existsRemotely(t, b, commit(0)) {
			t.Fatalf("remote deleted %d files (%v) before it had checkpoint 10", n, err)
		}
		if err := u.SyncOnce(ctx); err != nil {
			t.Fatal(err)
		}
		for v := range int64(10) {
			if existsRemotely(t, b, commit(v)) {
				t.Errorf("remote commit %d still there", v)
			}
		}
		dir := b.download(t, rt.name)
		for v := int64(10); v <= 12; v++ {
			if got, want := rowsAt(t, dir, v), rowsAt(t, rt.tbl.Path(), v); len(got) != 1 || got[0] != want[0] {
				t.Errorf("remote version %d: %v, want %v", v, got, want)
			}
		}
	})
}
