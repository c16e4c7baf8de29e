package uploader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// syncTable brings one table as close to its local version as the remote
// allows: the data and checkpoint files of the versions go up concurrently,
// and the commit files in order, each only when all files of its version are
// confirmed (see uploadVersions).
func (u *Uploader) syncTable(ctx context.Context, t Table) error {
	st, l, err := u.startPass(ctx, t)
	if err != nil {
		return err
	}
	tbl := delta.New(t.Path)

	// Checkpoints written locally after their commit went up. One that
	// some later commit is no longer local for is not needed (a newer one
	// is), and its data files may never have gone up to this remote.
	var late []fileJob
	for v := range l.checkpoints {
		if v <= st.RemoteVersion && l.commitsFrom(v+1) {
			late = append(late, checkpointJob(t, v))
		}
	}
	if err := u.uploadFiles(ctx, t, late); err != nil {
		return err
	}

	if err := u.startFromCheckpoint(ctx, t, tbl, l, &st); err != nil {
		return err
	}
	if err := u.uploadVersions(ctx, t, tbl, l, &st); err != nil {
		return err
	}
	return u.putLastCheckpoint(ctx, t, &st)
}

// startPass begins a table's pass, in either layout: its upload state
// (ErrTableStopped for a table an operator must look at), its local log,
// and its backlog brought up to date.
func (u *Uploader) startPass(ctx context.Context, t Table) (store.UploadState, *localLog, error) {
	st, err := u.loadState(t.Name)
	if err != nil {
		return st, nil, err
	}
	if st.Stopped != "" {
		u.setRemote(t.Name, st)
		return st, nil, fmt.Errorf("%w: %s", ErrTableStopped, st.Stopped)
	}
	l, err := readLocalLog(t.Path)
	if err != nil {
		return st, nil, err
	}
	u.updateBacklog(ctx, t, l, st)
	return st, l, nil
}

// startFromCheckpoint starts the remote copy of a table at a local
// checkpoint when the remote lacks commits the local log no longer holds.
// The local log keeps old commits only until they are uploaded and past
// retention, so a replica pointed at a new target finds the newest commits
// and their checkpoints, not version 0. The data files of the oldest usable
// checkpoint's snapshot and the checkpoint itself go up; the remote then
// continues from that version, as a table whose older commits were cleaned
// up does: readers start from the checkpoint, and time travel reaches back
// to it. A checkpoint is usable when every commit after it is local.
func (u *Uploader) startFromCheckpoint(ctx context.Context, t Table, tbl *delta.Table, l *localLog, st *store.UploadState) error {
	// The oldest usable checkpoint: the remote gets the history the local
	// log still has.
	from := st.RemoteVersion + 1
	start, restart := l.startCheckpoint(from)
	if !restart {
		return nil
	}
	if start < 0 {
		return fmt.Errorf("%w: commit %d is missing from the local log, and no local checkpoint after it can start the remote copy", ErrLocal, from)
	}
	snap, err := tbl.SnapshotAt(ctx, start)
	if err != nil {
		return fmt.Errorf("%w: read checkpoint %d: %w", ErrLocal, start, err)
	}
	var jobs []fileJob
	var dvs []*delta.DeletionVectorDescriptor
	for _, add := range snap.Files() {
		j, err := dataFileJob(t.Path, start, add.Path)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		dvs = append(dvs, add.DeletionVector)
	}
	dvJobs, err := dvFileJobs(t.Path, start, dvs)
	if err != nil {
		return err
	}
	jobs = append(jobs, dvJobs...)
	if err := u.uploadFiles(ctx, t, jobs); err != nil {
		return err
	}
	// The checkpoint after every file it names.
	if err := u.uploadFiles(ctx, t, []fileJob{checkpointJob(t, start)}); err != nil {
		return err
	}
	u.log.Warn("replica started from a local checkpoint: the commits before it were removed locally after an earlier upload",
		"table", t.Name, "version", start, "data_files", len(jobs), "remote_had", st.RemoteVersion)
	st.RemoteVersion, st.LastSuccess = start, u.opts.Now().UTC()
	return u.saveState(t.Name, *st)
}

func checkpointJob(t Table, v int64) fileJob {
	rel := delta.LogDirName + "/" + delta.CheckpointFileName(v)
	return fileJob{version: v, rel: rel, local: filepath.Join(t.Path, filepath.FromSlash(rel))}
}

func (u *Uploader) saveState(table string, st store.UploadState) error {
	if err := u.opts.DB.Update(func(w *store.Writer) error {
		return w.PutUploadState(u.opts.Target, table, st)
	}); err != nil {
		return fmt.Errorf("save upload state: %w", err)
	}
	u.setRemote(table, st)
	return nil
}

