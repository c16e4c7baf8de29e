package delta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
)

// OperationOptimize is the commitInfo operation of a compaction commit.
const OperationOptimize = "OPTIMIZE"

// ErrOptimizeConflict reports a bin whose files are no longer all part of
// the table, or whose table changed its schema, since it was planned: a
// concurrent commit rewrote or removed them, and committing the bin would
// bring their rows back. The bin is dropped and planned again later.
var ErrOptimizeConflict = errors.New("files of the bin changed since it was planned")

// OptimizeOptions configure the planning of a compaction (PlanOptimize).
type OptimizeOptions struct {
	// TargetFileSize is the most bytes of data files a bin takes: a bin
	// becomes one file about that size. It must be positive.
	TargetFileSize int64
	// MaxFileRows, when positive, is also the most rows a bin takes (by
	// the files' stats), for tables whose files are rewritten whole by
	// their writer and must stay that small.
	MaxFileRows int64
	// Sequences, when set, returns the files that may be merged with one
	// another, as sequences: a bin takes consecutive small files of one
	// sequence, in its order, which is the order their rows are written
	// in; a file that is not small ends a bin. Without it the small files
	// of each partition are packed smallest first (PlanOptimize).
	Sequences func(files []*Add) [][]*Add
	// Present, when set, reports whether a file can be read locally; a
	// file that cannot (pruned: kept elsewhere) ends a bin as a large
	// file does.
	Present func(add *Add) bool
}

// IsSmall reports whether a data file is small, a file a bin may take:
// below half the target size and, with MaxFileRows, known to hold fewer
// than half of it. A file with a deletion vector counts by the rows it
// has left (liveSize), and is small too when its vector deletes half of
// its rows or more, so that compaction purges the deleted rows of files
// that merges marked; it needs stats. With MaxFileRows a file without
// stats is never small.
func (o OptimizeOptions) IsSmall(add *Add) bool {
	if add.HasDeletionVector() {
		rows, all := fileRows(add), statsRows(add)
		if rows < 0 || all <= 0 {
			return false
		}
		if 2*rows <= all {
			return true
		}
	}
	if liveSize(add) >= o.TargetFileSize/2 {
		return false
	}
	if o.MaxFileRows <= 0 {
		return true
	}
	rows := fileRows(add)
	return rows >= 0 && rows < o.MaxFileRows/2
}

// statsRows returns the rows of an add's data file by its stats,
// numRecords, deleted ones included, or -1.
func statsRows(add *Add) int64 {
	if add.Stats == "" {
		return -1
	}
	st, err := ParseStats(add.Stats)
	if err != nil {
		return -1
	}
	return st.NumRecords
}

// liveSize returns the bytes of an add's logical file: the data file's
// size, in proportion to the rows its deletion vector leaves when it has
// one (and stats to tell).
func liveSize(add *Add) int64 {
	if !add.HasDeletionVector() {
		return add.Size
	}
	rows, all := fileRows(add), statsRows(add)
	if rows < 0 || all <= 0 {
		return add.Size
	}
	return add.Size * rows / all
}

// fileRows returns the rows of an add's logical file by its stats: their
// numRecords less the rows its deletion vector deletes, or -1.
func fileRows(add *Add) int64 {
	n := statsRows(add)
	if n >= 0 && add.DeletionVector != nil {
		return n - add.DeletionVector.Cardinality
	}
	return n
}

// OptimizeBin is a run of small data files of one partition that a
// compaction rewrites as one file, their rows in their order.
type OptimizeBin struct {
	// PartitionValues are the files' partition values, as in their add
	// actions.
	PartitionValues map[string]*string
	Files           []*Add
	// Bytes is the files' total size (of the rows their deletion vectors
	// leave, see liveSize) and Rows their rows by their stats, less those
	// their deletion vectors delete (-1 when a file has none).
	Bytes, Rows int64
}

