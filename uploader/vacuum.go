package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// VacuumOptions returns the hooks a local vacuum of table needs while the
// table is replicated (see delta.VacuumOptions):
//
//   - KeepFrom keeps every file of the versions not yet confirmed on the
//     remote, so a local file is deleted only once it is uploaded;
//   - BeforeDelete records, before anything is deleted locally, which of the
//     files about to go are on the remote, so that the remote deletes them
//     too, following the same retention (see DeleteRemote).
func (u *Uploader) VacuumOptions(table string) (keepFrom func(context.Context) (int64, error), beforeDelete func(context.Context, *delta.VacuumResult) error) {
	keepFrom = func(ctx context.Context) (int64, error) {
		st, err := u.loadState(table)
		if err != nil {
			return 0, err
		}
		return st.RemoteVersion + 1, nil
	}
	if u.opts.Fleet != nil {
		beforeDelete = func(ctx context.Context, r *delta.VacuumResult) error {
			return u.planFleetDeletes(table, r)
		}
		return keepFrom, beforeDelete
	}
	beforeDelete = func(ctx context.Context, r *delta.VacuumResult) error {
		return u.planRemoteDeletes(table, r)
	}
	return keepFrom, beforeDelete
}

// AbsentFiles returns the data files of table, whose local copy is in the
// directory root, that are on the remote but no longer on local disk
// (pruned) and not yet to be deleted there, each with its upload time as
// its time: the files a local vacuum considers besides those on disk (see
// delta.VacuumOptions.Absent), so that the remote keeps the vacuum's
// retention for pruned files too.
func (u *Uploader) AbsentFiles(table, root string) ([]delta.VacuumFile, error) {
	var out []delta.VacuumFile
	err := u.opts.DB.View(func(r *store.Reader) error {
		pending := map[string]bool{}
		if err := r.RemoteDeletes(u.opts.Target, table, func(d store.RemoteDelete) error {
			pending[d.Path] = true
			return nil
		}); err != nil {
			return err
		}
		return r.UploadedFiles(u.opts.Target, table, func(f store.UploadedFile) error {
			if pending[f.Path] || strings.HasPrefix(f.Path, delta.LogDirName+"/") {
				return nil
			}
			_, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f.Path)))
			if err == nil {
				return nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w: %w", ErrLocal, err)
			}
			out = append(out, delta.VacuumFile{Path: f.Path, Size: f.Size, ModTime: f.UploadedAt})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("uploader: absent files of %s: %w", table, err)
	}
	return out, nil
}

