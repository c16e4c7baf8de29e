package applier

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/lakeside/lakeside/delta"
)

// Merge-on-read. With Config.DeletionVectors a flush rewrites no data file
// to change rows of it: it deletes the rows' old versions with deletion
// vectors (delta.DeletionVectorActions: a remove of the logical file and
// an add of the same data file with a wider vector) and writes their new
// versions, and its inserts, into new files in key order. What a flush
// writes then grows with the rows it changes, not with the size of the
// files they are in; compaction purges the deleted rows later.
//
// A new version goes to a new file whose key range may overlap those of
// older files, so a key may be in several files, though live (not
// deleted by a vector) in one only (copies of a multiset row aside).
// The merge reads the files in two passes over the flush's keys, each a
// sweep along the key order with the files whose ranges hold the key
// (fileSweep): the first reads the key columns of those files and finds
// the rows the keys hit; the second reads those rows whole, file by file,
// applies the changes over them, deletes the rows whose versions change
// and writes the new ones. A row the changes leave as it was (a copy of
// a multiset row that stays, a soft-deleted row that stays deleted) is
// kept where it is. Memory holds the key columns of the files whose ranges
// hold the key being looked at, and the rows the flush hits of those
// files: one file's in a mirror whose ranges do not overlap.
//
// A TRUNCATE removes every file, and its flush is merged copy-on-write.

// dvFile is a file a merge with deletion vectors reads: the indexes of its
// rows the flush's keys hit and of those it deletes, and, while the second
// pass is in its range, the rows hit.
type dvFile struct {
	f   *mirrorFile
	hit *delta.DeletionVector
	del *delta.DeletionVector
	// rows are the rows hit, in key order, and index their indexes in
	// the data file.
	rows  []baseRow
	index []uint64
}

// fileSweep yields, for keys in ascending order, the files whose key
// ranges hold the key. A file without a key range holds every key.
type fileSweep struct {
	files  []*mirrorFile // in minKey order
	next   int
	active []*mirrorFile
}

// at returns the files whose ranges hold k, k being above every key asked
// before, and calls leave with each file whose range ends below it.
func (s *fileSweep) at(k []byte, leave func(*mirrorFile)) []*mirrorFile {
	for s.next < len(s.files) && bytes.Compare(s.files[s.next].minKey, k) <= 0 {
		s.active = append(s.active, s.files[s.next])
		s.next++
	}
	kept := s.active[:0]
	for _, f := range s.active {
		if _, ranged := f.add.Tags[tagMaxKey]; ranged && bytes.Compare(f.maxKey, k) < 0 {
			leave(f)
			continue
		}
		kept = append(kept, f)
	}
	s.active = kept
	return kept
}

// keyIndex is the key of a row of a data file and its index there.
type keyIndex struct {
	key   string
	index uint64
}

// readKeys returns the keys of the rows of f its deletion vector leaves,
// with their indexes, in key order. Only the key columns are read (every
// column of a multiset, whose key they all are).
func (m *mirror) readKeys(ctx context.Context, f *mirrorFile) ([]keyIndex, error) {
	st := m.schema
	var pos []int // the data columns read, in the order of st
	if !m.multiset {
		st = &delta.StructType{}
		for _, c := range m.keyIdx {
			if c >= 0 && m.dataPos[c] >= 0 {
				st.Fields = append(st.Fields, m.schema.Fields[m.dataPos[c]])
				pos = append(pos, c)
			}
		}
	}
	rows, index, err := delta.ReadDataFileIndexed(ctx, m.t.Path(), f.add, st, nil)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: read %s: %w", m.name, f.add.Path, err)
	}
	if want := f.liveRows(); want >= 0 && int64(len(rows)) != want {
		return nil, fmt.Errorf("mirror %s: read %s: %w: %d rows, its stats and deletion vector say %d", m.name, f.add.Path, errFileRows, len(rows), want)
	}
	out := make([]keyIndex, len(rows))
	data := make([]any, len(m.dataPos))
	for i, r := range rows {
		if m.multiset {
			for j, p := range m.dataPos {
				data[j] = nil
				if p >= 0 {
					data[j] = r[p]
				}
			}
		} else {
			for j, c := range pos {
				data[c] = r[j]
			}
		}
		out[i] = keyIndex{key: m.key(data), index: index[i]}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

// readHit reads the rows of d's file its first pass hit, in key order.
func (m *mirror) readHit(ctx context.Context, d *dvFile) error {
	rows, index, err := delta.ReadDataFileIndexed(ctx, m.t.Path(), d.f.add, m.schema, d.hit)
	if err != nil {
		return fmt.Errorf("mirror %s: read %s: %w", m.name, d.f.add.Path, err)
	}
	if int64(len(rows)) != d.hit.Cardinality() {
		return fmt.Errorf("mirror %s: read %s: %w: %d of the %d rows looked for", m.name, d.f.add.Path, errFileRows, len(rows), d.hit.Cardinality())
	}
	type indexed struct {
		row   baseRow
		index uint64
	}
	out := make([]indexed, len(rows))
	for i, r := range rows {
		out[i] = indexed{row: m.baseRowOf(r), index: index[i]}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].row.key < out[j].row.key })
	d.rows, d.index = make([]baseRow, len(out)), make([]uint64, len(out))
	for i, o := range out {
		d.rows[i], d.index[i] = o.row, o.index
	}
	return nil
}

