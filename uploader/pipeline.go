package uploader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// recordEvery is how many commits go up between two records of the upload
// progress in the state file.
const recordEvery = 64

// pendingVersion is one version on its way to the remote: its data and
// checkpoint files still to upload, and the outcome.
type pendingVersion struct {
	version int64
	// done is closed once every file of the version is uploaded or one
	// failed.
	done chan struct{}

	mu        sync.Mutex
	remaining int
	err       error
}

// fileDone records the outcome of one file of the version.
func (p *pendingVersion) fileDone(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil && p.err == nil {
		p.err = err
	}
	p.remaining--
	if p.remaining == 0 {
		close(p.done)
	}
}

// versionJob is a file to upload and the version waiting for it.
type versionJob struct {
	fileJob
	pv *pendingVersion
}

// uploadVersions uploads the versions after st.RemoteVersion up to the local
// log's latest, as a pipeline:
//
//   - a reader lists the files of each version in order (data files of its
//     add actions and its checkpoint) and hands those not yet uploaded to
//     Concurrency workers, at most Window versions ahead of the commits;
//   - the commits go up one at a time, in version order, each as soon as
//     every file of its version is on the remote (invariant 4 in
//     docs/architecture.md), while the workers already upload the files of
//     the next versions.
//
// Uploaded files and the remote version are recorded in the state file every
// recordEvery versions and at the end, also when the pass fails, so a restart
// resumes where it stopped. st is updated with the new remote version.
func (u *Uploader) uploadVersions(ctx context.Context, t Table, tbl *delta.Table, l *localLog, st *store.UploadState) error {
	if st.RemoteVersion >= l.latest {
		return nil
	}
	// Stopping early stops the reader; the uploads under way finish, so
	// that what reached the remote is known and recorded.
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()

	var (
		mu        sync.Mutex
		completed []store.UploadedFile // uploaded, not yet recorded
		readErr   error
	)
	versions := make(chan *pendingVersion, u.opts.Window)
	jobs := newJobQueue()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(versions)
		defer jobs.close()
		if err := u.readVersions(readCtx, t, tbl, l, st.RemoteVersion+1, versions, jobs); err != nil {
			mu.Lock()
			readErr = err
			mu.Unlock()
		}
	})
	for i := range u.opts.Concurrency {
		// Half the workers (at least one) take large files first, so they
		// go up while the others feed the commits small files in order.
		preferLarge := i < max(1, u.opts.Concurrency/2)
		wg.Go(func() {
			for {
				j, ok := jobs.pop(preferLarge)
				if !ok {
					return
				}
				size, err := u.uploadFile(ctx, t, j.fileJob)
				if err == nil {
					mu.Lock()
					completed = append(completed, store.UploadedFile{Path: j.rel, Size: size, Version: j.version, UploadedAt: u.opts.Now().UTC()})
					mu.Unlock()
				}
				j.pv.fileDone(err)
			}
		})
	}
	record := func(s store.UploadState) error {
		mu.Lock()
		files := completed
		completed = nil
		mu.Unlock()
		return u.recordProgress(t.Name, files, s)
	}
	// Progress is recorded beside the commits, off their path: a record
	// (an fsync) does not hold up the next commit.
	var recordErr error
	records := make(chan store.UploadState, 1)
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for s := range records {
			if err := record(s); err != nil {
				mu.Lock()
				recordErr = err
				mu.Unlock()
			}
		}
	}()
	failedRecord := func() error {
		mu.Lock()
		defer mu.Unlock()
		return recordErr
	}

	var commitErr error
	sinceSave := 0
	for pv := range versions {
		select {
		case <-pv.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if pv.err != nil {
			commitErr = pv.err
			break
		}
		if commitErr = u.putCommit(ctx, t, pv.version); commitErr != nil {
			break
		}
		st.RemoteVersion, st.LastSuccess = pv.version, u.opts.Now().UTC()
		u.versions.Add(1)
		if sinceSave++; sinceSave >= recordEvery {
			select {
			case records <- *st:
				sinceSave = 0
			default: // the previous record is still being written
			}
		}
		if commitErr = failedRecord(); commitErr != nil {
			break
		}
	}
	close(records)
	<-recorded
	stopReading()
	jobs.drop()
	for range versions {
		// Let the reader stop.
	}
	wg.Wait()
	if errors.Is(commitErr, ErrRemoteConflict) {
		st.Stopped = fmt.Sprintf("stopped at version %d: %v; is another agent replicating to this site?", st.RemoteVersion+1, commitErr)
		u.log.Error("table replication stopped", "table", t.Name, "err", commitErr)
	}
	if err := record(*st); err != nil {
		return errors.Join(commitErr, err)
	}
	if commitErr == nil && readErr != nil && !errors.Is(readErr, context.Canceled) {
		return readErr
	}
	if commitErr == nil && st.RemoteVersion < l.latest {
		return ctx.Err()
	}
	return commitErr
}

