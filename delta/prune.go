package delta

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// PruneOptions configure Prune.
type PruneOptions struct {
	// Retention is how far back local time travel keeps working: the files
	// of every version inside it stay (with KeepLatest), and no file
	// written inside it is pruned. It must be positive.
	Retention time.Duration
	// Now is the time the retention counts back from; zero means the
	// table's clock.
	Now time.Time
	// KeepLatest keeps every file of the latest version whatever its age,
	// for a table whose writer reads them back (a table rewritten by
	// merges), together with the files of the versions inside the
	// retention. Without it (an append-only table, whose versions all share
	// their old files) a file stays only while it was written inside the
	// retention.
	KeepLatest bool
	// Archived reports whether the data file at path (relative to the table
	// root, slash-separated) is kept elsewhere, for example uploaded to a
	// replica. Only such files are pruned; it must not be nil.
	Archived func(ctx context.Context, path string) (bool, error)
	// DryRun lists what would be pruned without deleting it.
	DryRun bool
}

// Prune deletes local data files that are archived elsewhere (see
// PruneOptions.Archived) and that recent versions do not need, while the
// log keeps referencing them: the table's history stays complete where it
// is archived, and the local copy holds only what its writer and local
// time travel within the retention read. Files not archived, hidden files
// and the log are never touched. A read of a pruned version fails with an
// error wrapping fs.ErrNotExist (see Snapshot.ScanFiles).
//
// Prune returns what it deleted, also when it fails part way.
func (t *Table) Prune(ctx context.Context, opts PruneOptions) (*VacuumResult, error) {
	res, err := t.planPrune(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	if err := t.deletePlanned(ctx, VacuumOptions{}, res); err != nil {
		return res, fmt.Errorf("prune: %w", err)
	}
	return res, nil
}

// planPrune finds the files Prune deletes.
func (t *Table) planPrune(ctx context.Context, opts PruneOptions) (*VacuumResult, error) {
	if opts.Retention <= 0 {
		return nil, fmt.Errorf("retention %s is not positive", opts.Retention)
	}
	if opts.Archived == nil {
		return nil, errors.New("no archive to check files against")
	}
	now, l, err := t.vacuumStart(ctx, VacuumOptions{Retention: opts.Retention, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	if l.maxVersion < 0 {
		return nil, fmt.Errorf("%w: empty log", ErrNotATable)
	}
	latest, err := t.loadSnapshot(ctx, l, l.maxVersion)
	if err != nil {
		return nil, err
	}
	cutoff := now.Add(-opts.Retention)
	// Without KeepLatest no version is sure to read in full.
	res := &VacuumResult{Version: latest.version, KeptFrom: latest.version + 1, Cutoff: cutoff, DryRun: opts.DryRun}
	refs := map[string]bool{}
	if opts.KeepLatest {
		from, err := firstRetainedVersion(l, cutoff)
		if err != nil {
			return nil, err
		}
		from = max(from, l.minCommit, 0)
		byTombstones := opts.Retention <= deletedFileRetention(latest.metadata)
		if refs, err = t.referenced(ctx, l, latest, from, from, cutoff, byTombstones); err != nil {
			return nil, err
		}
		res.KeptFrom = from
	}
	err = t.eachUnreferenced(latest.metadata.PartitionColumns, refs, cutoff, func(rel string, info fs.FileInfo) error {
		ok, err := opts.Archived(ctx, rel)
		if err != nil {
			return fmt.Errorf("archived %s: %w", rel, err)
		}
		if !ok {
			return nil
		}
		res.Files = append(res.Files, VacuumFile{Path: rel, Size: info.Size(), ModTime: info.ModTime()})
		res.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	return res, nil
}
