package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Compaction bin-packs the small data files of the Delta tables into
// files near CompactOptions.TargetFileSize (delta.PlanOptimize): per
// partition in a changelog, and in a mirror per run of files adjacent in
// key order, so that merged files still cover disjoint, contiguous key
// ranges (see mirror.go) and at most TargetFileRows rows, as the merge
// writes them. A commit of it (operation OPTIMIZE) removes and adds files
// with dataChange false: every version reads the same rows, and change
// data feeds see no change.
//
// Concurrency. A compaction plans and writes its files on its own
// goroutine, reading files the applier no longer changes (a committed
// file is never modified, only removed). Its commit is made by the
// applier's goroutine between two flushes (Applier.commitCompaction, served
// by Run), so that the applier's view of its tables (version, a mirror's
// files) is brought up to date in the same step, and a flush never meets a
// version it did not expect. There every bin is checked against the
// latest version: a bin with a file a flush removed meanwhile (a merge
// rewrote it) is dropped, its file deleted, and planned again at the next
// pass. Without a running applier (the agent stopped) a compaction commits
// itself, with the same check, and retries when another commit takes
// the version first (delta.Table.CommitOptimize).

// CompactOptions configure a compaction.
type CompactOptions struct {
	// TablesDir holds the tables.
	TablesDir string
	// Tables, when set, are the only tables (directory names) looked at.
	Tables []string
	// Skip, when set, leaves out the tables (directory names) for which
	// it returns true; a pass over a table stops at the next file it
	// would read once Skip returns true for it.
	Skip func(table string) bool
	// TargetFileSize is the size of the files compaction writes (bytes).
	TargetFileSize int64
	// TargetFileRows bounds the rows of a mirror's merged file.
	TargetFileRows int64
	// MinFiles is how many files the bins of a table must take in all
	// before it is compacted; zero or one compacts any bin.
	MinFiles int
	// DryRun plans and reports without writing anything.
	DryRun bool
	// Pace, when set, is called with the bytes about to be read or just
	// written, and may wait (the bandwidth limit).
	Pace func(ctx context.Context, bytes int64) error
	// Write are the options of the files written.
	Write delta.WriteOptions
	// EngineInfo goes into the commitInfo.
	EngineInfo string
	// CheckpointInterval is the least number of versions between
	// checkpoints for a commit made without an applier (default 10).
	CheckpointInterval int64
	// FixedCheckpoints checkpoints those commits every CheckpointInterval
	// versions, as Config.FixedCheckpoints does the applier's.
	FixedCheckpoints bool
	// Logger receives progress; nil means slog.Default().
	Logger *slog.Logger
}

// CompactReport is what a compaction of the tables did (or, in a dry run,
// would do).
type CompactReport struct {
	DryRun bool           `json:"dry_run"`
	Tables []TableCompact `json:"tables"`
}

