package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	ok, err := l.present(ctx, delta.CommitFileName(v))
	if err != nil {
		return false, fmt.Errorf("read version %d: %w", v, err)
	}
	return ok, nil
}

// present reports whether the log file name is there, reading at most a
// byte of it: every file of a log holds at least one, so a read past a
// limit of zero says it exists without fetching it.
func (l *Log) present(ctx context.Context, name string) (bool, error) {
	_, err := l.store.Get(ctx, l.dir+name, 0)
	switch {
	case err == nil, errors.Is(err, ErrTooLarge):
		return true, nil
	case errors.Is(err, ErrNotExist):
		return false, nil
	}
	return false, err
}

// Latest returns the newest committed version, knowing that version known
// is committed (-1: nothing known, when it starts from the checkpoint
// _last_checkpoint names, if any). Versions are contiguous, so it probes
// forward in doubling steps and then bisects: a site far behind finds the
// head in a number of reads logarithmic in how far behind it is. Starting
// from the checkpoint finds the head even when log expiry has deleted the
// commits before it.
func (l *Log) Latest(ctx context.Context, known int64) (int64, error) {
	if known < 0 {
		lc, err := l.LastCheckpoint(ctx)
		switch {
		case err == nil && lc != nil:
			known = lc.Version
		case err != nil && !errors.Is(err, delta.ErrCorruptLog):
			return -1, err
		}
	}
	return l.latestFrom(ctx, known)
}

// latestFrom is Latest without reading _last_checkpoint.
func (l *Log) latestFrom(ctx context.Context, known int64) (int64, error) {
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

// LastCheckpoint returns what _last_checkpoint says: the version of the
// newest checkpoint, or nil when there is none. One that does not parse
// fails with an error wrapping delta.ErrCorruptLog.
func (l *Log) LastCheckpoint(ctx context.Context) (*delta.LastCheckpoint, error) {
	data, err := l.store.Get(ctx, l.dir+delta.LastCheckpointName, maxLastCheckpointBytes)
	if errors.Is(err, ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", delta.LastCheckpointName, err)
	}
	lc, err := delta.ParseLastCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", delta.LastCheckpointName, err)
	}
	return lc, nil
}

// checkpointNames returns the names of the files of the checkpoint lc
// names: one, or the parts of a multi-part checkpoint.
func checkpointNames(lc *delta.LastCheckpoint) []string {
	if lc.Parts == nil || *lc.Parts <= 1 {
		return []string{delta.CheckpointFileName(lc.Version)}
	}
	names := make([]string, *lc.Parts)
	for i := range names {
		names[i] = delta.CheckpointPartFileName(lc.Version, i+1, *lc.Parts)
	}
	return names
}

// downloadCheckpoint copies the files of the checkpoint lc names into the
// directory dir, under their names in the log, and returns their paths.
// Each file is read whole, up to MaxCheckpointBytes.
func (l *Log) downloadCheckpoint(ctx context.Context, lc *delta.LastCheckpoint, dir string) ([]string, error) {
	var paths []string
	for _, name := range checkpointNames(lc) {
		data, err := l.store.Get(ctx, l.dir+name, MaxCheckpointBytes)
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", lc.Version, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", lc.Version, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// download copies the commits from..to, as they are, into the directory
// dir, under their names in the log.
func (l *Log) download(ctx context.Context, from, to int64, dir string) error {
	for v := from; v <= to; v++ {
		data, err := l.store.Get(ctx, l.dir+delta.CommitFileName(v), MaxCommitBytes)
		if err != nil {
			return fmt.Errorf("read version %d: %w", v, err)
		}
		if err := os.WriteFile(filepath.Join(dir, delta.CommitFileName(v)), data, 0o644); err != nil {
			return fmt.Errorf("read version %d: %w", v, err)
		}
	}
	return nil
}

// putCheckpoint puts the checkpoint of version v, unless a checkpoint of v
// is there, when it fails with an error wrapping ErrExists: another site
// wrote it, and either copy is valid.
func (l *Log) putCheckpoint(ctx context.Context, v int64, data []byte) error {
	if err := l.store.PutIfAbsent(ctx, l.dir+delta.CheckpointFileName(v), data); err != nil {
		return fmt.Errorf("put checkpoint %d: %w", v, err)
	}
	return nil
}

// advanceLastCheckpoint points _last_checkpoint at next, unless it names
// next's version or a newer one already: it only moves forward. The store
// has no put conditional on what it overwrites, so the check is a read
// before the put, and a site slow between the two may take it back past a
// newer checkpoint put in between (docs/fleet.md, "Checkpoints"). That is
// harmless, since a reader lists the log forward from it, and made rare:
// when the version nextDue, whose committer checkpoints next, is
// committed already, a newer checkpoint is on its way and this one is
// left out of _last_checkpoint.
func (l *Log) advanceLastCheckpoint(ctx context.Context, next *delta.LastCheckpoint, nextDue int64) error {
	cur, err := l.LastCheckpoint(ctx)
	if err != nil && !errors.Is(err, delta.ErrCorruptLog) {
		return err
	}
	if cur != nil && cur.Version >= next.Version {
		return nil
	}
	if nextDue > next.Version {
		ok, err := l.exists(ctx, nextDue)
		if err != nil || ok {
			return err
		}
	}
	data, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := l.store.Put(ctx, l.dir+delta.LastCheckpointName, data); err != nil {
		return fmt.Errorf("put %s: %w", delta.LastCheckpointName, err)
	}
	return nil
}