// readVersions lists the files of the versions from `from` to the latest in
// order, sends each version to versions and queues its files not yet
// uploaded.
func (u *Uploader) readVersions(ctx context.Context, t Table, tbl *delta.Table, l *localLog, from int64,
	versions chan<- *pendingVersion, jobs *jobQueue) error {
	seen := map[string]bool{}
	for v := from; v <= l.latest; v++ {
		if _, ok := l.commits[v]; !ok {
			return fmt.Errorf("%w: commit %d is missing from the local log", ErrLocal, v)
		}
		files, _, err := versionFiles(ctx, tbl, t.Path, v)
		if err != nil {
			return err
		}
		if _, ok := l.checkpoints[v]; ok {
			files = append(files, checkpointJob(t, v))
		}
		var todo []fileJob
		err = u.opts.DB.View(func(r *store.Reader) error {
			for _, f := range files {
				if seen[f.rel] {
					continue // an earlier version uploads it, and commits first
				}
				seen[f.rel] = true
				_, found, err := r.UploadedFile(u.opts.Target, t.Name, f.rel)
				if err != nil {
					return err
				}
				if !found {
					todo = append(todo, f)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		pv := &pendingVersion{version: v, done: make(chan struct{}), remaining: len(todo)}
		if len(todo) == 0 {
			close(pv.done)
		}
		select {
		case versions <- pv:
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, f := range todo {
			large := false
			if fi, err := os.Stat(f.local); err == nil {
				large = fi.Size() > u.opts.MultipartThreshold
			}
			jobs.push(versionJob{fileJob: f, pv: pv}, large)
		}
	}
	return nil
}

// jobQueue holds the files waiting for a worker, large and small ones apart,
// each in version order.
type jobQueue struct {
	mu           sync.Mutex
	cond         *sync.Cond
	small, large []versionJob
	closed       bool
}

func newJobQueue() *jobQueue {
	q := &jobQueue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues a job.
func (q *jobQueue) push(j versionJob, large bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if large {
		q.large = append(q.large, j)
	} else {
		q.small = append(q.small, j)
	}
	q.cond.Signal()
}

// close says no job will be pushed any more; queued jobs are still handed
// out.
func (q *jobQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// drop forgets the queued jobs: the pass is stopping.
func (q *jobQueue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.small, q.large = nil, nil
}

// pop waits for a job, taken from the large ones first when preferLarge;
// ok is false once the queue is closed and empty.
func (q *jobQueue) pop(preferLarge bool) (j versionJob, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.small) == 0 && len(q.large) == 0 && !q.closed {
		q.cond.Wait()
	}
	first, second := &q.small, &q.large
	if preferLarge {
		first, second = second, first
	}
	for _, s := range []*[]versionJob{first, second} {
		if len(*s) > 0 {
			j = (*s)[0]
			*s = (*s)[1:]
			return j, true
		}
	}
	return versionJob{}, false
}

// recordProgress records uploaded files and the table's state in one write.
func (u *Uploader) recordProgress(table string, files []store.UploadedFile, st store.UploadState) error {
	if err := u.opts.DB.Update(func(w *store.Writer) error {
		for _, f := range files {
			if err := w.PutUploadedFile(u.opts.Target, table, f); err != nil {
				return err
			}
		}
		return w.PutUploadState(u.opts.Target, table, st)
	}); err != nil {
		return fmt.Errorf("record upload progress: %w", err)
	}
	u.setRemote(table, st)
	return nil
}
