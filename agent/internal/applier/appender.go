package applier

import (
	"bytes"
	"context"
	"slices"
	"sort"
)

// appender writes a flush's inserts into a mirror straight into new data
// files, as the flush reads them. Inserts of keys above every key of the
// mirror and of the flush's changes before them, each above the one before
// (a bulk load, an initial snapshot read in key order, rows keyed by a
// sequence), are written that way once there are appendMinRows of them. So are inserts that
// interleave up to maxAppendRuns such sequences in ranges of their own
// (writers that each load a key range): the first appendMinRows rows, in
// key order, split into runs wherever a key arrived before the one below
// it, and each run appends the keys above its last one and below the next
// run's first into files of its own. The files are split at TargetFileRows
// rows like any other, and when the mirror's last file holds less than
// half of that, the lowest run starts with its rows and replaces it
// (unless Config.Compaction merges small files instead). The
// flush then has nothing of those rows to sort and merge. The first change
// that does not fit (an update or delete, a key that is in no run's place,
// a new column) ends the appender: its files are closed, and the flush's
// remaining changes go to the pending set and are merged over them as over
// committed files, except that an appender's file they rewrite was never
// committed and is deleted. The changes before the appender are merged the
// same way; their keys are all below its rows. A truncate sets the flush's
// appender aside (mirror.cleared: its files are deleted at the merge), and
// the inserts after it may start another, whose keys need only be above the
// flush's changes since the truncate.
type appender struct {
	// held are the first rows, up to appendMinRows of them (see
	// appendMinRows), in order of arrival.
	held [][]any
	// runs write the rows, in key order; nil while the first rows are
	// held.
	runs []*appendRun
	// replaced is the committed file the lowest run began with the rows
	// of, or nil.
	replaced *mirrorFile
	// settled is set once the appender has ended: its files are written, and
	// the flush's later changes are merged over them.
	settled bool
}

// appendRun is one sequence of keys an appender writes: its keys are
// first to last, and above the keys of the runs before it.
type appendRun struct {
	w           *mergeWriter
	first, last []byte
}

// maxAppendRuns is how many runs an appender writes at most. Each has a
// data file open, which holds its rows until it is closed (TargetFileRows
// at most).
const maxAppendRuns = 4

// appendInsert writes an inserted row, of key key, into the flush's
// appender when it can (see appender), starting the appender at an
// insert above every key so far, and reports whether it did. An insert
// that does not fit ends the appender, for the rest of the flush (as any
// other change does, see add).
func (m *mirror) appendInsert(ctx context.Context, a *Applier, key []byte, ins *insertRow) (bool, error) {
	r := m.app
	if r != nil && r.settled || a.cfg.ChangeDataFeed && len(m.files) > 0 {
		// With the change data feed inserts are merged once the mirror
		// has committed files (cdf.go).
		return false, nil
	}
	if !m.laidOut() {
		// A new column waits for the flush's layout: the appender's files
		// have the columns they were opened with.
		return false, m.endAppend()
	}
	switch {
	case r == nil:
		if !m.aboveAll(key) {
			return false, nil
		}
		r = &appender{}
		m.app = r
	case r.runs == nil:
		// While the first rows are held, the pending set and the files
		// stay as they were when the appender started.
		if !m.aboveAll(key) {
			return false, m.endAppend()
		}
	default:
		// The run whose place the key is in: the last that starts below
		// it, if the key is above its last.
		i := sort.Search(len(r.runs), func(i int) bool { return bytes.Compare(r.runs[i].first, key) > 0 }) - 1
		if i < 0 || bytes.Compare(key, r.runs[i].last) <= 0 {
			return false, m.endAppend()
		}
		run := r.runs[i]
		run.last = append(run.last[:0], key...)
		m.appended++
		run.w.expectRows = ins.ahead / int64(len(r.runs))
		return true, run.w.emitInsert(key, ins)
	}
	r.held = append(r.held, slices.Clone(ins.values(len(m.cols.cols))))
	if len(r.held) < appendMinRows {
		return true, nil
	}
	return true, m.startWriting(ctx, a, ins.ahead)
}

// aboveAll reports whether key is above every key of the files and of the
// pending set the flush's changes go over (see baseCommitted): where an
// appender may start.
func (m *mirror) aboveAll(key []byte) bool {
	if m.pend.changes > 0 && bytes.Compare(key, m.pend.maxKey) <= 0 {
		return false
	}
	last := m.lastGroup()
	return last == nil || len(last.maxKey) > 0 && last.rows >= 0 && bytes.Compare(key, last.maxKey) > 0
}

// appendMinRows is how many rows an appender holds before it writes them:
// one that ends sooner (the first rows of a flush of a few transactions
// that happen to come in key order) hands them to the pending set, and the
// flush writes no file it then rewrites.
const appendMinRows = 1024

