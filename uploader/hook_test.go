package uploader_test

import (
	"context"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/uploader"
)

// request describes one request to the replica, for a hook.
type request struct {
	// Op is "put", "get", "delete", "create-multipart", "upload-part",
	// "complete-multipart" or "abort-multipart".
	Op  string
	Key string
	// After is false when the hook runs before the request and true when
	// it runs after the request succeeded.
	After bool
}

// hookFunc runs before every request to the replica and after every
// successful one; an error it returns fails the request. The tests use it
// as a failpoint, to simulate a crash at the N-th request, and to watch the
// requests go by.
type hookFunc func(ctx context.Context, r request) error

// withHook is an option of newUploader that runs hook around the
// requests to the replica: it wraps the client, which keeps the
// multipart upload when it has one. The uploader sees a failed request
// (counted as sent) as it would a failure of the replica.
func withHook(hook hookFunc) func(*uploader.Options) {
	return func(o *uploader.Options) {
		h := &hooked{c: o.Client, hook: hook}
		if mp, ok := o.Client.(uploader.MultipartClient); ok {
			o.Client = &hookedMultipart{hooked: h, mp: mp}
		} else {
			o.Client = h
		}
	}
}

// hooked is a ReplicaClient that runs a hook around the requests of c.
type hooked struct {
	c    uploader.ReplicaClient
	hook hookFunc
}

func (h *hooked) do(ctx context.Context, op, key string, fn func() error) error {
	if err := h.hook(ctx, request{Op: op, Key: key}); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	if err := fn(); err != nil {
		return err
	}
	if err := h.hook(ctx, request{Op: op, Key: key, After: true}); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	return nil
}

func (h *hooked) Type() string { return h.c.Type() }

func (h *hooked) PutObject(ctx context.Context, key string, body uploader.Body, opts uploader.PutOptions) error {
	return h.do(ctx, "put", key, func() error { return h.c.PutObject(ctx, key, body, opts) })
}

func (h *hooked) GetObject(ctx context.Context, key string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := h.do(ctx, "get", key, func() error {
		var err error
		rc, err = h.c.GetObject(ctx, key)
		return err
	})
	if err != nil && rc != nil {
		rc.Close()
		rc = nil
	}
	return rc, err
}

func (h *hooked) DeleteObject(ctx context.Context, key string) error {
	return h.do(ctx, "delete", key, func() error { return h.c.DeleteObject(ctx, key) })
}

// hookedMultipart is hooked for a client that uploads in parts.
type hookedMultipart struct {
	*hooked
	mp uploader.MultipartClient
}

func (h *hookedMultipart) CreateMultipartUpload(ctx context.Context, key string) (string, error) {
	var id string
	err := h.do(ctx, "create-multipart", key, func() error {
		var err error
		id, err = h.mp.CreateMultipartUpload(ctx, key)
		return err
	})
	return id, err
}

func (h *hookedMultipart) UploadPart(ctx context.Context, key, uploadID string, number int, body uploader.Body) (string, error) {
	var etag string
	err := h.do(ctx, "upload-part", key, func() error {
		var err error
		etag, err = h.mp.UploadPart(ctx, key, uploadID, number, body)
		return err
	})
	return etag, err
}

func (h *hookedMultipart) CompleteMultipartUpload(ctx context.Context, key, uploadID string, parts []uploader.Part, opts uploader.PutOptions) error {
	return h.do(ctx, "complete-multipart", key, func() error {
		return h.mp.CompleteMultipartUpload(ctx, key, uploadID, parts, opts)
	})
}

func (h *hookedMultipart) AbortMultipartUpload(ctx context.Context, key, uploadID string) error {
	return h.do(ctx, "abort-multipart", key, func() error { return h.mp.AbortMultipartUpload(ctx, key, uploadID) })
}
