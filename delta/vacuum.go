package delta

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultDeletedFileRetention is how long a file removed from a table is kept
// for time travel when the table does not set
// delta.deletedFileRetentionDuration: seven days, as in Delta.
const DefaultDeletedFileRetention = 7 * 24 * time.Hour

// DefaultLogRetention is how long commits are kept in the log when the table
// does not set delta.logRetentionDuration: thirty days, as in Delta.
const DefaultLogRetention = 30 * 24 * time.Hour

// VacuumOptions configure Vacuum and ExpireLog.
type VacuumOptions struct {
	// Retention is how far back time travel must keep working. Zero means
	// the table's delta.deletedFileRetentionDuration, or
	// DefaultDeletedFileRetention when the table does not set it.
	Retention time.Duration
	// Now is the time the retention counts back from; zero means the
	// table's clock.
	Now time.Time
	// KeepFrom, when not nil, returns a version whose files must be kept
	// whatever their age, together with those of every later version: for
	// example the oldest version a replica does not have yet.
	KeepFrom func(ctx context.Context) (int64, error)
	// BeforeDelete, when not nil, is called with the files about to be
	// deleted, before the first one is; an error it returns stops the
	// vacuum with nothing deleted. It is not called when nothing is to be
	// deleted or in a dry run.
	BeforeDelete func(ctx context.Context, r *VacuumResult) error
	// DryRun lists what would be deleted without deleting it.
	DryRun bool
	// Absent, when not nil, returns data files the table's log may name
	// that are no longer on local disk (pruned, see Prune), with the time
	// they count from. Vacuum lists those that it would delete were they
	// there, marked Absent, so that BeforeDelete sees them too.
	Absent func(ctx context.Context) ([]VacuumFile, error)
}

// VacuumFile is a data file that vacuum deleted or would delete.
type VacuumFile struct {
	// Path is relative to the table root and slash-separated.
	Path    string
	Size    int64
	ModTime time.Time
	// Absent tells a file that was not on local disk (VacuumOptions.Absent).
	Absent bool
}

// VacuumResult reports what Vacuum deleted, or would delete in a dry run.
type VacuumResult struct {
	// Files are the deleted files, in path order.
	Files []VacuumFile
	// Bytes is the total size of Files.
	Bytes int64
	// Version is the table version the vacuum looked at.
	Version int64
	// KeptFrom is the oldest version whose files were all kept: every
	// version from KeptFrom to Version can still be read.
	KeptFrom int64
	// Cutoff is the retention boundary: a file not referenced by a kept
	// version is deleted only when it was last modified before Cutoff.
	Cutoff time.Time
	// DryRun tells that nothing was deleted.
	DryRun bool
}