// TableCompact is the compaction of one table.
type TableCompact struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// FilesBefore and FilesAfter count the data files of the latest
	// version before and after; SmallBefore and SmallAfter the small ones.
	FilesBefore int `json:"files_before"`
	FilesAfter  int `json:"files_after"`
	SmallBefore int `json:"small_before"`
	SmallAfter  int `json:"small_after"`
	// Bins are the bins committed (planned, in a dry run) and BinFiles
	// the files they took; Dropped the bins a concurrent commit made
	// void.
	Bins     int `json:"bins"`
	BinFiles int `json:"bin_files"`
	Dropped  int `json:"dropped,omitempty"`
	// BytesRead and BytesWritten are the bytes of the files read and
	// written; in a dry run BytesRead is what would be read.
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	// Versions are the versions committed.
	Versions []int64 `json:"versions,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// compactCommitter commits the bins of a compaction of one table.
type compactCommitter interface {
	commitCompaction(ctx context.Context, req *compactRequest) compactResult
}

// compactRequest is a compaction of one table, written and ready to be
// committed.
type compactRequest struct {
	name  string
	table *delta.Table
	plan  *delta.OptimizePlan
	bins  []*delta.OptimizeBin
	adds  []*delta.Add
	info  *delta.CommitInfo
	done  chan compactResult
}

// compactResult is the commit of a compactRequest: the version and the
// bins committed (none: version -1).
type compactResult struct {
	version int64
	bins    []*delta.OptimizeBin
	err     error
}

// maxCompactRounds bounds the plans of a table in one pass: the files a
// round writes may be packed again by the next.
const maxCompactRounds = 4

// Compact compacts the tables of opts.TablesDir and reports what it did.
// With app set, the running applier commits (see Compaction above);
// otherwise the tables are committed to directly, which is only safe
// while no agent writes them. A failing table does not stop the others;
// the errors are joined.
func Compact(ctx context.Context, opts CompactOptions, app *Applier) (*CompactReport, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = delta.DefaultCheckpointInterval
	}
	var committer compactCommitter = directCommitter{policy: delta.CheckpointPolicy{Interval: opts.CheckpointInterval, Fixed: opts.FixedCheckpoints}}
	if app != nil {
		committer = app
	}
	names, err := compactTables(opts)
	if err != nil {
		return nil, err
	}
	rep := &CompactReport{DryRun: opts.DryRun, Tables: []TableCompact{}}
	var errs []error
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		tc, err := compactTable(ctx, opts, committer, name)
		if err != nil {
			tc.Error = err.Error()
			errs = append(errs, fmt.Errorf("compact %s: %w", name, err))
		}
		if tc.Bins > 0 || tc.Error != "" {
			opts.Logger.Info("compaction", "table", name, "dry_run", opts.DryRun, "files_before", tc.FilesBefore,
				"files_after", tc.FilesAfter, "bins", tc.Bins, "bytes_read", tc.BytesRead, "bytes_written", tc.BytesWritten,
				"dropped", tc.Dropped, "err", tc.Error)
		}
		rep.Tables = append(rep.Tables, tc)
	}
	return rep, errors.Join(errs...)
}

// compactTables returns the names of the tables to compact, sorted: the
// directories of opts.TablesDir that hold a Delta log, or opts.Tables.
func compactTables(opts CompactOptions) ([]string, error) {
	all, err := delta.TableDirs(opts.TablesDir)
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	var names []string
	for _, name := range all {
		if len(opts.Tables) > 0 && !slices.Contains(opts.Tables, name) || opts.Skip != nil && opts.Skip(name) {
			continue
		}
		names = append(names, name)
	}
	return names, nil
}

// compactionKind returns the kind of the table in directory name.
func compactionKind(name string) string {
	if strings.HasSuffix(name, store.ChangelogSuffix) {
		return KindChangelog
	}
	return KindMirror
}

// compactTable compacts one table in rounds: plan, write the bins, commit.
func compactTable(ctx context.Context, opts CompactOptions, committer compactCommitter, name string) (TableCompact, error) {
	tc := TableCompact{Name: name, Kind: compactionKind(name)}
	t, err := delta.Open(ctx, filepath.Join(opts.TablesDir, name), delta.WithCheckpointInterval(0))
	if errors.Is(err, delta.ErrNotATable) {
		return tc, nil // being created
	}
	if err != nil {
		return tc, err
	}
	optOpts := optimizeOptions(opts, t, tc.Kind)
	for round := 0; round < maxCompactRounds; round++ {
		snap, err := t.Snapshot(ctx)
		if err != nil {
			return tc, err
		}
		if tc.Kind == KindMirror && delta.DeletionVectorsEnabled(snap.Protocol(), snap.Metadata()) {
			optOpts.Sequences = overlapSequences
		}
		plan, err := snap.PlanOptimize(optOpts)
		if err != nil {
			return tc, err
		}
		if round == 0 {
			tc.FilesBefore, tc.SmallBefore = plan.Files, plan.SmallFiles
		}
		tc.FilesAfter, tc.SmallAfter = plan.Files, plan.SmallFiles
		if len(plan.Bins) == 0 || round == 0 && plan.BinFiles() < opts.MinFiles {
			break
		}
		if opts.DryRun {
			tc.Bins, tc.BinFiles = len(plan.Bins), plan.BinFiles()
			for _, b := range plan.Bins {
				tc.BytesRead += b.Bytes
				tc.FilesAfter -= len(b.Files) - 1
			}
			break
		}
		opts.Logger.Info("compacting", "table", name, "version", plan.Version, "bins", len(plan.Bins), "files", plan.BinFiles())
		committed, err := writeAndCommit(ctx, opts, committer, name, t, snap, plan, &tc)
		if err != nil {
			return tc, err
		}
		if !committed {
			break
		}
		after, err := t.Snapshot(ctx)
		if err != nil {
			return tc, err
		}
		tc.FilesAfter = after.NumFiles()
		tc.SmallAfter = 0
		for _, f := range after.Files() {
			if optOpts.IsSmall(f) {
				tc.SmallAfter++
			}
		}
	}
	return tc, nil
}

// errLeftAlone stops a pass over a table that CompactOptions.Skip leaves
// alone meanwhile.
var errLeftAlone = errors.New("table left alone")

// writeAndCommit writes the bins of plan and has them committed, a
// commit each time about TargetFileSize bytes are written, so that a
// flush that rewrites a file meanwhile voids little, and adds what it did
// to tc. It reports whether anything was committed.
func writeAndCommit(ctx context.Context, opts CompactOptions, committer compactCommitter, name string,
	t *delta.Table, snap *delta.Snapshot, plan *delta.OptimizePlan, tc *TableCompact) (bool, error) {
	var bins []*delta.OptimizeBin
	var adds []*delta.Add
	var written int64
	committed := false
	commit := func() error {
		req := &compactRequest{name: name, table: t, plan: plan, bins: bins, adds: adds,
			info: &delta.CommitInfo{EngineInfo: opts.EngineInfo}, done: make(chan compactResult, 1)}
		res := committer.commitCompaction(ctx, req)
		if res.err != nil {
			return res.err
		}
		tc.Dropped += len(bins) - len(res.bins)
		if res.version >= 0 {
			committed = true
			tc.Versions = append(tc.Versions, res.version)
			tc.Bins += len(res.bins)
			for _, b := range res.bins {
				tc.BinFiles += len(b.Files)
			}
		}
		bins, adds, written = nil, nil, 0
		return nil
	}
	pace := opts.Pace
	if opts.Skip != nil {
		// Looked at before each file of a bin is read.
		pace = func(ctx context.Context, n int64) error {
			if opts.Skip(name) {
				return errLeftAlone
			}
			if opts.Pace != nil {
				return opts.Pace(ctx, n)
			}
			return nil
		}
	}
	for i, b := range plan.Bins {
		add, err := snap.RewriteBin(ctx, plan, b, delta.RewriteOptions{WriteOptions: opts.Write, Pace: pace})
		if errors.Is(err, errLeftAlone) {
			// The bins written are committed, the others wait for
			// a later pass.
			if len(bins) > 0 {
				if err := commit(); err != nil {
					return committed, err
				}
			}
			return committed, nil
		}
		if err != nil {
			for _, a := range adds {
				t.RemoveUncommitted(a)
			}
			return committed, err
		}
		if tc.Kind == KindMirror {
			tagMergedFile(add, b)
		}
		bins, adds = append(bins, b), append(adds, add)
		written += add.Size
		tc.BytesRead += b.Bytes
		tc.BytesWritten += add.Size
		if written >= opts.TargetFileSize || i == len(plan.Bins)-1 {
			if err := commit(); err != nil {
				return committed, err
			}
		}
	}
	return committed, nil
}

// optimizeOptions returns how the files of table t of kind are packed: a
// changelog per partition, a mirror in runs of adjacent files in key
// order of at most TargetFileRows rows. Files not on local disk (pruned)
// are left as they are.
func optimizeOptions(opts CompactOptions, t *delta.Table, kind string) delta.OptimizeOptions {
	o := delta.OptimizeOptions{
		TargetFileSize: opts.TargetFileSize,
		Present: func(add *delta.Add) bool {
			p, err := delta.ResolvePath(t.Path(), add.Path)
			if err != nil {
				return false
			}
			_, err = os.Stat(p)
			return err == nil
		},
	}
	if kind == KindMirror {
		o.MaxFileRows = opts.TargetFileRows
		o.Sequences = mirrorSequences
	}
	return o
}

// mirrorSequences returns a mirror's files in key order as one sequence,
// which bins take runs of (see mirror.go: merged copy-on-write, ranges
// never overlap, so files next to each other in key order cover a
// contiguous range together; merged with deletion vectors they may, and a
// merged file's range covers its files' together, see tagMergedFile). A
// file without its key range ends the sequence, and cannot be merged.
func mirrorSequences(files []*delta.Add) [][]*delta.Add {
	type keyed struct {
		add      *delta.Add
		min, max []byte
		ok       bool
	}
	ks := make([]keyed, len(files))
	for i, f := range files {
		minKey, err1 := hex.DecodeString(f.Tags[tagMinKey])
		maxKey, err2 := hex.DecodeString(f.Tags[tagMaxKey])
		_, has1 := f.Tags[tagMinKey]
		_, has2 := f.Tags[tagMaxKey]
		ks[i] = keyed{add: f, min: minKey, max: maxKey, ok: err1 == nil && err2 == nil && has1 && has2}
	}
	sort.SliceStable(ks, func(i, j int) bool { return bytes.Compare(ks[i].min, ks[j].min) < 0 })
	var out [][]*delta.Add
	var cur []*delta.Add
	for _, k := range ks {
		if !k.ok {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, k.add)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// overlapSequences returns the small files of a mirror merged with
// deletion vectors that have key ranges as one sequence, smallest first
// (by the rows their deletion vectors leave): their ranges may overlap
// anyway (see mergedv.go), so any of them may be merged, and a merged
// file's range covers its files' together (see tagMergedFile).
func overlapSequences(files []*delta.Add) [][]*delta.Add {
	var seq []*delta.Add
	size := map[*delta.Add]int64{}
	for _, f := range files {
		_, hasMin := f.Tags[tagMinKey]
		_, hasMax := f.Tags[tagMaxKey]
		if !hasMin || !hasMax {
			continue
		}
		size[f] = f.Size
		if st, err := delta.ParseStats(f.Stats); err == nil && f.DeletionVector != nil && st.NumRecords > 0 {
			size[f] = f.Size * (st.NumRecords - f.DeletionVector.Cardinality) / st.NumRecords
		}
		seq = append(seq, f)
	}
	sort.SliceStable(seq, func(i, j int) bool {
		if size[seq[i]] != size[seq[j]] {
			return size[seq[i]] < size[seq[j]]
		}
		return seq[i].Path < seq[j].Path
	})
	if len(seq) == 0 {
		return nil
	}
	return [][]*delta.Add{seq}
}

// tagMergedFile gives the file a mirror bin became the key range of its
// files together: from the least minKey to the greatest maxKey (the first's
// and the last's when the files are in key order and their ranges do not
// overlap). When one of them has no range, neither has the merged file.
func tagMergedFile(add *delta.Add, b *delta.OptimizeBin) {
	minKey, maxKey := b.Files[0].Tags[tagMinKey], b.Files[0].Tags[tagMaxKey]
	for _, f := range b.Files {
		lo, hasMin := f.Tags[tagMinKey]
		hi, hasMax := f.Tags[tagMaxKey]
		if !hasMin || !hasMax {
			add.Tags = nil
			return
		}
		if hexKeyLess(lo, minKey) {
			minKey = lo
		}
		if hexKeyLess(maxKey, hi) {
			maxKey = hi
		}
	}
	add.Tags = map[string]string{tagMinKey: minKey, tagMaxKey: maxKey}
}

// hexKeyLess reports whether the key hex a orders before the key hex b.
func hexKeyLess(a, b string) bool {
	ka, errA := hex.DecodeString(a)
	kb, errB := hex.DecodeString(b)
	return errA == nil && errB == nil && bytes.Compare(ka, kb) < 0
}

// directCommitter commits a compaction to the table itself: only while no
// applier writes the tables (the agent is stopped).
type directCommitter struct{ policy delta.CheckpointPolicy }

func (d directCommitter) commitCompaction(ctx context.Context, req *compactRequest) compactResult {
	v, bins, err := req.table.CommitOptimize(ctx, req.plan, req.bins, req.adds, req.info)
	if err == nil {
		if due, _ := req.table.CheckpointDue(v, d.policy); due {
			// The commit stands; the next checkpoint covers it otherwise.
			_ = req.table.Checkpoint(ctx, v)
		}
	}
	return compactResult{version: v, bins: bins, err: err}
}

// commitCompaction hands the compaction to the applier's goroutine (Run),
// which commits it between two flushes, and waits for the result. When
// ctx ends first the written files stay uncommitted, orphans vacuum
// deletes, unless the applier committed them meanwhile.
func (a *Applier) commitCompaction(ctx context.Context, req *compactRequest) compactResult {
	select {
	case a.compactions <- req:
	case <-ctx.Done():
		return compactResult{version: -1, err: ctx.Err()}
	}
	select {
	case res := <-req.done:
		return res
	case <-ctx.Done():
		return compactResult{version: -1, err: ctx.Err()}
	}
}

// serveCompactions commits the compactions waiting, on the applier's
// goroutine between two flushes.
func (a *Applier) serveCompactions(ctx context.Context) {
	for {
		select {
		case req := <-a.compactions:
			req.done <- a.applyCompaction(ctx, req)
		default:
			return
		}
	}
}

// applyCompaction commits a compaction of one table on the applier's
// goroutine and brings the applier's view of the table up to date: its
// version, and a mirror's files. A bin with a file the applier's own
// state still needs (the file a flush's appender replaces) is dropped.
func (a *Applier) applyCompaction(ctx context.Context, req *compactRequest) compactResult {
	dt, m := a.loadedTable(req.name)
	if dt != nil {
		latest, err := dt.t.LatestVersion(ctx)
		if err != nil {
			return compactResult{version: -1, err: err}
		}
		if latest != dt.version {
			// Another writer: the applier's next commit finds out.
			for _, add := range req.adds {
				req.table.RemoveUncommitted(add)
			}
			return compactResult{version: -1}
		}
	}
	bins, adds := req.bins, req.adds
	if m != nil && m.app != nil && m.app.replaced != nil {
		var kb []*delta.OptimizeBin
		var ka []*delta.Add
		for i, b := range bins {
			if slices.ContainsFunc(b.Files, func(f *delta.Add) bool { return f.Path == m.app.replaced.add.Path }) {
				req.table.RemoveUncommitted(adds[i])
				continue
			}
			kb, ka = append(kb, b), append(ka, adds[i])
		}
		bins, adds = kb, ka
	}
	if err := a.fail("before-compaction-commit", req.name); err != nil {
		return compactResult{version: -1, err: err}
	}
	v, bins, err := req.table.CommitOptimize(ctx, req.plan, bins, adds, req.info)
	if err != nil || v < 0 {
		return compactResult{version: v, bins: bins, err: err}
	}
	if dt != nil {
		dt.version = v
		a.setStatus(dt)
		a.countCommit(dt, optimizeCounted(bins))
	}
	if m != nil {
		m.compacted(bins, req.adds, req.bins)
	}
	if a.checkpointDue(req.table, v) {
		if err := req.table.Checkpoint(ctx, v); err != nil {
			a.log.Warn("checkpoint failed", "table", req.name, "version", v, "err", err)
		}
	}
	if a.cfg.Committed != nil {
		a.cfg.Committed.Notify()
	}
	return compactResult{version: v, bins: bins}
}

// optimizeCounted returns actions to count a compaction commit by
// (countCommit): a remove per file of the bins and an add per bin.
func optimizeCounted(bins []*delta.OptimizeBin) []delta.Action {
	var acts []delta.Action
	for _, b := range bins {
		for range b.Files {
			acts = append(acts, &delta.Remove{})
		}
		acts = append(acts, &delta.Add{})
	}
	return acts
}

// loadedTable returns the applier's open Delta table of directory name,
// and the mirror when it is one, or nils when it has none open.
func (a *Applier) loadedTable(name string) (*deltaTable, *mirror) {
	for _, st := range a.tables {
		if st.changelog != nil && st.changelog.name == name {
			return st.changelog.deltaTable, nil
		}
		if st.mirror != nil && st.mirror.name == name {
			return st.mirror.deltaTable, st.mirror
		}
	}
	return nil, nil
}

// compacted replaces the files of the committed bins (of all, planned,
// each written as the add at the same index) by their merged files.
func (m *mirror) compacted(committed []*delta.OptimizeBin, adds []*delta.Add, all []*delta.OptimizeBin) {
	gone := map[string]bool{}
	var kept []*mirrorFile
	for _, b := range committed {
		i := slices.Index(all, b)
		add := *adds[i]
		f := &mirrorFile{add: &add, rows: b.Rows}
		f.minKey, _ = hex.DecodeString(add.Tags[tagMinKey])
		f.maxKey, _ = hex.DecodeString(add.Tags[tagMaxKey])
		kept = append(kept, f)
		for _, r := range b.Files {
			gone[r.Path] = true
		}
	}
	for _, f := range m.files {
		if !gone[f.add.Path] {
			kept = append(kept, f)
		}
	}
	sortFiles(kept)
	m.files = kept
}