// OptimizePlan is what a compaction of one snapshot would do.
type OptimizePlan struct {
	// Version is the version planned from.
	Version int64
	// Files counts the table's data files and SmallFiles the small ones
	// (OptimizeOptions.IsSmall).
	Files, SmallFiles int
	// Bins are the bins of two files or more, or of one file with a
	// deletion vector, in the order planned.
	Bins []*OptimizeBin
	// schemaString is the schema the bins are read and written with.
	schemaString string
}

// BinFiles returns how many files the bins take in all.
func (p *OptimizePlan) BinFiles() int {
	n := 0
	for _, b := range p.Bins {
		n += len(b.Files)
	}
	return n
}

// PlanOptimize plans the compaction of the snapshot: small files that may
// be merged are packed into bins of at most TargetFileSize bytes (and
// MaxFileRows rows), in which no file is larger than twice the others
// together, so that every rewrite of a row makes the file that holds it
// at least half as large again, and a row is rewritten at most
// log1.5(TargetFileSize / its first file's size) times. Without
// OptimizeOptions.Sequences the small files of each partition are packed
// smallest first: a file larger than twice the bin so far starts the next
// bin, so the files such a plan leaves out of bins are each larger than
// twice the next smaller (at most log2(TargetFileSize / the smallest) of
// them). With Sequences, bins take
// consecutive files of a sequence, in its order, and a bin whose largest
// file outweighs the others is split at it. Bins of one file are left
// out, but for a file with a deletion vector, whose deleted rows the
// rewrite purges; files of different partitions are never merged.
func (s *Snapshot) PlanOptimize(opts OptimizeOptions) (*OptimizePlan, error) {
	if opts.TargetFileSize <= 0 {
		return nil, fmt.Errorf("plan optimize: target file size %d is not positive", opts.TargetFileSize)
	}
	files := s.Files()
	plan := &OptimizePlan{Version: s.version, Files: len(files), schemaString: s.metadata.SchemaString}
	for _, f := range files {
		if opts.IsSmall(f) {
			plan.SmallFiles++
		}
	}
	if opts.Sequences == nil {
		for _, seq := range partitionSequences(files, opts) {
			plan.Bins = append(plan.Bins, packSmallestFirst(seq, opts)...)
		}
		return plan, nil
	}
	for _, seq := range opts.Sequences(files) {
		for _, b := range packBins(seq, opts) {
			plan.Bins = append(plan.Bins, splitBin(b)...)
		}
	}
	return plan, nil
}

// partitionSequences returns, per partition, its small files that can be
// read, smallest first (then oldest first).
func partitionSequences(files []*Add, opts OptimizeOptions) [][]*Add {
	byPart := map[string][]*Add{}
	var keys []string
	for _, f := range files {
		if !opts.IsSmall(f) || opts.Present != nil && !opts.Present(f) {
			continue
		}
		k := partitionKey(f.PartitionValues)
		if _, ok := byPart[k]; !ok {
			keys = append(keys, k)
		}
		byPart[k] = append(byPart[k], f)
	}
	sort.Strings(keys)
	out := make([][]*Add, 0, len(keys))
	for _, k := range keys {
		seq := byPart[k]
		sort.SliceStable(seq, func(i, j int) bool {
			a, b := seq[i], seq[j]
			if a.Size != b.Size {
				return a.Size < b.Size
			}
			if a.ModificationTime != b.ModificationTime {
				return a.ModificationTime < b.ModificationTime
			}
			return a.Path < b.Path
		})
		out = append(out, seq)
	}
	return out
}

// partitionKey returns a string that tells partition values apart.
func partitionKey(pv map[string]*string) string {
	keys := make([]string, 0, len(pv))
	for k := range pv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for _, k := range keys {
		b = fmt.Appendf(b, "%q=", k)
		if v := pv[k]; v != nil {
			b = fmt.Appendf(b, "%q", *v)
		} else {
			b = append(b, '-')
		}
		b = append(b, ';')
	}
	return string(b)
}

// binBuilder collects bins of two files or more.
type binBuilder struct {
	opts OptimizeOptions
	out  []*OptimizeBin
	cur  *OptimizeBin
}

