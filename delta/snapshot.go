package delta

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Snapshot is the state of a table at one version: protocol, metadata, the
// set of data files, tombstones and application transactions.
type Snapshot struct {
	table      *Table
	version    int64
	timestamp  time.Time
	protocol   *Protocol
	metadata   *Metadata
	schema     *StructType
	files      map[string]*Add
	tombstones map[string]*Remove
	txns       map[string]*Txn
	commitInfo *CommitInfo
	now        time.Time
}

// Version returns the version of the snapshot.
func (s *Snapshot) Version() int64 { return s.version }

// Timestamp returns the commit timestamp of the snapshot's version: the
// commitInfo timestamp, or the commit file's modification time.
func (s *Snapshot) Timestamp() time.Time { return s.timestamp }

// Protocol returns the protocol in effect at this version.
func (s *Snapshot) Protocol() *Protocol { return s.protocol }

// Metadata returns the metaData in effect at this version.
func (s *Snapshot) Metadata() *Metadata { return s.metadata }

// Schema returns the table schema at this version.
func (s *Snapshot) Schema() *StructType { return s.schema }

// PartitionColumns returns the partition columns at this version.
func (s *Snapshot) PartitionColumns() []string { return s.metadata.PartitionColumns }

// CommitInfo returns the commitInfo of the snapshot's version, or nil when
// the commit has none or only a checkpoint of that version is left.
func (s *Snapshot) CommitInfo() *CommitInfo { return s.commitInfo }

// Files returns the add actions of the files in the table, sorted by path.
func (s *Snapshot) Files() []*Add {
	out := make([]*Add, 0, len(s.files))
	for _, a := range s.files {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// NumFiles returns the number of files in the table.
func (s *Snapshot) NumFiles() int { return len(s.files) }

// Tombstones returns the remove actions still kept as tombstones, sorted by
// path (then by deletion vector id: one data file may have been removed
// with several deletion vectors).
func (s *Snapshot) Tombstones() []*Remove {
	out := make([]*Remove, 0, len(s.tombstones))
	for _, r := range s.tombstones {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].DeletionVector.UniqueID() < out[j].DeletionVector.UniqueID()
	})
	return out
}

// AppTransactionVersion returns the latest txn version committed by appID, and
// false when the application has none. When the table sets
// delta.setTransactionRetentionDuration, a txn whose lastUpdated is older
// than the retention is expired and ignored; a txn without lastUpdated never
// expires.
func (s *Snapshot) AppTransactionVersion(appID string) (int64, bool) {
	txn, ok := s.txns[appID]
	if !ok {
		return 0, false
	}
	if txn.LastUpdated != nil {
		if ret, ok := s.txnRetention(); ok && *txn.LastUpdated <= s.now.Add(-ret).UnixMilli() {
			return 0, false
		}
	}
	return txn.Version, true
}

// Transactions returns every txn action of the snapshot, expired ones
// included, sorted by appId.
func (s *Snapshot) Transactions() []*Txn {
	out := make([]*Txn, 0, len(s.txns))
	for _, t := range s.txns {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppID < out[j].AppID })
	return out
}

func (s *Snapshot) txnRetention() (time.Duration, bool) {
	v, ok := s.metadata.Configuration["delta.setTransactionRetentionDuration"]
	if !ok {
		return 0, false
	}
	d, err := parseInterval(v)
	if err != nil {
		return 0, false
	}
	return d, true
}

// parseInterval parses a Spark calendar interval of fixed-length units, such
// as "interval 1 days" or "interval 2 weeks 3 hours".
func parseInterval(s string) (time.Duration, error) {
	f := strings.Fields(strings.ToLower(strings.TrimSpace(s)))
	if len(f) > 0 && f[0] == "interval" {
		f = f[1:]
	}
	if len(f) == 0 || len(f)%2 != 0 {
		return 0, fmt.Errorf("bad interval %q", s)
	}
	var total time.Duration
	for i := 0; i < len(f); i += 2 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bad interval %q", s)
		}
		var unit time.Duration
		switch strings.TrimSuffix(f[i+1], "s") {
		case "nanosecond":
			unit = time.Nanosecond
		case "microsecond":
			unit = time.Microsecond
		case "millisecond":
			unit = time.Millisecond
		case "second":
			unit = time.Second
		case "minute":
			unit = time.Minute
		case "hour":
			unit = time.Hour
		case "day":
			unit = 24 * time.Hour
		case "week":
			unit = 7 * 24 * time.Hour
		default:
			return 0, fmt.Errorf("bad interval unit in %q", s)
		}
		total += time.Duration(n) * unit
	}
	return total, nil
}