// planRemoteDeletes records the uploaded files among those a local vacuum
// (or log expiry) is about to delete. The remote deletes one once its
// version reaches the oldest version the local vacuum kept: from there on no
// version the remote serves, and no version inside its retention window,
// needs the file.
func (u *Uploader) planRemoteDeletes(table string, r *delta.VacuumResult) error {
	now := u.opts.Now().UTC()
	err := u.opts.DB.Update(func(w *store.Writer) error {
		st, err := w.UploadState(u.opts.Target, table)
		if err != nil {
			return err
		}
		for _, f := range r.Files {
			ok := false
			if v, isCommit := commitVersion(f.Path); isCommit {
				ok = v <= st.RemoteVersion
			} else if _, ok, err = w.UploadedFile(u.opts.Target, table, f.Path); err != nil {
				return err
			}
			if !ok {
				continue // never uploaded (an orphan): nothing to delete remotely
			}
			d := store.RemoteDelete{Path: f.Path, Size: f.Size, AfterVersion: r.KeptFrom, PlannedAt: now}
			if err := w.PutRemoteDelete(u.opts.Target, table, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("uploader: record remote deletes of %s: %w", table, err)
	}
	return nil
}

// planFleetDeletes records, in the fleet layout, the fleet copies of the
// data and deletion vector files a local vacuum is about to delete: the
// fleet removed each when it took the local version that removed it, and
// it deletes them once it holds the oldest version the local vacuum kept,
// as the site layout does. The fleet's log is not the local one: its
// commits are never deleted so. A file no range ever uploaded (added and
// removed inside one) is deleted all the same: deleting a missing object
// succeeds.
func (u *Uploader) planFleetDeletes(table string, r *delta.VacuumResult) error {
	now := u.opts.Now().UTC()
	err := u.opts.DB.Update(func(w *store.Writer) error {
		for _, f := range r.Files {
			if strings.HasPrefix(f.Path, delta.LogDirName+"/") {
				continue
			}
			d := store.RemoteDelete{Path: f.Path, Size: f.Size, AfterVersion: r.KeptFrom, PlannedAt: now}
			if err := w.PutRemoteDelete(u.opts.Target, table, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("uploader: record fleet deletes of %s: %w", table, err)
	}
	return nil
}

// DeleteRemote deletes from the remote the files that vacuum deleted locally
// once they are safe to delete there, for every table, and returns how many
// it deleted. Every pass of Run and SyncOnce does the same for the tables it
// brought up to date; `lakeside vacuum` calls it when no agent runs.
func (u *Uploader) DeleteRemote(ctx context.Context) (int, error) {
	u.pass.Lock()
	defer u.pass.Unlock()
	tables, err := u.opts.Tables(ctx)
	if err != nil {
		return 0, fmt.Errorf("uploader: %w", err)
	}
	total := 0
	for _, t := range tables {
		n, err := u.deleteRemote(ctx, t)
		total += n
		if err != nil {
			return total, fmt.Errorf("table %s: %w", t.Name, err)
		}
	}
	return total, nil
}

// deleteRemote deletes the pending remote deletes of one table whose file is
// gone locally and whose AfterVersion the remote has reached. Each delete is
// recorded as soon as it succeeded, so it is not repeated after a restart;
// one interrupted before it was recorded is simply repeated (deleting a
// missing object succeeds).
func (u *Uploader) deleteRemote(ctx context.Context, t Table) (int, error) {
	var st store.UploadState
	var due []store.RemoteDelete
	err := u.opts.DB.View(func(r *store.Reader) error {
		var err error
		if st, err = r.UploadState(u.opts.Target, t.Name); err != nil {
			return err
		}
		return r.RemoteDeletes(u.opts.Target, t.Name, func(d store.RemoteDelete) error {
			if d.AfterVersion > st.RemoteVersion {
				return nil
			}
			if strings.HasPrefix(d.Path, delta.LogDirName+"/") {
				// The remote's log must start at a checkpoint it has, and
				// its _last_checkpoint must not name an older one.
				_, ok, err := r.UploadedFile(u.opts.Target, t.Name, delta.LogDirName+"/"+delta.CheckpointFileName(d.AfterVersion))
				if err != nil || !ok || st.CheckpointVersion < d.AfterVersion {
					return err
				}
			}
			due = append(due, d)
			return nil
		})
	})
	if err != nil || st.Stopped != "" {
		return 0, err
	}
	n := 0
	for _, d := range due {
		_, err := os.Lstat(filepath.Join(t.Path, filepath.FromSlash(d.Path)))
		if err == nil {
			continue // the local vacuum did not get to it (yet)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("%w: %w", ErrLocal, err)
		}
		key := t.Name + "/" + d.Path
		if u.opts.Fleet != nil {
			key = t.Name + "/" + fleetObjectPath(u.fleetSiteDir(), d.Path)
		}
		if err := u.client.DeleteObject(ctx, key); err != nil {
			return n, err
		}
		if err := u.opts.DB.Update(func(w *store.Writer) error {
			return w.RemoteDeleted(u.opts.Target, t.Name, d.Path)
		}); err != nil {
			return n, fmt.Errorf("record remote delete: %w", err)
		}
		n++
	}
	if n > 0 {
		u.log.Info("deleted vacuumed files from the replica", "table", t.Name, "files", n)
	}
	return n, nil
}

// Restore downloads the data file at path of table from the remote to dst,
// which must not exist: a file pruned locally that a rewrite needs again.
// It writes a temporary file beside dst and renames it once synced, so dst
// is never half written.
func (u *Uploader) Restore(ctx context.Context, table, path, dst string) error {
	rc, err := u.client.GetObject(ctx, table+"/"+path)
	if err != nil {
		return fmt.Errorf("uploader: restore %s/%s: %w", table, path, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".restore-*")
	if err != nil {
		return fmt.Errorf("uploader: restore: %w: %w", ErrLocal, err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing there
	_, err = io.Copy(tmp, rc)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("uploader: restore %s/%s: %w", table, path, err)
	}
	return nil
}
