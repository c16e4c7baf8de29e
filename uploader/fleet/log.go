package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/lakeside/lakeside/delta"
)

// Log is the Delta log of one fleet table on a Store.
type Log struct {
	store Store
	name  string // the table's directory
	dir   string // "<table>/_delta_log/"
}

// NewLog returns the log of the fleet table named table.
func NewLog(store Store, table string) *Log {
	return &Log{store: store, name: table, dir: table + "/" + delta.LogDirName + "/"}
}

// table returns the directory name of the log's table.
func (l *Log) table() string { return l.name }

// Read returns the actions of version v, or an error wrapping ErrNotExist.
func (l *Log) Read(ctx context.Context, v int64) ([]delta.Action, error) {
	data, err := l.store.Get(ctx, l.dir+delta.CommitFileName(v), MaxCommitBytes)
	if err != nil {
		return nil, fmt.Errorf("read version %d: %w", v, err)
	}
	acts, err := delta.ParseCommit(data)
	if err != nil {
		return nil, fmt.Errorf("read version %d: %w", v, err)
	}
	return acts, nil
}

// put writes version v, or fails with an error wrapping ErrExists when a
// commit holds it already.
func (l *Log) put(ctx context.Context, v int64, data []byte) error {
	if err := l.store.PutIfAbsent(ctx, l.dir+delta.CommitFileName(v), data); err != nil {
		return fmt.Errorf("put version %d: %w", v, err)
	}
	return nil
}

// exists reports whether version v is committed.
func (l *Log) exists(ctx context.Context, v int64) (bool, error) {
	_, err := l.store.Get(ctx, l.dir+delta.CommitFileName(v), MaxCommitBytes)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("read version %d: %w", v, err)
}

// Latest returns the newest committed version, knowing that version known
// is committed (-1: nothing known). Versions are contiguous, so it probes
// forward in doubling steps and then bisects: a site far behind finds the
// head in a number of reads logarithmic in how far behind it is.
func (l *Log) Latest(ctx context.Context, known int64) (int64, error) {
	lo, step := known, int64(1) // lo is committed (or -1)
	hi := int64(-1)             // hi, once set, is not committed
	for hi < 0 {
		ok, err := l.exists(ctx, lo+step)
		if err != nil {
			return -1, err
		}
		if !ok {
			hi = lo + step
			break
		}
		lo, step = lo+step, step*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := l.exists(ctx, mid)
		if err != nil {
			return -1, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
