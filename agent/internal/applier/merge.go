package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"sort"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
)

// baseRow is a row of an existing data file.
type baseRow struct {
	key     string
	data    []any
	deleted bool
}

// readFile reads the rows of a mirror file that its deletion vector, if
// it has one, leaves (delta.ReadDataFile), in key order.
func (m *mirror) readFile(ctx context.Context, f *mirrorFile) ([]baseRow, error) {
	rows, err := delta.ReadDataFile(ctx, m.t.Path(), f.add, m.schema)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: read %s: %w", m.name, f.add.Path, err)
	}
	// The file is rewritten from these rows: fewer than its stats count,
	// less those its deletion vector deletes, would drop rows from the
	// mirror.
	if want := f.liveRows(); want >= 0 && int64(len(rows)) != want {
		return nil, fmt.Errorf("mirror %s: read %s: %w: %d rows, its stats and deletion vector say %d", m.name, f.add.Path, errFileRows, len(rows), want)
	}
	out := make([]baseRow, len(rows))
	for i, r := range rows {
		out[i] = m.baseRowOf(r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

// baseRowOf returns the row r of a data file, in the mirror's schema, as
// data column values with its key.
func (m *mirror) baseRowOf(r delta.Row) baseRow {
	data := make([]any, len(m.dataPos))
	for j, p := range m.dataPos {
		if p >= 0 {
			data[j] = r[p]
		}
	}
	b := baseRow{data: data, key: m.key(data)}
	if m.delIdx >= 0 {
		b.deleted = r[m.delIdx] == true
	}
	return b
}

// readGroup reads the rows of a group of files (see groupFiles), in key
// order.
func (m *mirror) readGroup(ctx context.Context, g *fileGroup) ([]baseRow, error) {
	if len(g.files) == 1 {
		return m.readFile(ctx, g.files[0])
	}
	var out []baseRow
	for _, f := range g.files {
		rows, err := m.readFile(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

// mergeWriter writes the rewritten rows of one group into files of at most
// TargetFileRows rows, never splitting equal keys. A full file closes in
// the background while the next one fills (see closer).
type mergeWriter struct {
	m       *mirror
	a       *Applier
	w       *delta.DataWriter
	buf     []delta.Row
	min     []byte
	lastKey []byte
	// files are the files written, in key order; closer closes the last.
	files   []*mirrorFile
	closer  closer
	written int64
	// expectRows is how many rows the next file opened is expected to
	// get (see Applier.writeOptions), or zero.
	expectRows int64
	// feed writes the change data files with the change data feed, once
	// rewrote says a committed file is rewritten (cdf.go); after holds
	// the rows apply wrote for its key while track is set.
	feed    *changeFeed
	rewrote bool
	track   bool
	after   []imageRow
	// hold has emit keep the rows of a key in held rather than write
	// them, and kept marks the rows they leave as they were (see
	// applyDeleting).
	hold bool
	held []imageRow
	kept []bool
}

// openFor makes sure w has a file open for a row of key: a full one is
// closed before a key other than its last.
func openFor[K string | []byte](w *mergeWriter, key K) error {
	m := w.m
	if w.w != nil && w.w.NumRows()+int64(len(w.buf)) >= w.a.cfg.TargetFileRows && string(key) != string(w.lastKey) {
		if err := w.close(); err != nil {
			return err
		}
	}
	if w.w == nil {
		dw, err := delta.NewDataWriter(m.t.Path(), m.schema, nil, nil, w.a.writeOptions(w.expectRows))
		if err != nil {
			return fmt.Errorf("mirror %s: %w", m.name, err)
		}
		w.w, w.min = dw, append([]byte(nil), key...) // a copy: key may be reused
	}
	return nil
}

// emitInsert writes an inserted row of key. One as queued is written into
// the columns without converting its values to Go values (see putter).
func (w *mergeWriter) emitInsert(key []byte, ins *insertRow) error {
	if ins.row != nil {
		return w.emit(string(key), ins.row, false)
	}
	m := w.m
	if err := openFor(w, key); err != nil {
		return err
	}
	b, err := startRow(w.w, &w.buf)
	if err != nil {
		return fmt.Errorf("mirror %s: %w", m.name, err)
	}
	ins.cols.putRow(ins.m, ins.vals, b, m.dataPos)
	if m.delIdx >= 0 {
		b.Bool(m.delIdx, false)
	}
	if err := b.End(); err != nil {
		return fmt.Errorf("mirror %s: %w", m.name, err)
	}
	w.lastKey = append(w.lastKey[:0], key...)
	w.written++
	return nil
}

func (w *mergeWriter) emit(key string, data []any, deleted bool) error {
	if w.hold {
		w.held = append(w.held, imageRow{data: data, deleted: deleted})
		return nil
	}
	m := w.m
	if err := openFor(w, key); err != nil {
		return err
	}
	var row delta.Row
	w.buf, row = nextRow(w.buf, len(m.schema.Fields))
	for i, v := range data {
		if i < len(m.dataPos) && m.dataPos[i] >= 0 {
			if v == typemap.Unchanged {
				w.a.Warn(m.name, "unchanged TOAST value without an existing row; written as null")
				v = nil
			}
			row[m.dataPos[i]] = v
		}
	}
	if m.delIdx >= 0 {
		row[m.delIdx] = deleted
	}
	if w.track {
		w.after = append(w.after, imageRow{data: data, deleted: deleted})
	}
	w.lastKey = append(w.lastKey[:0], key...)
	w.written++
	if len(w.buf) >= 1024 {
		if err := w.w.Write(w.buf); err != nil {
			return fmt.Errorf("mirror %s: %w", m.name, err)
		}
		w.buf = w.buf[:0]
	}
	return nil
}

// close writes the buffered rows to the file being written and closes it
// in the background.
func (w *mergeWriter) close() error {
	if w.w == nil {
		return nil
	}
	dw := w.w
	w.w = nil
	if len(w.buf) > 0 {
		if err := dw.Write(w.buf); err != nil {
			dw.Abort()
			return fmt.Errorf("mirror %s: %w", w.m.name, err)
		}
		w.buf = w.buf[:0]
	}
	minKey, maxKey := w.min, bytes.Clone(w.lastKey)
	err := w.closer.start(dw, func(add *delta.Add, rows int64) {
		add.Tags = map[string]string{tagMinKey: hex.EncodeToString(minKey), tagMaxKey: hex.EncodeToString(maxKey)}
		w.files = append(w.files, &mirrorFile{add: add, minKey: minKey, maxKey: maxKey, rows: rows})
	})
	if err != nil {
		return fmt.Errorf("mirror %s: %w", w.m.name, err)
	}
	return nil
}

// finish waits until every file is written.
func (w *mergeWriter) finish() error {
	if err := w.closer.wait(); err != nil {
		return fmt.Errorf("mirror %s: %w", w.m.name, err)
	}
	return nil
}

func (w *mergeWriter) abort() {
	if w.w != nil {
		w.w.Abort()
		w.w = nil
	}
	w.closer.abort()
	if w.feed != nil {
		w.feed.abort()
	}
}

// apply writes the result of an entry over the existing rows of its key,
// and the key's changes to the change data feed.
func (w *mergeWriter) apply(key string, e *entry, base []baseRow) error {
	if w.feed == nil || !w.rewrote {
		return w.applyRows(key, e, base)
	}
	w.track, w.after = true, w.after[:0]
	err := w.applyRows(key, e, base)
	w.track = false
	if err != nil {
		return err
	}
	return w.feed.diff(base, w.after)
}

// applyRows writes the result of an entry over the existing rows of its
// key.
func (w *mergeWriter) applyRows(key string, e *entry, base []baseRow) error {
	m := w.m
	var live []baseRow
	for _, b := range base {
		if b.deleted {
			// Soft-deleted rows stay unless the key comes back.
			if m.multiset || e.deleted {
				if err := w.emit(key, b.data, true); err != nil {
					return err
				}
			}
			continue
		}
		live = append(live, b)
	}
	if m.multiset {
		n := len(live) + e.count
		if n < 0 {
			w.a.Warn(m.name, "delete of a row the mirror does not hold; ignored")
			n = 0
		}
		for i := 0; i < n; i++ {
			data := e.row
			if i < len(live) {
				data = live[i].data
			}
			if err := w.emit(key, data, false); err != nil {
				return err
			}
		}
		if m.soft {
			for i := n; i < len(live); i++ {
				if err := w.emit(key, live[i].data, true); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var cur []any
	if len(live) > 0 {
		cur = live[0].data
	}
	row := e.row
	if row == nil {
		row = cur
	} else if cur != nil && e.partial() {
		row = fillUnchanged(row, cur)
	}
	if e.deleted {
		if m.soft && row != nil {
			return w.emit(key, row, true)
		}
		return nil
	}
	return w.emit(key, row, false)
}

// merge applies the flush's pending set and returns the actions to commit.
func (m *mirror) merge(ctx context.Context, a *Applier) (actions []delta.Action, operation string, err error) {
	if err := m.endAppend(); err != nil {
		return nil, "", err
	}
	p := m.pend
	groups := groupFiles(m.baseFiles())
	var removed []*mirrorFile
	// appended holds the files of the flush's appender: not committed.
	appended := map[*mirrorFile]bool{}
	for _, f := range m.app.files() {
		appended[f] = true
	}
	if r := m.app; r != nil && r.replaced != nil {
		removed = append(removed, r.replaced)
	}
	operation = "WRITE"
	if p.truncated {
		// Every committed file goes, and so do the files of the
		// appenders before the truncate.
		removed = append(removed, m.files...)
		for _, r := range m.cleared {
			for _, f := range r.files() {
				removed = append(removed, f)
				appended[f] = true
			}
		}
		operation = "TRUNCATE"
	}
	w := &mergeWriter{m: m, a: a}
	if a.cfg.ChangeDataFeed && !p.truncated {
		w.feed = &changeFeed{m: m, a: a}
	}
	defer w.abort()
	group := -2
	var base []baseRow
	bi := 0
	endGroup := func() error {
		for ; bi < len(base); bi++ {
			if err := w.emit(base[bi].key, base[bi].data, base[bi].deleted); err != nil {
				return err
			}
		}
		base, bi = nil, 0
		return w.close()
	}
	tailLimit := a.cfg.TargetFileRows / 2
	if a.cfg.Compaction {
		// New files; compaction merges them (see mirror.go).
		tailLimit = 0
	}
	err = p.iterate(func(k []byte, e *entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g := assignGroup(groups, k, tailLimit)
		if g != group {
			if group != -2 {
				if err := endGroup(); err != nil {
					return err
				}
			}
			group = g
			if g >= 0 {
				rows, err := m.readGroup(ctx, groups[g])
				if err != nil {
					return err
				}
				base = rows
				removed = append(removed, groups[g].files...)
				// Keys come in order and a key above every file
				// (group -1) comes after every file's: from the
				// first committed file rewritten on, every change
				// is fed. (A file of the flush's appender holds
				// only its inserts: the appender runs with the
				// feed only in a mirror without committed files.)
				for _, f := range groups[g].files {
					w.rewrote = w.rewrote || !appended[f]
				}
			}
		}
		key := string(k)
		for bi < len(base) && base[bi].key < key {
			if err := w.emit(base[bi].key, base[bi].data, base[bi].deleted); err != nil {
				return err
			}
			bi++
		}
		start := bi
		for bi < len(base) && base[bi].key == key {
			bi++
		}
		return w.apply(key, e, base[start:bi])
	})
	if err == nil && group != -2 {
		err = endGroup()
	}
	if err == nil {
		err = w.finish()
	}
	if err != nil {
		return nil, "", err
	}
	now := nowMillis(a.clock)
	gone := map[*mirrorFile]bool{}
	for _, f := range removed {
		gone[f] = true
		if appended[f] {
			// Rewritten before it was ever committed: nothing refers
			// to it.
			m.removeUncommitted(f)
			continue
		}
		actions = append(actions, delta.RemoveOf(f.add, now, true))
	}
	if len(actions) > 0 && operation == "WRITE" {
		operation = "MERGE"
	}
	actions, err = w.feedActions(actions)
	if err != nil {
		return nil, "", err
	}
	kept := make([]*mirrorFile, 0, len(m.files))
	for _, f := range m.files {
		if !gone[f] {
			kept = append(kept, f)
		}
	}
	for _, f := range m.app.files() {
		if !gone[f] {
			actions = append(actions, f.add)
			kept = append(kept, f)
		}
	}
	return w.settle(actions, kept), operation, nil
}

// feedActions appends to actions the change data files of the merge's
// feed, when it has one and fed it.
func (w *mergeWriter) feedActions(actions []delta.Action) ([]delta.Action, error) {
	if w.feed == nil || !w.rewrote {
		return actions, nil
	}
	cdcs, err := w.feed.finish()
	if err != nil {
		return nil, err
	}
	for _, c := range cdcs {
		actions = append(actions, c)
	}
	return actions, nil
}

// settle appends the adds of the files the merge wrote to actions and
// makes them, with kept, the files of the mirror once the merge commits.
func (w *mergeWriter) settle(actions []delta.Action, kept []*mirrorFile) []delta.Action {
	for _, f := range w.files {
		actions = append(actions, f.add)
		kept = append(kept, f)
	}
	sortFiles(kept)
	w.m.nextFiles = kept
	return actions
}

// removeUncommitted deletes a data file of the flush's appender that the
// flush rewrote. Should that fail, the file stays an orphan that no commit
// refers to, as one left by a crash, and vacuum deletes it.
func (m *mirror) removeUncommitted(f *mirrorFile) {
	if path, err := delta.ResolvePath(m.t.Path(), f.add.Path); err == nil {
		os.Remove(path)
	}
}
