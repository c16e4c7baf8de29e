// Package fleet commits one site's changes into Delta tables shared by many
// sites, with conditional puts and no coordinator (docs/fleet.md): every
// site writes only its own partition of a fleet table, puts each commit
// only where no commit is yet, and on a lost race checks the commit that
// won against the conflict rules before it tries the next version.
package fleet

import (
	"context"
	"errors"
)

// Store is the object store a fleet table lives on. Keys are slash
// separated and relative to the fleet's root. Implementations bound each
// call by a deadline of their own and are safe for concurrent use.
type Store interface {
	// PutIfAbsent stores data at key unless key exists, when it fails
	// with an error wrapping ErrExists (If-None-Match: *).
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// Put stores data at key, replacing any object there. Only
	// _last_checkpoint is ever overwritten, and only after a read showed
	// it older (see Log.advanceLastCheckpoint): the store needs no
	// conditional overwrite.
	Put(ctx context.Context, key string, data []byte) error
	// Delete removes the object at key; deleting a missing key succeeds,
	// so that a delete may be repeated.
	Delete(ctx context.Context, key string) error
	// Get returns the object at key, or an error wrapping ErrNotExist.
	// An object larger than limit bytes fails with ErrTooLarge.
	Get(ctx context.Context, key string, limit int64) ([]byte, error)
}

var (
	// ErrExists is returned by Store.PutIfAbsent when the key exists.
	ErrExists = errors.New("object exists")
	// ErrNotExist is returned by Store.Get when the key does not exist.
	ErrNotExist = errors.New("object does not exist")
	// ErrTooLarge is returned by Store.Get for an object over its limit.
	ErrTooLarge = errors.New("object too large")

	// ErrConflict is returned when a commit of another writer makes this
	// site's commit unsafe: a writer in its partition or of its appId, a
	// schema or protocol change it cannot follow. The table stops at this
	// site until an operator looks; the error says which commit and why.
	ErrConflict = errors.New("fleet conflict")
	// ErrContention is returned when a commit lost its race too many times
	// in a row; it is retried at the next pass, not an error of the table.
	ErrContention = errors.New("fleet contention")
)

// SiteColumn is the partition column every fleet table starts with: the
// site that wrote a file.
const SiteColumn = "_site"

// MaxCommitBytes bounds the size of a commit file a site reads.
const MaxCommitBytes = 256 << 20

// MaxCheckpointBytes bounds the size of a checkpoint file a site reads:
// 1 GiB, read whole into memory. A checkpoint row of a file takes a few
// hundred bytes with its stats, so that is some millions of files, far
// more than a fleet table's sites leave between two compactions.
const MaxCheckpointBytes = 1 << 30

// maxLastCheckpointBytes bounds _last_checkpoint, a small JSON object.
const maxLastCheckpointBytes = 1 << 20
