package uploader

import (
	"context"
	"io"
)

// ReplicaClient is the object store the uploader writes to. Keys are
// slash-separated and relative to the replica root (the URL's prefix and the
// site), for example "public.items/_delta_log/00000000000000000003.json".
// Implementations are safe for concurrent use.
type ReplicaClient interface {
	// Type names the backend, such as "s3" or "file".
	Type() string

	// PutObject stores body under key. With opts.IfNoneMatch the put fails
	// with an error wrapping ErrPreconditionFailed when key exists. The
	// backend sends body's checksums so that the remote verifies them, and
	// fails with ErrChecksumMismatch when it does not match.
	PutObject(ctx context.Context, key string, body Body, opts PutOptions) error

	// GetObject opens the object at key, or fails with an error wrapping
	// ErrNotFound.
	GetObject(ctx context.Context, key string) (io.ReadCloser, error)

	// DeleteObject removes the object at key. Deleting a key that does not
	// exist succeeds, so a delete may be repeated after a crash.
	DeleteObject(ctx context.Context, key string) error
}

// MultipartClient is implemented by backends that can upload a large object
// in parts and resume after a restart: the upload id and the completed parts
// are kept by the caller.
type MultipartClient interface {
	// CreateMultipartUpload starts an upload and returns its id.
	CreateMultipartUpload(ctx context.Context, key string) (uploadID string, err error)
	// UploadPart uploads one part (numbered from 1) and returns its ETag.
	UploadPart(ctx context.Context, key, uploadID string, number int, body Body) (etag string, err error)
	// CompleteMultipartUpload assembles the parts. With opts.IfNoneMatch it
	// fails with ErrPreconditionFailed when key exists; an unknown upload
	// id fails with ErrNoSuchUpload.
	CompleteMultipartUpload(ctx context.Context, key, uploadID string, parts []Part, opts PutOptions) error
	// AbortMultipartUpload discards an upload and its parts.
	AbortMultipartUpload(ctx context.Context, key, uploadID string) error
}

// PutOptions modify a put.
type PutOptions struct {
	// IfNoneMatch makes the put conditional on the key not existing
	// (If-None-Match: *).
	IfNoneMatch bool
}

// Body is the content of a put or of a part: Size bytes read from R, whose
// SHA-256 (and, when not nil, MD5) digests were computed beforehand from the
// same bytes. The uploader sets SHA256 only.
type Body struct {
	R      io.Reader
	Size   int64
	MD5    []byte
	SHA256 []byte
	// Reopen, when set, returns a reader of the same bytes from the start:
	// a client retries the request with it instead of holding the body
	// in memory for a retry.
	Reopen func() io.Reader
}

// Part is a completed part of a multipart upload.
type Part struct {
	Number int
	ETag   string
}
