package uploader

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/uploader/fleet"
)

// FleetStore returns c as the store of fleet tables: its conditional put
// and its reads, with their errors as package fleet names them.
func FleetStore(c ReplicaClient) fleet.Store { return fleetStore{c} }

type fleetStore struct{ c ReplicaClient }

func (s fleetStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	err := s.c.PutObject(ctx, key, bytesBody(data), PutOptions{IfNoneMatch: true})
	if errors.Is(err, ErrPreconditionFailed) {
		return fmt.Errorf("%w: %w", fleet.ErrExists, err)
	}
	return err
}

// Put overwrites key: a plain PutObject, with no condition.
func (s fleetStore) Put(ctx context.Context, key string, data []byte) error {
	return s.c.PutObject(ctx, key, bytesBody(data), PutOptions{})
}

// bytesBody returns data as the body of a put, which a retry reads again.
func bytesBody(data []byte) Body {
	sum := sha256.Sum256(data)
	return Body{R: bytes.NewReader(data), Size: int64(len(data)), SHA256: sum[:],
		Reopen: func() io.Reader { return bytes.NewReader(data) }}
}

func (s fleetStore) Delete(ctx context.Context, key string) error {
	return s.c.DeleteObject(ctx, key)
}

func (s fleetStore) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	rc, err := s.c.GetObject(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", fleet.ErrNotExist, err)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", fleet.ErrNotExist, err)
	}
	if err != nil {
		// The body broke off: as unreachable as a failed request.
		return nil, fmt.Errorf("get %s: %w", key, &remoteError{err})
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("get %s: %w: over %d bytes", key, fleet.ErrTooLarge, limit)
	}
	return data, nil
}