// uploadFiles uploads the files of jobs not yet recorded as uploaded,
// Concurrency at a time, and records those that succeeded in one write.
func (u *Uploader) uploadFiles(ctx context.Context, t Table, jobs []fileJob) error {
	var todo []fileJob
	seen := map[string]bool{}
	err := u.opts.DB.View(func(r *store.Reader) error {
		for _, j := range jobs {
			if seen[j.rel] {
				continue
			}
			seen[j.rel] = true
			_, found, err := r.UploadedFile(u.opts.Target, t.Name, j.rel)
			if err != nil {
				return err
			}
			if !found {
				todo = append(todo, j)
			}
		}
		return nil
	})
	if err != nil || len(todo) == 0 {
		return err
	}
	var (
		mu   sync.Mutex
		done []store.UploadedFile
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, u.opts.Concurrency)
	)
	for _, j := range todo {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			size, err := u.uploadFile(ctx, t, j)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			done = append(done, store.UploadedFile{Path: j.rel, Size: size, Version: j.version, UploadedAt: u.opts.Now().UTC()})
		})
	}
	wg.Wait()
	if len(done) > 0 {
		if err := u.opts.DB.Update(func(w *store.Writer) error {
			for _, f := range done {
				if err := w.PutUploadedFile(u.opts.Target, t.Name, f); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			errs = append(errs, fmt.Errorf("record uploaded files: %w", err))
		}
	}
	return errors.Join(errs...)
}

// uploadFile uploads one immutable file with If-None-Match: * and returns
// its size. When the remote already has the key (our own upload before a
// crash, unrecorded), the bytes are compared.
func (u *Uploader) uploadFile(ctx context.Context, t Table, j fileJob) (int64, error) {
	f, err := os.Open(j.local)
	if err != nil {
		return 0, fmt.Errorf("%w: version %d: %w", ErrLocal, j.version, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	size := fi.Size()
	key := t.Name + "/" + j.rel
	if u.client.mp != nil && size > u.opts.MultipartThreshold {
		return size, u.uploadMultipart(ctx, t, j, key, f, size)
	}
	sha, err := checksum(io.NewSectionReader(f, 0, size), size)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrLocal, j.rel, err)
	}
	body := u.newBody(ctx, f, 0, size, sha)
	err = u.client.PutObject(ctx, key, body, PutOptions{IfNoneMatch: true})
	if errors.Is(err, ErrPreconditionFailed) {
		err = u.checkSame(ctx, key, io.NewSectionReader(f, 0, size))
	}
	if err != nil {
		return 0, err
	}
	u.bytes.Add(size)
	return size, nil
}

// putCommit uploads _delta_log/N.json with If-None-Match: *.
func (u *Uploader) putCommit(ctx context.Context, t Table, v int64) error {
	rel := delta.LogDirName + "/" + delta.CommitFileName(v)
	data, err := os.ReadFile(filepath.Join(t.Path, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLocal, err)
	}
	key := t.Name + "/" + rel
	err = u.putBytes(ctx, key, data, true)
	if errors.Is(err, ErrPreconditionFailed) {
		err = u.checkSame(ctx, key, bytes.NewReader(data))
	}
	return err
}

func (u *Uploader) putBytes(ctx context.Context, key string, data []byte, ifNoneMatch bool) error {
	size := int64(len(data))
	sha, _ := checksum(bytes.NewReader(data), size)
	body := u.newBody(ctx, bytes.NewReader(data), 0, size, sha)
	err := u.client.PutObject(ctx, key, body, PutOptions{IfNoneMatch: ifNoneMatch})
	if err == nil {
		u.bytes.Add(size)
	}
	return err
}

// checkSame compares the remote object at key with local; different bytes
// are a conflict.
func (u *Uploader) checkSame(ctx context.Context, key string, local io.Reader) error {
	rc, err := u.client.GetObject(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return &remoteError{fmt.Errorf("get %s after a failed conditional put: %w", key, err)}
		}
		return err
	}
	defer rc.Close()
	same, err := sameContent(rc, local)
	if err != nil {
		return &remoteError{fmt.Errorf("compare %s: %w", key, err)}
	}
	if !same {
		return fmt.Errorf("%w: %s differs from the local file", ErrRemoteConflict, key)
	}
	return nil
}

// putLastCheckpoint uploads the local _last_checkpoint once the checkpoint
// it names and its commit are on the remote.
func (u *Uploader) putLastCheckpoint(ctx context.Context, t Table, st *store.UploadState) error {
	v, data, ok, err := readLastCheckpoint(t.Path)
	if err != nil || !ok || v > st.RemoteVersion || v <= st.CheckpointVersion {
		return err
	}
	uploaded, err := u.Uploaded(t.Name, delta.LogDirName+"/"+delta.CheckpointFileName(v))
	if err != nil || !uploaded {
		return err
	}
	if err := u.putBytes(ctx, t.Name+"/"+delta.LogDirName+"/"+delta.LastCheckpointName, data, false); err != nil {
		return err
	}
	st.CheckpointVersion = v
	return u.saveState(t.Name, *st)
}

// limit wraps r in the bandwidth limiter, if any.
func (u *Uploader) limit(ctx context.Context, r io.Reader) io.Reader {
	if u.opts.Limiter == nil {
		return r
	}
	return &limitedReader{ctx: ctx, r: r, lim: u.opts.Limiter}
}

// newBody returns the body of size bytes of r from off, read through the
// uploader's bandwidth limit on every attempt.
func (u *Uploader) newBody(ctx context.Context, r io.ReaderAt, off, size int64, sha []byte) Body {
	open := func() io.Reader { return u.limit(ctx, io.NewSectionReader(r, off, size)) }
	return Body{R: open(), Size: size, SHA256: sha, Reopen: open}
}