// FormatInterval writes d in the interval syntax of the table properties
// delta.deletedFileRetentionDuration and delta.logRetentionDuration, in
// the largest unit that counts it whole, for example "interval 7 days".
func FormatInterval(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "days"}, {time.Hour, "hours"}, {time.Minute, "minutes"}, {time.Second, "seconds"}, {time.Millisecond, "milliseconds"}} {
		if d%u.d == 0 {
			return fmt.Sprintf("interval %d %s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("interval %d microseconds", d/time.Microsecond)
}

// LatestVersion returns the newest version of the table.
func (t *Table) LatestVersion(ctx context.Context) (int64, error) {
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return -1, err
	}
	if l.maxVersion < 0 {
		return -1, fmt.Errorf("latest version: %w: empty log", ErrNotATable)
	}
	return l.maxVersion, nil
}

// Snapshot returns the snapshot of the latest version.
func (t *Table) Snapshot(ctx context.Context) (*Snapshot, error) {
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if l.maxVersion < 0 {
		return nil, fmt.Errorf("snapshot: %w: empty log", ErrNotATable)
	}
	return t.loadSnapshot(ctx, l, l.maxVersion)
}

// SnapshotAt returns the snapshot of the given version.
func (t *Table) SnapshotAt(ctx context.Context, version int64) (*Snapshot, error) {
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot at %d: %w", version, err)
	}
	return t.loadSnapshot(ctx, l, version)
}

// SnapshotAsOf returns the snapshot of the latest version whose commit
// timestamp is at or before ts. It fails with an error wrapping
// ErrVersionNotFound when ts is before the earliest commit.
func (t *Table) SnapshotAsOf(ctx context.Context, ts time.Time) (*Snapshot, error) {
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return nil, fmt.Errorf("snapshot as of %s: %w", ts.Format(time.RFC3339Nano), err)
	}
	versions := make([]int64, 0, len(l.commits))
	for v := range l.commits {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	best := int64(-1)
	for _, v := range versions {
		cts, err := readCommitTimestamp(l.commits[v])
		if err != nil {
			return nil, fmt.Errorf("snapshot as of: %w", err)
		}
		if !cts.After(ts) {
			best = v
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("snapshot as of %s: %w: timestamp is before the earliest commit",
			ts.UTC().Format(time.RFC3339Nano), ErrVersionNotFound)
	}
	return t.loadSnapshot(ctx, l, best)
}

// CommitTimestamp returns the commit timestamp of a version.
func (t *Table) CommitTimestamp(ctx context.Context, version int64) (time.Time, error) {
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return time.Time{}, err
	}
	f, ok := l.commits[version]
	if !ok {
		return time.Time{}, fmt.Errorf("commit timestamp: %w: no commit file for version %d", ErrVersionNotFound, version)
	}
	return readCommitTimestamp(f)
}