// close ends the current bin.
func (bb *binBuilder) close() {
	if bb.cur != nil && bb.cur.worthRewriting() {
		bb.out = append(bb.out, bb.cur)
	}
	bb.cur = nil
}

// fits reports whether f can join the current bin within the limits.
func (bb *binBuilder) fits(f *Add) bool {
	c := bb.cur
	if c == nil {
		return true
	}
	rows := fileRows(f)
	return partitionKey(c.PartitionValues) == partitionKey(f.PartitionValues) &&
		c.Bytes+liveSize(f) <= bb.opts.TargetFileSize &&
		(bb.opts.MaxFileRows <= 0 || c.Rows >= 0 && rows >= 0 && c.Rows+rows <= bb.opts.MaxFileRows)
}

// add puts f in the current bin, starting one when there is none.
func (bb *binBuilder) add(f *Add) {
	if bb.cur == nil {
		bb.cur = &OptimizeBin{PartitionValues: maps.Clone(f.PartitionValues)}
	}
	bb.cur.add(f)
}

// worthRewriting reports whether rewriting the bin changes the layout:
// it merges two files or more, or purges the deleted rows of a file with
// a deletion vector.
func (b *OptimizeBin) worthRewriting() bool {
	return len(b.Files) > 1 || len(b.Files) == 1 && b.Files[0].HasDeletionVector()
}

// add puts f in the bin.
func (b *OptimizeBin) add(f *Add) {
	rows := fileRows(f)
	b.Files = append(b.Files, f)
	b.Bytes += liveSize(f)
	if rows < 0 || b.Rows < 0 {
		b.Rows = -1
	} else {
		b.Rows += rows
	}
}

// packSmallestFirst packs a partition's small files, smallest first: a
// file larger than twice the bin so far, or one the bin has no room for,
// starts the next bin.
func packSmallestFirst(seq []*Add, opts OptimizeOptions) []*OptimizeBin {
	bb := &binBuilder{opts: opts}
	for _, f := range seq {
		if bb.cur != nil && (liveSize(f) > 2*bb.cur.Bytes || !bb.fits(f)) {
			bb.close()
		}
		bb.add(f)
	}
	bb.close()
	return bb.out
}

// packBins packs the consecutive small files of seq into bins, in order;
// a file that is not small or cannot be read ends a bin.
func packBins(seq []*Add, opts OptimizeOptions) []*OptimizeBin {
	bb := &binBuilder{opts: opts}
	for _, f := range seq {
		if !opts.IsSmall(f) || opts.Present != nil && !opts.Present(f) {
			bb.close()
			continue
		}
		if !bb.fits(f) {
			bb.close()
		}
		bb.add(f)
	}
	bb.close()
	return bb.out
}

// splitBin returns the bins of b's files in which no file is larger than
// twice the others together: b itself, or, split at its largest file, the
// bins of the files on either side.
func splitBin(b *OptimizeBin) []*OptimizeBin {
	if !b.worthRewriting() {
		return nil
	}
	if len(b.Files) == 1 {
		return []*OptimizeBin{b}
	}
	big := 0
	for i, f := range b.Files {
		if liveSize(f) > liveSize(b.Files[big]) {
			big = i
		}
	}
	if big := liveSize(b.Files[big]); big <= 2*(b.Bytes-big) {
		return []*OptimizeBin{b}
	}
	var out []*OptimizeBin
	for _, part := range [][]*Add{b.Files[:big], b.Files[big+1:]} {
		nb := &OptimizeBin{PartitionValues: b.PartitionValues}
		for _, f := range part {
			nb.add(f)
		}
		out = append(out, splitBin(nb)...)
	}
	return out
}

// RewriteOptions configure RewriteBin.
type RewriteOptions struct {
	WriteOptions
	// Pace, when set, is called with the bytes about to be read or just
	// written, and may wait: it bounds the disk bandwidth a compaction
	// takes.
	Pace func(ctx context.Context, bytes int64) error
}

