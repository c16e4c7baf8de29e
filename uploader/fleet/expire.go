package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// ExpireLog deletes the commits and checkpoints of the fleet table's log
// that its retention no longer needs, as Delta's metadata cleanup does: it
// keeps the newest checkpoint whose commit is at or before now less
// retention, that commit, and everything after, and deletes the versions
// before, oldest first, so that the log left is always contiguous. It
// finds that checkpoint among the versions interval apart back from the
// one _last_checkpoint names. The plan depends only on the log and the
// time, and deleting a missing object succeeds, so any site may run it and
// two may run at once. It returns how many objects it deleted.
func (l *Log) ExpireLog(ctx context.Context, now time.Time, retention time.Duration, interval int64) (int, error) {
	if interval <= 0 {
		interval = DefaultCheckpointInterval
	}
	lc, err := l.LastCheckpoint(ctx)
	if err != nil || lc == nil {
		return 0, err
	}
	cutoff := now.Add(-retention).UnixMilli()
	keep := int64(-1)
	for cp := lc.Version; cp > 0; cp -= interval {
		acts, err := l.Read(ctx, cp)
		if errors.Is(err, ErrNotExist) {
			break // expired before: nothing older to delete
		}
		if err != nil {
			return 0, fmt.Errorf("expire log: %w", err)
		}
		if commitMillis(acts) > cutoff {
			continue
		}
		ok, err := l.present(ctx, delta.CheckpointFileName(cp))
		if err != nil {
			return 0, fmt.Errorf("expire log: %w", err)
		}
		if ok {
			keep = cp
			break
		}
	}
	if keep <= 0 {
		return 0, nil
	}
	oldest, err := l.oldest(ctx, keep)
	if err != nil {
		return 0, fmt.Errorf("expire log: %w", err)
	}
	n := 0
	for v := oldest; v < keep; v++ {
		names := []string{delta.CommitFileName(v)}
		if v > 0 && v%interval == 0 {
			names = append([]string{delta.CheckpointFileName(v)}, names...)
		}
		for _, name := range names {
			if err := l.store.Delete(ctx, l.dir+name); err != nil {
				return n, fmt.Errorf("expire log: delete %s: %w", name, err)
			}
			n++
		}
	}
	return n, nil
}

// oldest returns the oldest committed version at or below upTo, which is
// committed: the commits kept are contiguous, so it bisects.
func (l *Log) oldest(ctx context.Context, upTo int64) (int64, error) {
	lo, hi := int64(-1), upTo // lo is not committed (or -1), hi is
	if ok, err := l.exists(ctx, 0); err != nil || ok {
		return 0, err
	}
	lo = 0
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := l.exists(ctx, mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// commitMillis returns the timestamp of a commit's commitInfo, or 0.
func commitMillis(acts []delta.Action) int64 {
	for _, a := range acts {
		if ci, ok := a.(*delta.CommitInfo); ok {
			return ci.Timestamp
		}
	}
	return 0
}