// ReadCommit returns the actions of one commit file, skipping action kinds
// this package does not model (domainMetadata...).
func (t *Table) ReadCommit(ctx context.Context, version int64) ([]Action, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	acts, err := readCommitFile(filepath.Join(t.logDir, CommitFileName(version)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read commit %d: %w: %v", version, ErrVersionNotFound, err)
	}
	return acts, err
}

// readCommitTimestamp reads only the commitInfo line of a commit file.
func readCommitTimestamp(f logFile) (time.Time, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return time.Time{}, fmt.Errorf("read commit timestamp: %w", err)
	}
	defer fh.Close()
	r := bufio.NewReaderSize(fh, 64*1024)
	for {
		line, err := r.ReadBytes('\n')
		trimmed := bytes.TrimSpace(line)
		if bytes.HasPrefix(trimmed, []byte(`{"commitInfo"`)) {
			var l actionLine
			if jerr := json.Unmarshal(trimmed, &l); jerr == nil && l.CommitInfo != nil && l.CommitInfo.Timestamp != 0 {
				return time.UnixMilli(l.CommitInfo.Timestamp).UTC(), nil
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("read commit timestamp: %w", err)
		}
	}
	return f.modTime.UTC(), nil
}

// replayState accumulates actions during log replay. files holds the
// table's logical files by path (a data file is in the table with one
// deletion vector at most), tombstones the removed ones by logicalKey.
type replayState struct {
	protocol   *Protocol
	metadata   *Metadata
	files      map[string]*Add
	tombstones map[string]*Remove
	txns       map[string]*Txn
}

func newReplayState() *replayState {
	return &replayState{files: map[string]*Add{}, tombstones: map[string]*Remove{}, txns: map[string]*Txn{}}
}

// fileKey is the key of a logical file: its decoded path.
func fileKey(p string) string {
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// logicalKey is the key of a logical file: its decoded path and its
// deletion vector's unique id.
func logicalKey(path string, dv *DeletionVectorDescriptor) string {
	return fileKey(path) + "\x00" + dv.UniqueID()
}

// apply applies the actions of one commit (or checkpoint). A remove takes
// a file out of the table only when it names its deletion vector too, so
// that the remove of a file's old deletion vector and the add of its new
// one, in one commit, leave the new one whatever their order.
func (st *replayState) apply(acts []Action) {
	for _, a := range acts {
		switch a := a.(type) {
		case *Add:
			st.files[fileKey(a.Path)] = a
			delete(st.tombstones, logicalKey(a.Path, a.DeletionVector))
		case *Remove:
			k := fileKey(a.Path)
			if cur, ok := st.files[k]; ok && cur.DeletionVector.UniqueID() == a.DeletionVector.UniqueID() {
				delete(st.files, k)
			}
			st.tombstones[logicalKey(a.Path, a.DeletionVector)] = a
		case *Metadata:
			st.metadata = a
		case *Protocol:
			st.protocol = a
		case *Txn:
			st.txns[a.AppID] = a
		}
	}
}

// loadSnapshot replays the log up to version, starting from the newest usable
// checkpoint at or below it.
func (t *Table) loadSnapshot(ctx context.Context, l *logListing, version int64) (*Snapshot, error) {
	if version < 0 || version > l.maxVersion {
		return nil, fmt.Errorf("snapshot at %d: %w: latest version is %d", version, ErrVersionNotFound, l.maxVersion)
	}
	candidates := l.checkpointVersionsDesc(version)
	// _last_checkpoint is only a hint here: the listing is authoritative, so a
	// missing or corrupt _last_checkpoint changes nothing.
	if lc, err := readLastCheckpoint(t.logDir); err != nil {
		t.logger.Warn("delta: ignoring unreadable _last_checkpoint", "table", t.root, "err", err)
	} else if lc != nil {
		if _, ok := l.checkpoints[lc.Version]; !ok && lc.Version <= version {
			t.logger.Warn("delta: _last_checkpoint names a missing checkpoint", "table", t.root, "version", lc.Version)
		}
	}

	var st *replayState
	start := int64(0)
	for _, cp := range candidates {
		if err := requireCommits(l, cp+1, version); err != nil {
			return nil, fmt.Errorf("snapshot at %d: %w", version, err)
		}
		s, err := t.readCheckpoint(ctx, l.checkpoints[cp])
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			t.logger.Warn("delta: skipping unreadable checkpoint", "table", t.root, "version", cp, "err", err)
			continue
		}
		st, start = s, cp+1
		break
	}
	if st == nil {
		if _, ok := l.commits[0]; !ok {
			if len(l.checkpoints) > 0 {
				return nil, fmt.Errorf("snapshot at %d: %w: no checkpoint at or before it and version 0 is gone", version, ErrVersionNotFound)
			}
			return nil, fmt.Errorf("snapshot at %d: %w: version 0 is missing and there is no checkpoint", version, ErrCorruptLog)
		}
		if err := requireCommits(l, 0, version); err != nil {
			return nil, fmt.Errorf("snapshot at %d: %w", version, err)
		}
		st = newReplayState()
	}

	var lastActs []Action
	for v := start; v <= version; v++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		acts, err := readCommitFile(l.commits[v].path)
		if err != nil {
			return nil, fmt.Errorf("snapshot at %d: %w", version, err)
		}
		st.apply(acts)
		lastActs = acts
	}

	s := &Snapshot{
		table: t, version: version, protocol: st.protocol, metadata: st.metadata,
		files: st.files, tombstones: st.tombstones, txns: st.txns, now: t.now(),
	}
	if f, ok := l.commits[version]; ok {
		if start > version { // the commit was not replayed: read it for its commitInfo
			if acts, err := readCommitFile(f.path); err == nil {
				lastActs = acts
			}
		}
		s.timestamp = commitTimestamp(f, lastActs)
		for _, a := range lastActs {
			if ci, ok := a.(*CommitInfo); ok {
				s.commitInfo = ci
			}
		}
	} else if cp, ok := l.checkpoints[version]; ok {
		if info, err := os.Stat(cp.paths[0]); err == nil {
			s.timestamp = info.ModTime().UTC()
		}
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("snapshot at %d: %w", version, err)
	}
	return s, nil
}

