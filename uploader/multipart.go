package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/lakeside/lakeside/store"
)

// uploadMultipart uploads a large file in parts, recording the upload id and
// every completed part, so that after a restart the upload continues with
// the first missing part. The completion is conditional (If-None-Match: *).
// On success the file is recorded as uploaded and the multipart record
// deleted in one write.
func (u *Uploader) uploadMultipart(ctx context.Context, t Table, j fileJob, key string, f *os.File, size int64) error {
	mc := u.client
	var m *store.MultipartUpload
	err := u.opts.DB.View(func(r *store.Reader) error {
		var err error
		m, err = r.Multipart(u.opts.Target, t.Name, j.rel)
		return err
	})
	if err != nil {
		return err
	}
	if m != nil && m.Size != size {
		// The local file is not the one the upload started with; start over.
		_ = mc.AbortMultipartUpload(ctx, key, m.UploadID)
		m = nil
	}
	if m == nil {
		id, err := mc.CreateMultipartUpload(ctx, key)
		if err != nil {
			return err
		}
		m = &store.MultipartUpload{Path: j.rel, UploadID: id, Size: size, PartSize: u.opts.PartSize}
		if err := u.saveMultipart(t.Name, m); err != nil {
			return err
		}
	}
	if err := u.uploadParts(ctx, t, j, key, f, size, m); err != nil {
		return err
	}
	slices.SortFunc(m.Parts, func(a, b store.UploadedPart) int { return a.Number - b.Number })
	parts := make([]Part, len(m.Parts))
	for i, p := range m.Parts {
		parts[i] = Part{Number: p.Number, ETag: p.ETag}
	}
	err = mc.CompleteMultipartUpload(ctx, key, m.UploadID, parts, PutOptions{IfNoneMatch: true})
	if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrNoSuchUpload) {
		// Either completed before a crash (the upload id is gone) or the
		// key exists: compare.
		cerr := u.checkSame(ctx, key, io.NewSectionReader(f, 0, size))
		if errors.Is(err, ErrPreconditionFailed) {
			_ = mc.AbortMultipartUpload(ctx, key, m.UploadID)
		}
		if cerr != nil {
			if errors.Is(cerr, ErrRemoteConflict) {
				return cerr
			}
			return u.forgetMultipart(t.Name, j.rel, cerr)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	return u.opts.DB.Update(func(w *store.Writer) error {
		if err := w.DeleteMultipart(u.opts.Target, t.Name, j.rel); err != nil {
			return err
		}
		return w.PutUploadedFile(u.opts.Target, t.Name, store.UploadedFile{
			Path: j.rel, Size: size, Version: j.version, UploadedAt: u.opts.Now().UTC(),
		})
	})
}

// uploadParts uploads the parts of m not yet completed, up to Concurrency at
// a time, and records each completed part.
func (u *Uploader) uploadParts(ctx context.Context, t Table, j fileJob, key string, f *os.File, size int64, m *store.MultipartUpload) error {
	done := map[int]bool{}
	for _, p := range m.Parts {
		done[p.Number] = true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex // guards m.Parts and errs
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, u.opts.Concurrency)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		cancel()
	}
	nparts := int((size + m.PartSize - 1) / m.PartSize)
	for n := 1; n <= nparts && ctx.Err() == nil; n++ {
		if done[n] {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			off := int64(n-1) * m.PartSize
			psize := min(m.PartSize, size-off)
			sha, err := checksum(io.NewSectionReader(f, off, psize), psize)
			if err != nil {
				fail(fmt.Errorf("%w: %s: %w", ErrLocal, j.rel, err))
				return
			}
			body := u.newBody(ctx, f, off, psize, sha)
			etag, err := u.client.UploadPart(ctx, key, m.UploadID, n, body)
			if err != nil {
				fail(err)
				return
			}
			u.bytes.Add(psize)
			mu.Lock()
			defer mu.Unlock()
			m.Parts = append(m.Parts, store.UploadedPart{Number: n, ETag: etag, Size: psize})
			if err := u.saveMultipart(t.Name, m); err != nil {
				errs = append(errs, err)
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, ErrNoSuchUpload) {
			// Expired or aborted on the remote: start over next pass.
			return u.forgetMultipart(t.Name, j.rel, &remoteError{err})
		}
	}
	if len(errs) > 0 {
		return errs[0] // the others are mostly the cancellation it caused
	}
	return ctx.Err()
}

func (u *Uploader) saveMultipart(table string, m *store.MultipartUpload) error {
	if err := u.opts.DB.Update(func(w *store.Writer) error {
		return w.PutMultipart(u.opts.Target, table, m)
	}); err != nil {
		return fmt.Errorf("record multipart upload: %w", err)
	}
	return nil
}

// forgetMultipart drops the record of an upload that cannot continue, and
// returns cause.
func (u *Uploader) forgetMultipart(table, rel string, cause error) error {
	if err := u.opts.DB.Update(func(w *store.Writer) error {
		return w.DeleteMultipart(u.opts.Target, table, rel)
	}); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}