// lastGroup returns the group of committed files with the greatest keys
// that the flush's changes go over (see baseCommitted and groupFiles), or
// nil. The groups are kept while the files are the same.
func (m *mirror) lastGroup() *fileGroup {
	files := m.baseCommitted()
	if len(files) == 0 {
		return nil
	}
	if len(m.lastOf) != len(files) || &m.lastOf[0] != &files[0] {
		groups := groupFiles(files)
		m.last, m.lastOf = groups[len(groups)-1], files
	}
	return m.last
}

// baseCommitted returns the committed files the flush's changes go over:
// none once the flush truncated the table, which removes them all (the
// pending set then holds only the changes since the truncate).
func (m *mirror) baseCommitted() []*mirrorFile {
	if m.pend.truncated {
		return nil
	}
	return m.files
}

// startWriting splits the appender's held rows into runs (see
// appender) and writes them into their first data files, the lowest run's
// after the rows of the mirror's last file when that holds less than half
// of TargetFileRows rows, which the appender's files then replace; the
// files expect a share of the ahead changes of the transaction besides
// (those of the last row held on, see insertRow.ahead). Rows that make more than maxAppendRuns runs, or two of one
// key, end the appender instead.
func (m *mirror) startWriting(ctx context.Context, a *Applier, ahead int64) error {
	r := m.app
	type heldRow struct {
		key []byte
		at  int
	}
	order := make([]heldRow, len(r.held))
	for i, row := range r.held {
		order[i] = heldRow{key: m.appendKey(nil, row), at: i}
	}
	slices.SortFunc(order, func(x, y heldRow) int { return bytes.Compare(x.key, y.key) })
	var starts []int
	for i := range order {
		if i > 0 && bytes.Equal(order[i].key, order[i-1].key) {
			return m.endAppend()
		}
		if i == 0 || order[i].at < order[i-1].at {
			starts = append(starts, i)
		}
	}
	if len(starts) > maxAppendRuns {
		return m.endAppend()
	}
	starts = append(starts, len(order))
	for j := range len(starts) - 1 {
		rows := order[starts[j]:starts[j+1]]
		run := &appendRun{w: &mergeWriter{m: m, a: a}, first: rows[0].key, last: slices.Clone(rows[len(rows)-1].key)}
		run.w.expectRows = int64(len(rows)) + ahead/int64(len(starts)-1)
		r.runs = append(r.runs, run)
		if g := m.lastGroup(); j == 0 && g != nil && len(g.files) == 1 && g.rows < a.cfg.TargetFileRows/2 && !a.cfg.Compaction && !a.cfg.DeletionVectors {
			last := g.files[0]
			r.replaced = last
			base, err := m.readFile(ctx, last)
			if err != nil {
				return err
			}
			for _, b := range base {
				if err := run.w.emit(b.key, b.data, b.deleted); err != nil {
					return err
				}
			}
		}
		for _, h := range rows {
			if err := run.w.emit(string(h.key), r.held[h.at], false); err != nil {
				return err
			}
		}
	}
	m.appended += int64(len(r.held))
	r.held = nil
	return nil
}

// abort stops the writers of the appender's runs; r may be nil.
func (r *appender) abort() {
	if r == nil {
		return
	}
	for _, run := range r.runs {
		run.w.abort()
	}
}

// endAppend ends the flush's appender, if one is going: its last file is
// closed, and its files become part of what the flush's later changes are
// merged over (baseFiles). The rows it held without writing them go to the
// pending set, as if it had never started.
func (m *mirror) endAppend() error {
	r := m.app
	if r == nil || r.settled {
		return nil
	}
	r.settled = true
	if r.runs == nil {
		// Its own buffer: the caller may hold the next insert's key in
		// keyBuf.
		var key []byte
		for _, row := range r.held {
			key = m.appendKey(key[:0], row)
			if err := m.pend.add(key, m.insertEntry(row)); err != nil {
				return err
			}
		}
		r.held = nil
		return nil
	}
	for _, run := range r.runs {
		if err := run.w.close(); err != nil {
			return err
		}
	}
	for _, run := range r.runs {
		if err := run.w.finish(); err != nil {
			return err
		}
	}
	return nil
}

// files returns the data files the appender wrote, if any, in key order.
func (r *appender) files() []*mirrorFile {
	if r == nil {
		return nil
	}
	var out []*mirrorFile
	for _, run := range r.runs {
		out = append(out, run.w.files...)
	}
	return out
}

// baseFiles returns the files the flush's pending changes are merged over,
// in key order: the committed files (baseCommitted) and, once its appender
// has settled, the appender's files in place of the file it replaced.
func (m *mirror) baseFiles() []*mirrorFile {
	r := m.app
	committed := m.baseCommitted()
	if len(r.files()) == 0 && (r == nil || r.replaced == nil) {
		return committed
	}
	out := make([]*mirrorFile, 0, len(committed)+len(r.files()))
	for _, f := range committed {
		if f != r.replaced {
			out = append(out, f)
		}
	}
	out = append(out, r.files()...)
	sortFiles(out)
	return out
}