// findHits is the first pass of a merge with deletion vectors: it returns
// the files of files whose rows the flush's keys hit, with those rows'
// indexes.
func (m *mirror) findHits(ctx context.Context, files []*mirrorFile) (map[*mirrorFile]*dvFile, error) {
	hits := map[*mirrorFile]*dvFile{}
	keys := map[*mirrorFile][]keyIndex{}
	sweep := &fileSweep{files: files}
	leave := func(f *mirrorFile) { delete(keys, f) }
	err := m.pend.iterate(func(k []byte, _ *entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, f := range sweep.at(k, leave) {
			ks, ok := keys[f]
			if !ok {
				var err error
				if ks, err = m.readKeys(ctx, f); err != nil {
					return err
				}
				keys[f] = ks
			}
			i := sort.Search(len(ks), func(i int) bool { return ks[i].key >= string(k) })
			for ; i < len(ks) && ks[i].key == string(k); i++ {
				d := hits[f]
				if d == nil {
					d = &dvFile{f: f, hit: delta.NewDeletionVector(), del: delta.NewDeletionVector()}
					hits[f] = d
				}
				d.hit.Add(ks[i].index)
			}
		}
		return nil
	})
	return hits, err
}

// mergeDeletes applies the flush's pending set with deletion vectors (see
// the comment at the top) and returns the actions to commit.
func (m *mirror) mergeDeletes(ctx context.Context, a *Applier) (actions []delta.Action, operation string, err error) {
	if err := m.endAppend(); err != nil {
		return nil, "", err
	}
	files := m.baseFiles()
	appended := map[*mirrorFile]bool{}
	for _, f := range m.app.files() {
		appended[f] = true
	}
	hits, err := m.findHits(ctx, files)
	if err != nil {
		return nil, "", err
	}
	w := &mergeWriter{m: m, a: a}
	if a.cfg.ChangeDataFeed {
		w.feed = &changeFeed{m: m, a: a}
		// A commit with change data files has every change in them; one
		// without has its inserts as the rows of its adds. It needs them
		// once a committed file's rows change.
		for f := range hits {
			w.rewrote = w.rewrote || !appended[f]
		}
	}
	defer w.abort()

	sweep := &fileSweep{files: files}
	leave := func(f *mirrorFile) {
		if d := hits[f]; d != nil {
			d.rows, d.index = nil, nil
		}
	}
	var base []baseRow
	var from []*dvFile
	var at []uint64
	err = m.pend.iterate(func(k []byte, e *entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		base, from, at = base[:0], from[:0], at[:0]
		for _, f := range sweep.at(k, leave) {
			d := hits[f]
			if d == nil {
				continue
			}
			if d.rows == nil {
				if err := m.readHit(ctx, d); err != nil {
					return err
				}
			}
			i := sort.Search(len(d.rows), func(i int) bool { return d.rows[i].key >= string(k) })
			for ; i < len(d.rows) && d.rows[i].key == string(k); i++ {
				base, from, at = append(base, d.rows[i]), append(from, d), append(at, d.index[i])
			}
		}
		return w.applyDeleting(string(k), e, base, func(i int) { from[i].del.Add(at[i]) })
	})
	if err == nil {
		err = w.close()
	}
	if err == nil {
		err = w.finish()
	}
	if err != nil {
		return nil, "", err
	}
	return m.deletionActions(ctx, a, w, hits, appended)
}