// requireCommits fails unless every commit from..to is in the listing.
func requireCommits(l *logListing, from, to int64) error {
	for v := from; v <= to; v++ {
		if _, ok := l.commits[v]; !ok {
			return fmt.Errorf("%w: versions are not contiguous: commit %d is missing", ErrCorruptLog, v)
		}
	}
	return nil
}

// supportedReaderFeatures are the reader table features this package reads
// correctly.
func supportedReaderFeature(name string) bool {
	switch name {
	case "timestampNtz", "vacuumProtocolCheck", ColumnMappingFeature, DeletionVectorsFeature, TypeWideningFeature:
		// A widened column's older files hold the narrower type, which
		// the reader converts (parquet primitiveConverter).
		return true
	}
	return false
}

// validate checks that the snapshot is complete and readable by this package.
func (s *Snapshot) validate() error {
	if s.protocol == nil {
		return fmt.Errorf("%w: no protocol action", ErrCorruptLog)
	}
	if s.metadata == nil {
		return fmt.Errorf("%w: no metaData action", ErrCorruptLog)
	}
	if err := checkReadSupport(s.protocol, s.metadata); err != nil {
		return err
	}
	if s.metadata.SchemaString == "" {
		// Some old writers left the schema out; the snapshot has no columns.
		s.schema = &StructType{}
		return nil
	}
	schema, err := s.metadata.Schema()
	if err != nil {
		return err
	}
	if s.ColumnMappingMode() == ColumnMappingNone && hasColumnMapping(schema) {
		// The protocol says to ignore the mapping then: columns go by
		// their display names.
		schema = withoutColumnMapping(schema)
	}
	s.schema = schema
	return nil
}

// checkReadSupport returns an error wrapping ErrUnsupportedFeature when this
// package cannot read a table with the given protocol and metadata. Column
// mapping is read in mode name (and none), not in mode id.
func checkReadSupport(p *Protocol, md *Metadata) error {
	switch {
	case p.MinReaderVersion == 1, p.MinReaderVersion == 2:
	case p.MinReaderVersion == 3:
		var bad []string
		for _, f := range p.ReaderFeatures {
			if !supportedReaderFeature(f) {
				bad = append(bad, f)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%w: reader features %s", ErrUnsupportedFeature, strings.Join(bad, ", "))
		}
	default:
		return fmt.Errorf("%w: reader version %d", ErrUnsupportedFeature, p.MinReaderVersion)
	}
	switch m := ColumnMappingMode(p, md); m {
	case ColumnMappingNone, ColumnMappingName:
	default:
		return fmt.Errorf("%w: column mapping mode %q (only %q is read)", ErrUnsupportedFeature, m, ColumnMappingName)
	}
	return nil
}
