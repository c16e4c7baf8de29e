package uploader

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
)

// remoteError marks an error from the replica (as opposed to a local one):
// it makes the uploader go offline and back off.
type remoteError struct{ err error }

func (e *remoteError) Error() string { return e.err.Error() }
func (e *remoteError) Unwrap() error { return e.err }

// isRemote reports whether err comes from the replica.
func isRemote(err error) bool {
	var r *remoteError
	return errors.As(err, &r)
}

// instrumented wraps a ReplicaClient: it counts requests and failed ones,
// and marks failures as remote.
type instrumented struct {
	c        ReplicaClient
	mp       MultipartClient
	requests *atomic.Int64
	failures *atomic.Int64
	// stalls counts the failures that were stalls (ErrStalled).
	stalls *atomic.Int64
}

func (c *instrumented) do(fn func() error) error {
	c.requests.Add(1)
	err := fn()
	if err == nil {
		return nil
	}
	// Answers the caller handles are passed through unmarked.
	if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrNoSuchUpload) {
		return err
	}
	c.failures.Add(1)
	if errors.Is(err, ErrStalled) {
		c.stalls.Add(1)
	}
	return &remoteError{err}
}

func (c *instrumented) PutObject(ctx context.Context, key string, body Body, opts PutOptions) error {
	return c.do(func() error { return c.c.PutObject(ctx, key, body, opts) })
}

func (c *instrumented) GetObject(ctx context.Context, key string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := c.do(func() error {
		var err error
		rc, err = c.c.GetObject(ctx, key)
		return err
	})
	if err != nil && rc != nil {
		rc.Close()
		rc = nil
	}
	return rc, err
}

func (c *instrumented) DeleteObject(ctx context.Context, key string) error {
	return c.do(func() error { return c.c.DeleteObject(ctx, key) })
}

func (c *instrumented) CreateMultipartUpload(ctx context.Context, key string) (string, error) {
	var id string
	err := c.do(func() error {
		var err error
		id, err = c.mp.CreateMultipartUpload(ctx, key)
		return err
	})
	return id, err
}

func (c *instrumented) UploadPart(ctx context.Context, key, uploadID string, number int, body Body) (string, error) {
	var etag string
	err := c.do(func() error {
		var err error
		etag, err = c.mp.UploadPart(ctx, key, uploadID, number, body)
		return err
	})
	return etag, err
}

func (c *instrumented) CompleteMultipartUpload(ctx context.Context, key, uploadID string, parts []Part, opts PutOptions) error {
	return c.do(func() error {
		return c.mp.CompleteMultipartUpload(ctx, key, uploadID, parts, opts)
	})
}

func (c *instrumented) AbortMultipartUpload(ctx context.Context, key, uploadID string) error {
	return c.do(func() error { return c.mp.AbortMultipartUpload(ctx, key, uploadID) })
}

// Type names the wrapped backend.
func (c *instrumented) Type() string { return c.c.Type() }