// applyDeleting writes the result of an entry over the existing rows of
// its key, base, keeping the rows that stay as they are and calling
// remove with the index in base of each row it replaces or deletes.
func (w *mergeWriter) applyDeleting(key string, e *entry, base []baseRow, remove func(i int)) error {
	w.hold, w.held = true, w.held[:0]
	err := w.applyRows(key, e, base)
	w.hold = false
	if err != nil {
		return err
	}
	w.kept = append(w.kept[:0], make([]bool, len(base))...)
	for _, out := range w.held {
		j := sameRow(base, w.kept, out)
		if j >= 0 {
			w.kept[j] = true
			continue
		}
		if err := w.emit(key, out.data, out.deleted); err != nil {
			return err
		}
	}
	for j, k := range w.kept {
		if !k {
			remove(j)
		}
	}
	if w.feed != nil && w.rewrote {
		return w.feed.diff(base, w.held)
	}
	return nil
}

// sameRow returns the index of the row of base not kept yet that out is,
// unchanged (the same values, not a copy of them), or -1.
func sameRow(base []baseRow, kept []bool, out imageRow) int {
	for j, b := range base {
		if !kept[j] && b.deleted == out.deleted && len(b.data) > 0 && len(b.data) == len(out.data) && &b.data[0] == &out.data[0] {
			return j
		}
	}
	return -1
}

// deletionActions stores the deletion vectors of the files a merge deleted
// rows of and returns the merge's actions: for each committed file the
// remove of its logical file and the add of its new one (none when no row
// is left), then the adds of the flush's appender and of the new files.
// An appender's file, never committed, gets its vector in its add.
func (m *mirror) deletionActions(ctx context.Context, a *Applier, w *mergeWriter, hits map[*mirrorFile]*dvFile, appended map[*mirrorFile]bool) ([]delta.Action, string, error) {
	var changed []*dvFile
	var dvs []*delta.DeletionVector
	for _, f := range m.baseFiles() {
		d := hits[f]
		if d == nil || d.del.Cardinality() == 0 {
			continue
		}
		dv := d.del
		if old := f.add.DeletionVector; old != nil {
			prev, err := delta.ReadDeletionVector(m.t.Path(), old)
			if err != nil {
				return nil, "", fmt.Errorf("mirror %s: %w", m.name, err)
			}
			dv = prev.Clone()
			dv.Or(d.del)
		}
		changed = append(changed, d)
		dvs = append(dvs, dv)
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	descs, err := delta.StoreDeletionVectors(m.t.Path(), dvs, 0)
	if err != nil {
		return nil, "", fmt.Errorf("mirror %s: %w", m.name, err)
	}
	now := nowMillis(a.clock)
	var actions []delta.Action
	replaced := map[*mirrorFile]*mirrorFile{} // nil: gone
	for i, d := range changed {
		f := d.f
		if appended[f] {
			if descs[i].Cardinality >= f.rows {
				m.removeUncommitted(f)
				replaced[f] = nil
				continue
			}
			add, err := f.add.WithDeletionVector(descs[i])
			if err != nil {
				return nil, "", fmt.Errorf("mirror %s: %w", m.name, err)
			}
			f.add = add
			continue
		}
		rm, add, err := delta.DeletionVectorActions(f.add, descs[i], now)
		if err != nil {
			return nil, "", fmt.Errorf("mirror %s: %w", m.name, err)
		}
		actions = append(actions, rm)
		replaced[f] = nil
		if add != nil {
			actions = append(actions, add)
			replaced[f] = &mirrorFile{add: add, minKey: f.minKey, maxKey: f.maxKey, rows: f.rows}
		}
	}
	operation := "WRITE"
	if len(actions) > 0 {
		operation = "MERGE"
	}
	actions, err = w.feedActions(actions)
	if err != nil {
		return nil, "", err
	}
	kept := make([]*mirrorFile, 0, len(m.files)+len(w.files))
	for _, f := range m.baseFiles() {
		if r, ok := replaced[f]; ok {
			if r != nil {
				kept = append(kept, r)
			}
			continue
		}
		if appended[f] {
			actions = append(actions, f.add)
		}
		kept = append(kept, f)
	}
	return w.settle(actions, kept), operation, nil
}