// RewriteBin writes the rows of a bin's files, file by file in the bin's
// order, into one new data file of the table and returns its add action,
// with dataChange false: the same rows, restated. The file is written
// with the plan's schema (physical names and field ids as the table
// has them), in the bin's partition, with stats of its own; one file is
// held in memory at a time. The rows read must be as many as the files'
// stats say, and the new file's partition values those of the bin, or
// the file is deleted and an error returned. Nothing is committed: see
// OptimizeActions and Table.CommitOptimize.
func (s *Snapshot) RewriteBin(ctx context.Context, plan *OptimizePlan, bin *OptimizeBin, opts RewriteOptions) (*Add, error) {
	schema, err := ParseSchema(plan.schemaString)
	if err != nil {
		return nil, fmt.Errorf("rewrite bin: %w", err)
	}
	partCols := s.metadata.PartitionColumns
	partValues := map[string]any{}
	for _, pc := range partCols {
		f, _ := schema.Field(pc)
		if f == nil {
			return nil, fmt.Errorf("rewrite bin: %w: partition column %q not in schema", ErrInvalidSchema, pc)
		}
		raw, ok := bin.PartitionValues[f.PhysicalName()]
		if !ok {
			return nil, fmt.Errorf("rewrite bin: %w: no value of partition column %q", ErrInvalidValue, pc)
		}
		v, err := parsePartitionValue(f.Type, raw)
		if err != nil {
			return nil, fmt.Errorf("rewrite bin: %w", err)
		}
		if v != nil {
			partValues[pc] = v
		}
	}
	w, err := NewDataWriter(s.table.root, schema, partCols, partValues, opts.WriteOptions)
	if err != nil {
		return nil, fmt.Errorf("rewrite bin: %w", err)
	}
	fail := func(err error) (*Add, error) {
		w.Abort()
		return nil, fmt.Errorf("rewrite bin: %w", err)
	}
	r := newFileReader(s.table.root, schema, partCols, nil)
	for _, f := range bin.Files {
		if opts.Pace != nil {
			if err := opts.Pace(ctx, f.Size); err != nil {
				return fail(err)
			}
		}
		sel, err := skipDeleted(s.table.root, f.Path, f.DeletionVector)
		if err != nil {
			return fail(err)
		}
		// A batch at a time: a bin is up to the target file size,
		// many times the memory the agent may take.
		var read int64
		err = r.readBatches(ctx, f.Path, f.PartitionValues, sel, func(rows []Row) error {
			read += int64(len(rows))
			return w.Write(rows)
		})
		if err != nil {
			return fail(err)
		}
		if n := fileRows(f); n >= 0 && read != n {
			return fail(fmt.Errorf("%w: %s holds %d rows, its stats say %d", ErrInvalidValue, f.Path, read, n))
		}
	}
	if bin.Rows >= 0 && w.NumRows() != bin.Rows {
		return fail(fmt.Errorf("%w: wrote %d rows of %d", ErrInvalidValue, w.NumRows(), bin.Rows))
	}
	add, err := w.Close()
	if err != nil {
		return nil, fmt.Errorf("rewrite bin: %w", err)
	}
	if partitionKey(add.PartitionValues) != partitionKey(bin.PartitionValues) {
		s.removeWritten(add)
		return nil, fmt.Errorf("rewrite bin: %w: partition values differ from the bin's", ErrInvalidValue)
	}
	add.DataChange = false
	if opts.Pace != nil {
		if err := opts.Pace(ctx, add.Size); err != nil {
			s.removeWritten(add)
			return nil, fmt.Errorf("rewrite bin: %w", err)
		}
	}
	return add, nil
}

// removeWritten deletes a data file written for a commit that will not
// happen. Should that fail, it is an orphan that vacuum deletes.
func (s *Snapshot) removeWritten(add *Add) {
	s.table.RemoveUncommitted(add)
}

// RemoveUncommitted deletes a data file of the table that no commit
// refers to (written for a commit that will not happen). Should that
// fail, the file stays an orphan that vacuum deletes.
func (t *Table) RemoveUncommitted(add *Add) {
	if path, err := ResolvePath(t.root, add.Path); err == nil {
		_ = os.Remove(path)
	}
}