// Vacuum deletes the data files that no version still inside the retention
// window references: files removed from the table (remove tombstones) longer
// ago than the retention, and orphan files that no version references (left
// by a crashed write) and that were last modified before the retention
// window. Deletion vector files go by the same rules: one is kept while a
// logical file of a retained version (an add, or a tombstone inside the
// window) names it. Every version whose commit is newer than the retention, and the
// version that was current at its start, keep all their files, so time
// travel to any of them keeps working. The log (_delta_log) and hidden files
// (names starting with "." or "_", except partition directories) are never
// touched.
//
// Vacuum returns what it deleted, also when it fails part way (the error then
// names the files it could not delete).
func (t *Table) Vacuum(ctx context.Context, opts VacuumOptions) (*VacuumResult, error) {
	res, err := t.planVacuum(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	if err := t.deletePlanned(ctx, opts, res); err != nil {
		return res, fmt.Errorf("vacuum: %w", err)
	}
	return res, nil
}

// deletePlanned deletes the files of res (unless a dry run), after
// opts.BeforeDelete; res is left with the files actually deleted.
func (t *Table) deletePlanned(ctx context.Context, opts VacuumOptions, res *VacuumResult) error {
	if res.DryRun || len(res.Files) == 0 {
		return nil
	}
	if opts.BeforeDelete != nil {
		if err := opts.BeforeDelete(ctx, res); err != nil {
			planned := res.Files
			res.Files, res.Bytes = nil, 0
			return fmt.Errorf("%w (nothing deleted of %d files)", err, len(planned))
		}
	}
	planned := res.Files
	res.Files, res.Bytes = nil, 0
	var errs []error
	for _, f := range planned {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		err := os.Remove(filepath.Join(t.root, filepath.FromSlash(f.Path)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		res.Files = append(res.Files, f)
		res.Bytes += f.Size
	}
	return errors.Join(errs...)
}

// vacuumStart checks opts and returns the time vacuum counts from and the
// listing of the log.
func (t *Table) vacuumStart(ctx context.Context, opts VacuumOptions) (time.Time, *logListing, error) {
	if opts.Retention < 0 {
		return time.Time{}, nil, fmt.Errorf("negative retention %s", opts.Retention)
	}
	now := opts.Now
	if now.IsZero() {
		now = t.now()
	}
	l, err := listLog(ctx, t.logDir)
	return now, l, err
}

// planVacuum finds the files Vacuum deletes.
func (t *Table) planVacuum(ctx context.Context, opts VacuumOptions) (*VacuumResult, error) {
	now, l, err := t.vacuumStart(ctx, opts)
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
	retention := opts.Retention
	if retention == 0 {
		retention = deletedFileRetention(latest.metadata)
	}
	cutoff := now.Add(-retention)
	from, err := firstRetainedVersion(l, cutoff)
	if err != nil {
		return nil, err
	}
	keep := from
	if opts.KeepFrom != nil {
		k, err := opts.KeepFrom(ctx)
		if err != nil {
			return nil, fmt.Errorf("keep from: %w", err)
		}
		keep = max(min(from, k), l.minCommit, 0)
	}
	// Checkpoints keep every tombstone younger than the table's retention:
	// within it, the latest snapshot knows every file removed inside the
	// window, and the commits of the window need not be read.
	byTombstones := retention <= deletedFileRetention(latest.metadata)
	refs, err := t.referenced(ctx, l, latest, keep, from, cutoff, byTombstones)
	if err != nil {
		return nil, err
	}
	res := &VacuumResult{Version: latest.version, KeptFrom: keep, Cutoff: cutoff, DryRun: opts.DryRun}
	err = t.eachUnreferenced(latest.metadata.PartitionColumns, refs, cutoff, func(rel string, info fs.FileInfo) error {
		res.Files = append(res.Files, VacuumFile{Path: rel, Size: info.Size(), ModTime: info.ModTime()})
		res.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	if opts.Absent != nil {
		absent, err := opts.Absent(ctx)
		if err != nil {
			return nil, fmt.Errorf("absent files: %w", err)
		}
		for _, f := range absent {
			p, err := ResolvePath(t.root, f.Path)
			if err != nil {
				return nil, err
			}
			if refs[p] || !f.ModTime.Before(cutoff) {
				continue
			}
			f.Absent = true
			res.Files = append(res.Files, f)
			res.Bytes += f.Size
		}
		sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	}
	return res, nil
}

// ExpireLog deletes the log files that time travel within the log retention
// no longer needs (Delta's metadata cleanup): it finds the newest commit
// older than the retention, the newest checkpoint at or before it (C), and
// deletes the commits and checkpoints older than C. The table then reads as
// before from C on; versions before C are no longer reachable. Without such
// a checkpoint nothing is deleted. opts.Retention zero means the table's
// delta.logRetentionDuration or DefaultLogRetention; KeepFrom, when set,
// keeps the log from that version on (C is then a checkpoint at or before
// it). The result lists the deleted files (paths such as
// "_delta_log/00000000000000000003.json") and KeptFrom is C.
func (t *Table) ExpireLog(ctx context.Context, opts VacuumOptions) (*VacuumResult, error) {
	res, err := t.planExpireLog(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("expire log: %w", err)
	}
	if err := t.deletePlanned(ctx, opts, res); err != nil {
		return res, fmt.Errorf("expire log: %w", err)
	}
	return res, nil
}

func (t *Table) planExpireLog(ctx context.Context, opts VacuumOptions) (*VacuumResult, error) {
	now, l, err := t.vacuumStart(ctx, opts)
	if err != nil {
		return nil, err
	}
	latest, err := t.loadSnapshot(ctx, l, l.maxVersion)
	if err != nil {
		return nil, err
	}
	retention := opts.Retention
	if retention == 0 {
		retention = DefaultLogRetention
		if v, ok := latest.metadata.Configuration["delta.logRetentionDuration"]; ok {
			if d, err := parseInterval(v); err == nil && d >= 0 {
				retention = d
			}
		}
	}
	cutoff := now.Add(-retention)
	res := &VacuumResult{Version: latest.version, KeptFrom: max(l.minCommit, 0), Cutoff: cutoff, DryRun: opts.DryRun}
	last, err := firstRetainedVersion(l, cutoff)
	if err != nil {
		return nil, err
	}
	if f, ok := l.commits[last]; ok {
		ts, err := readCommitTimestamp(f)
		if err != nil {
			return nil, err
		}
		if ts.After(cutoff) {
			return res, nil // no commit is older than the retention
		}
	}
	if opts.KeepFrom != nil {
		k, err := opts.KeepFrom(ctx)
		if err != nil {
			return nil, fmt.Errorf("keep from: %w", err)
		}
		last = min(last, k)
	}
	cps := l.checkpointVersionsDesc(last)
	if len(cps) == 0 {
		return res, nil
	}
	keep := cps[0]
	res.KeptFrom = keep
	add := func(path string, v int64) {
		if v >= keep {
			return
		}
		info, err := os.Stat(path)
		if err != nil {
			return // removed meanwhile
		}
		res.Files = append(res.Files, VacuumFile{Path: LogDirName + "/" + filepath.Base(path), Size: info.Size(), ModTime: info.ModTime()})
		res.Bytes += info.Size()
	}
	for v, f := range l.commits {
		add(f.path, v)
	}
	for v, cp := range l.checkpoints {
		for _, p := range cp.paths {
			add(p, v)
		}
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	return res, nil
}

// deletedFileRetention returns the table's delta.deletedFileRetentionDuration,
// or DefaultDeletedFileRetention.
func deletedFileRetention(m *Metadata) time.Duration {
	if v, ok := m.Configuration["delta.deletedFileRetentionDuration"]; ok {
		if d, err := parseInterval(v); err == nil && d >= 0 {
			return d
		}
	}
	return DefaultDeletedFileRetention
}

// firstRetainedVersion returns the oldest version that time travel inside
// the retention window can reach: the newest version committed at or before
// cutoff (the one current at the start of the window), or the oldest commit
// when every commit is newer. Commit timestamps are taken to grow with the
// version (as Delta's time travel does), so it reads only a few of them.
func firstRetainedVersion(l *logListing, cutoff time.Time) (int64, error) {
	versions := make([]int64, 0, len(l.commits))
	for v := range l.commits {
		versions = append(versions, v)
	}
	if len(versions) == 0 {
		return l.maxVersion, nil // only a checkpoint: keep what it holds
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	var readErr error
	// The first version committed after cutoff.
	i := sort.Search(len(versions), func(i int) bool {
		ts, err := readCommitTimestamp(l.commits[versions[i]])
		if err != nil && readErr == nil {
			readErr = err
		}
		return ts.After(cutoff)
	})
	if readErr != nil {
		return 0, readErr
	}
	return versions[max(i-1, 0)], nil
}

// referenced returns the local paths of the files that any version from keep
// to the latest references, where from (at or after keep) is the first
// version inside the retention window. With byTombstones, the versions after
// from are covered by the latest snapshot's tombstones younger than cutoff
// instead of reading their commits.
func (t *Table) referenced(ctx context.Context, l *logListing, latest *Snapshot, keep, from int64, cutoff time.Time, byTombstones bool) (map[string]bool, error) {
	refs := map[string]bool{}
	var err error
	if byTombstones {
		err = t.referencedByTombstones(latest, cutoff, refs)
		if err == nil {
			err = t.referencedBetween(ctx, l, keep, from, refs)
		}
	} else {
		err = t.referencedBetween(ctx, l, keep, latest.version, refs)
	}
	return refs, err
}

// referencedByTombstones adds to refs the files of the latest snapshot and
// those it removed after cutoff (a remove without a deletion timestamp never
// expires).
func (t *Table) referencedByTombstones(latest *Snapshot, cutoff time.Time, refs map[string]bool) error {
	for _, a := range latest.files {
		if err := t.addRef(a.Path, a.DeletionVector, refs); err != nil {
			return err
		}
	}
	for _, r := range latest.tombstones {
		if r.DeletionTimestamp == nil || *r.DeletionTimestamp > cutoff.UnixMilli() {
			if err := t.addRef(r.Path, r.DeletionVector, refs); err != nil {
				return err
			}
		}
	}
	return nil
}

// referencedBetween adds to refs the files that any version from lo to hi
// references: those of the snapshot at lo and those added by the commits
// after it, up to hi.
func (t *Table) referencedBetween(ctx context.Context, l *logListing, lo, hi int64, refs map[string]bool) error {
	first, err := t.loadSnapshot(ctx, l, lo)
	if err != nil {
		return fmt.Errorf("files of version %d: %w", lo, err)
	}
	for _, a := range first.files {
		if err := t.addRef(a.Path, a.DeletionVector, refs); err != nil {
			return err
		}
	}
	// The change data files of version lo are no part of its snapshot.
	if f, ok := l.commits[lo]; ok {
		acts, err := readCommitFile(f.path)
		if err != nil {
			return fmt.Errorf("files of version %d: %w", lo, err)
		}
		for _, a := range acts {
			if c, ok := a.(*AddCDC); ok {
				if err := t.addRef(c.Path, nil, refs); err != nil {
					return err
				}
			}
		}
	}
	for v := lo + 1; v <= hi; v++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, ok := l.commits[v]
		if !ok {
			return fmt.Errorf("files of version %d: %w: commit %d is missing", hi, ErrCorruptLog, v)
		}
		acts, err := readCommitFile(f.path)
		if err != nil {
			return fmt.Errorf("files of version %d: %w", v, err)
		}
		for _, a := range acts {
			var err error
			switch a := a.(type) {
			case *Add:
				err = t.addRef(a.Path, a.DeletionVector, refs)
			case *AddCDC:
				err = t.addRef(a.Path, nil, refs)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// addRef adds to refs the local path of a file named in the log and that
// of the file of its deletion vector dv, if it has one in a file.
func (t *Table) addRef(logPath string, dv *DeletionVectorDescriptor, refs map[string]bool) error {
	p, err := ResolvePath(t.root, logPath)
	if err != nil {
		return err
	}
	refs[p] = true
	if dv == nil {
		return nil
	}
	if p, err = dv.FilePath(t.root); err != nil {
		return fmt.Errorf("deletion vector of %s: %w", logPath, err)
	}
	if p != "" {
		refs[p] = true
	}
	return nil
}

// hiddenName reports whether a file or directory of the table is hidden
// from vacuum: the log, and names starting with "." or "_" other than
// partition directories written before partitionDirName dropped the
// leading "_", such as "_commit_date=2024-01-01", and the change data
// directory, whose files vacuum deletes like data files.
func hiddenName(name string, partitionColumns []string) bool {
	if strings.HasPrefix(name, ".") {
		return true
	}
	if name == ChangeDataDir {
		return false
	}
	if !strings.HasPrefix(name, "_") {
		return false
	}
	for _, c := range partitionColumns {
		if strings.HasPrefix(name, escapePartitionPathPart(c)+"=") {
			return false
		}
	}
	return true
}

// eachUnreferenced calls fn with the slash-separated path below the table's
// root and the file info of every regular file the table's data could be
// (not hidden, see hiddenName) that refs does not hold and that was last
// modified before cutoff: what vacuum and pruning may delete.
func (t *Table) eachUnreferenced(partCols []string, refs map[string]bool, cutoff time.Time, fn func(rel string, info fs.FileInfo) error) error {
	return filepath.WalkDir(t.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if p == t.root {
			return nil
		}
		if hiddenName(d.Name(), partCols) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || refs[p] {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		if !info.Mode().IsRegular() || !info.ModTime().Before(cutoff) {
			return nil
		}
		rel, err := filepath.Rel(t.root, p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), info)
	})
}