// OptimizeActions returns the actions of a compaction commit of bins,
// each rewritten as the add at the same index: the removes of the bins'
// files and the adds, all with dataChange false, so that streaming
// readers and change data feeds skip the commit, and a commitInfo with
// operation OPTIMIZE and its metrics.
func OptimizeActions(bins []*OptimizeBin, adds []*Add, deletionMillis int64) []Action {
	var acts []Action
	var removed, removedBytes, added, addedBytes int64
	for i, b := range bins {
		for _, f := range b.Files {
			acts = append(acts, RemoveOf(f, deletionMillis, false))
			removed++
			removedBytes += f.Size
		}
		a := *adds[i]
		a.DataChange = false
		acts = append(acts, &a)
		added++
		addedBytes += a.Size
	}
	acts = append(acts, &CommitInfo{
		Operation:           OperationOptimize,
		OperationParameters: map[string]any{"predicate": "[]", "auto": true},
		IsBlindAppend:       new(bool),
		OperationMetrics: map[string]any{
			"numRemovedFiles": removed, "numRemovedBytes": removedBytes,
			"numAddedFiles": added, "numAddedBytes": addedBytes,
		},
	})
	return acts
}

// CommitOptimize commits bins, each rewritten as the add at the same index
// (RewriteBin), over the latest version: a bin whose files are no longer
// all part of the table is dropped and its file deleted, and when another
// writer commits the same version first, the check is made again over the
// new latest version. The check reads only the commits after the plan's
// version (a remove of a bin's file, a new schema), not the whole
// snapshot. info, when set, gives the commitInfo its engine and extra
// fields. It returns the version committed and the bins it holds; with
// none left nothing is committed and the version is -1.
func (t *Table) CommitOptimize(ctx context.Context, plan *OptimizePlan, bins []*OptimizeBin, adds []*Add, info *CommitInfo) (int64, []*OptimizeBin, error) {
	for attempt := 0; ; attempt++ {
		latest, gone, schemaChanged, err := t.changesSince(ctx, plan)
		if err != nil {
			return -1, nil, fmt.Errorf("commit optimize: %w", err)
		}
		var keepBins []*OptimizeBin
		var keepAdds []*Add
		for i, b := range bins {
			if schemaChanged || slices.ContainsFunc(b.Files, func(f *Add) bool { return gone[fileKey(f.Path)] }) {
				t.RemoveUncommitted(adds[i])
				continue
			}
			keepBins, keepAdds = append(keepBins, b), append(keepAdds, adds[i])
		}
		bins, adds = keepBins, keepAdds
		if len(bins) == 0 {
			return -1, nil, nil
		}
		acts := OptimizeActions(bins, adds, t.now().UnixMilli())
		if info != nil {
			ci := acts[len(acts)-1].(*CommitInfo)
			ci.EngineInfo = info.EngineInfo
			ci.Extra = info.Extra
		}
		v, err := t.Commit(ctx, latest, acts)
		if errors.Is(err, ErrVersionExists) && attempt < 16 {
			continue
		}
		if err != nil {
			// The files stay: the commit may have landed before the
			// error (a failed directory sync); if not, vacuum deletes
			// them as orphans.
			return -1, nil, fmt.Errorf("commit optimize: %w", err)
		}
		return v, bins, nil
	}
}

// changesSince returns the latest version, the files the commits after
// the plan's version removed (by fileKey), and whether one of them set
// another schema.
func (t *Table) changesSince(ctx context.Context, plan *OptimizePlan) (int64, map[string]bool, bool, error) {
	latest, err := t.LatestVersion(ctx)
	if err != nil {
		return -1, nil, false, err
	}
	gone := map[string]bool{}
	changed := false
	for v := plan.Version + 1; v <= latest; v++ {
		acts, err := t.ReadCommit(ctx, v)
		if err != nil {
			return -1, nil, false, err
		}
		for _, a := range acts {
			switch a := a.(type) {
			case *Remove:
				gone[fileKey(a.Path)] = true
			case *Metadata:
				changed = changed || a.SchemaString != plan.schemaString
			}
		}
	}
	return latest, gone, changed, nil
}
