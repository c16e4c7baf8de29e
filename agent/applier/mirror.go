package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// The mirror table "<schema>.<table>" holds the current rows. It is merged
// copy-on-write: a flush removes the data files its changes touch and adds
// their rewritten contents.
//
// Clustering. Every data file holds a contiguous, sorted range of row keys
// (see keys.go), recorded in the add action's tags lakeside.minKey and
// lakeside.maxKey (hex); ranges of different files never overlap. A changed
// key belongs to the file with the greatest minKey at or below it (the
// first file for keys below every range). Keys above the last file's range
// go to the last file while it holds less than half of TargetFileRows rows,
// and to new files otherwise, so an append-only workload neither rewrites
// big files nor creates one file per key. Rewritten files are split at
// TargetFileRows rows, never inside a run of equal keys.
//
// Memory. A flush collects its changes, encoded, in a pending set
// (pending.go) that holds up to MergeMemoryBytes in memory and spills
// sorted runs to disk past it. The merge then walks the pending keys in
// order (sorted once in memory, or a k-way merge with the runs), folding
// the changes of each key, and the touched files in order, holding at most
// one existing data file in memory, and streams the result into Parquet
// writers. Memory is bounded by MergeMemoryBytes plus two data files
// (TargetFileRows rows each: one filling while the one before it closes,
// see closer.go), whatever the size of the flush, so the 1M-row initial
// snapshot is applied like any other transaction.
//
// Keys. The key is the replica identity's columns as the first schema
// version names them, stored in the table configuration lakeside.key. A
// table whose replica identity is FULL, or that has none, is a multiset:
// the key is every column, the mirror keeps as many copies of a row as
// PostgreSQL has, a delete removes one copy, and an update removes one copy
// of the old row and adds the new one.
//
// Appending. Inserts of keys above every key of the mirror and of the
// flush's changes before them, each above the one before (a bulk load, an
// initial snapshot read in key order, rows keyed by a sequence), are
// written straight into new data files as they are read, by the flush's
// appender, once there are appendMinRows of them. So are inserts that
// interleave up to maxAppendRuns such sequences in ranges of their own
// (writers that each load a key range): the first appendMinRows rows, in
// key order, split into runs wherever a key arrived before the one below
// it, and each run appends the keys above its last one and below the next
// run's first into files of its own. The files are split at TargetFileRows
// rows like any other, and when the mirror's last file holds less than
// half of that, the lowest run starts with its rows and replaces it. The
// flush then has nothing of those rows to sort and merge. The first change
// that does not fit (an update or delete, a key that is in no run's place,
// a new column) ends the appender: its files are closed, and the flush's
// remaining changes go to the pending set and are merged over them as over
// committed files, except that an appender's file they rewrite was never
// committed and is deleted. The changes before the appender are merged the
// same way; their keys are all below its rows.
//
// Soft delete. With SoftDelete the mirror has a boolean _deleted column: a
// deleted row stays, with its last values and _deleted = true; an insert of
// the same key brings it back. TRUNCATE removes every file either way.
type mirror struct {
	*deltaTable
	cols     *columns
	keyNames []string
	multiset bool
	soft     bool

	files    []*mirrorFile
	dataPos  []int
	delIdx   int
	keyIdx   []int
	pend     *pending
	spillDir string
	keyBuf   []byte
	// merged and operation are the actions and the operation of the
	// commit write prepared; nextFiles are the files after it, in effect
	// once committed.
	merged    []delta.Action
	operation string
	nextFiles []*mirrorFile
	// app is the flush's appender, if it has one.
	app *appender
	// appended counts the rows written by appenders (for tests).
	appended int64
}

// appender writes the inserts a flush starts with straight into new data
// files (see Appending above).
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

type mirrorFile struct {
	add            *delta.Add
	minKey, maxKey []byte
	// rows is the file's row count from its stats (-1: no stats).
	rows int64
}

const (
	confKey      = "lakeside.key"
	confMultiset = "lakeside.multiset"
	tagMinKey    = "lakeside.minKey"
	tagMaxKey    = "lakeside.maxKey"
)

func (a *Applier) openMirror(ctx context.Context, name string, cols *columns, rel *store.Relation) (*mirror, error) {
	dt, snap, err := a.openTable(ctx, name, KindMirror, func() (*delta.StructType, []string, map[string]string) {
		st := delta.NewStructType(cols.fields()...)
		if a.cfg.SoftDelete {
			st.Fields = append(st.Fields, delta.NewField(colDeleted, delta.TypeBoolean, true))
		}
		first := cols.mapping(rel)
		conf := map[string]string{}
		if first.rel.ReplicaIdentity == 'f' || len(first.keyNames) == 0 {
			conf[confMultiset] = "true"
		} else {
			k, _ := json.Marshal(first.keyNames)
			conf[confKey] = string(k)
		}
		return st, nil, conf
	})
	if err != nil {
		return nil, err
	}
	cols.addExisting(dt.schema)
	m := &mirror{deltaTable: dt, cols: cols, soft: a.cfg.SoftDelete, spillDir: spillDir(a.cfg.TablesDir, name)}
	conf := dt.meta.Configuration
	if conf[confMultiset] == "true" {
		m.multiset = true
	} else if err := json.Unmarshal([]byte(conf[confKey]), &m.keyNames); err != nil {
		return nil, fmt.Errorf("open %s: bad %s: %w", name, confKey, err)
	}
	for _, add := range snap.Files() {
		f := &mirrorFile{add: add, rows: -1}
		f.minKey, _ = hex.DecodeString(add.Tags[tagMinKey])
		f.maxKey, _ = hex.DecodeString(add.Tags[tagMaxKey])
		if st, err := delta.ParseStats(add.Stats); err == nil {
			f.rows = st.NumRecords
		}
		m.files = append(m.files, f)
	}
	sortFiles(m.files)
	m.layout()
	return m, nil
}

func sortFiles(files []*mirrorFile) {
	sort.SliceStable(files, func(i, j int) bool { return bytes.Compare(files[i].minKey, files[j].minKey) < 0 })
}

func (m *mirror) layout() {
	if extend(m.schema, m.cols.cols) {
		m.schemaDirty = true
	}
	if m.soft {
		if f, _ := m.schema.Field(colDeleted); f == nil {
			m.schema.Fields = append(m.schema.Fields, delta.NewField(colDeleted, delta.TypeBoolean, true))
			m.schemaDirty = true
		}
	}
	m.dataPos = positions(m.schema, m.cols.cols)
	_, m.delIdx = m.schema.Field(colDeleted)
	m.keyIdx = m.keyIdx[:0]
	for _, n := range m.keyNames {
		i, ok := m.cols.idx[n]
		if !ok {
			i = -1
		}
		m.keyIdx = append(m.keyIdx, i)
	}
}

// key returns the key of a row of data column values.
func (m *mirror) key(row []any) string {
	return string(m.appendKey(nil, row))
}

// appendKey appends the key of a row of data column values to dst.
func (m *mirror) appendKey(dst []byte, row []any) []byte {
	if m.multiset {
		n := len(row)
		for n > 0 && row[n-1] == nil {
			n--
		}
		return appendKey(dst, row[:n])
	}
	for _, i := range m.keyIdx {
		var v any
		if i >= 0 && i < len(row) {
			v = row[i]
		}
		dst = appendKeyValue(dst, v)
	}
	return dst
}

// begin prepares the pending set of a flush.
func (m *mirror) begin(a *Applier) {
	if m.pend == nil {
		m.pend = newPending(m.spillDir, a.cfg.MergeMemoryKeys, a.cfg.MergeMemoryBytes, m.multiset)
	}
}

// abort forgets a failed flush (and, once committed, a finished one).
func (m *mirror) abort() {
	if m.pend != nil {
		m.pend.close()
		m.pend = nil
	}
	if m.app != nil {
		for _, run := range m.app.runs {
			run.w.abort()
		}
	}
	m.app = nil
	m.merged, m.operation, m.nextFiles = nil, "", nil
}

// add records one change.
func (m *mirror) add(ctx context.Context, a *Applier, rc *rowChange) error {
	m.begin(a)
	p := m.pend
	// key returns the key of row in a buffer reused by the next change.
	key := func(row []any) []byte {
		m.keyBuf = m.appendKey(m.keyBuf[:0], row)
		return m.keyBuf
	}
	if rc.op == store.OpInsert {
		k := key(rc.newRow)
		if ok, err := m.appendInsert(ctx, a, k, rc.newRow); ok || err != nil {
			return err
		}
		return p.add(k, m.insertEntry(rc.newRow))
	}
	// Any other change ends the appender.
	if err := m.endAppend(); err != nil {
		return err
	}
	switch rc.op {
	case store.OpTruncate:
		p.truncate()
		return nil
	case store.OpDelete:
		old := rc.oldRow
		if old == nil {
			a.warn(m.name, "delete without an old row; ignored")
			return nil
		}
		if m.multiset {
			return p.add(key(old), &entry{row: old, count: -1})
		}
		e := &entry{deleted: true}
		if !rc.oldIsKey {
			e.row = old
		}
		return p.add(key(old), e)
	case store.OpUpdate:
		row, old := rc.newRow, rc.oldRow
		if old != nil && !rc.oldIsKey {
			row = fillUnchanged(row, old)
		}
		if m.multiset {
			if old == nil || rc.oldIsKey {
				a.warn(m.name, "update without the old row in a multiset mirror; treated as an insert")
				return p.add(key(row), &entry{row: row, count: 1})
			}
			if err := p.add(key(old), &entry{row: old, count: -1}); err != nil {
				return err
			}
			return p.add(key(row), &entry{row: row, count: 1})
		}
		if old == nil {
			return p.add(key(row), &entry{row: row})
		}
		oldKey := m.appendKey(nil, old)
		newKey := key(row)
		if bytes.Equal(oldKey, newKey) {
			return p.add(newKey, &entry{row: row})
		}
		// The key changed: the old key is deleted, and unchanged values of
		// the new row come from the old key's row.
		if slices.Contains(row, unchanged) {
			base, err := m.lookup(ctx, a, oldKey)
			if err != nil {
				return err
			}
			row = fillUnchanged(row, base)
		}
		if err := p.add(oldKey, &entry{deleted: true}); err != nil {
			return err
		}
		return p.add(newKey, &entry{row: row})
	}
	return nil
}

// insertEntry returns the pending entry of an inserted row.
func (m *mirror) insertEntry(row []any) *entry {
	if m.multiset {
		return &entry{row: row, count: 1}
	}
	return &entry{row: row}
}

// appendInsert writes an inserted row, of key key, into the flush's
// appender when it can (see Appending above), starting the appender at an
// insert above every key so far, and reports whether it did. An insert
// that does not fit ends the appender, for the rest of the flush (as any
// other change does, see add).
func (m *mirror) appendInsert(ctx context.Context, a *Applier, key []byte, row []any) (bool, error) {
	r := m.app
	if r != nil && r.settled {
		return false, nil
	}
	if len(m.dataPos) != len(m.cols.cols) {
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
		return true, run.w.emit(string(key), row, false)
	}
	r.held = append(r.held, slices.Clone(row))
	if len(r.held) < appendMinRows {
		return true, nil
	}
	return true, m.startWriting(ctx, a)
}

// aboveAll reports whether key is above every key of the mirror's files
// and of the flush's pending set, in a flush that did not truncate the
// table: where an appender may start.
func (m *mirror) aboveAll(key []byte) bool {
	if m.pend.truncated || m.pend.changes > 0 && bytes.Compare(key, m.pend.maxKey) <= 0 {
		return false
	}
	last := m.lastFile()
	return last == nil || len(last.maxKey) > 0 && last.rows >= 0 && bytes.Compare(key, last.maxKey) > 0
}

// appendMinRows is how many rows an appender holds before it writes them:
// one that ends sooner (the first rows of a flush of a few transactions
// that happen to come in key order) hands them to the pending set, and the
// flush writes no file it then rewrites.
const appendMinRows = 1024

// lastFile returns the committed file with the greatest keys, or nil.
func (m *mirror) lastFile() *mirrorFile {
	if n := len(m.files); n > 0 {
		return m.files[n-1]
	}
	return nil
}

// startWriting splits the appender's held rows into runs (see Appending
// above) and writes them into their first data files, the lowest run's
// after the rows of the mirror's last file when that holds less than half
// of TargetFileRows rows, which the appender's files then replace. Rows
// that make more than maxAppendRuns runs, or two of one key, end the
// appender instead.
func (m *mirror) startWriting(ctx context.Context, a *Applier) error {
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
		r.runs = append(r.runs, run)
		if last := m.lastFile(); j == 0 && last != nil && last.rows < a.cfg.TargetFileRows/2 {
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
// in key order: the committed files and, once its appender has settled,
// the appender's files in place of the file it replaced.
func (m *mirror) baseFiles() []*mirrorFile {
	r := m.app
	if len(r.files()) == 0 && (r == nil || r.replaced == nil) {
		return m.files
	}
	out := make([]*mirrorFile, 0, len(m.files)+len(r.files()))
	for _, f := range m.files {
		if f != r.replaced {
			out = append(out, f)
		}
	}
	out = append(out, r.files()...)
	sortFiles(out)
	return out
}

// lookup returns the current row of key: from the pending set when it is
// held in memory, else from the mirror's files (baseFiles). (A key whose
// newest version was spilled to a run file is looked up in the files: this
// only matters for a key change with unchanged TOAST values inside a flush
// whose changes exceed the merge memory budget.)
func (m *mirror) lookup(ctx context.Context, a *Applier, key []byte) ([]any, error) {
	e, err := m.pend.get(key)
	if err != nil {
		return nil, err
	}
	if e != nil && (e.deleted || !e.partial()) {
		if e.deleted {
			return nil, nil
		}
		return e.row, nil
	}
	var base []any
	files := m.baseFiles()
	if i := assignFile(files, key, -1); i >= 0 && !m.pend.truncated {
		rows, err := m.readFile(ctx, files[i])
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			if r.key == string(key) && !r.deleted {
				base = r.data
				break
			}
		}
	}
	if e != nil && base != nil {
		return fillUnchanged(e.row, base), nil
	}
	if e != nil {
		return e.row, nil
	}
	return base, nil
}

// assignFile implements the clustering rule; tailLimit is the row count from
// which keys above the last file's range open a new file (-1: never).
func assignFile(files []*mirrorFile, key []byte, tailLimit int64) int {
	if len(files) == 0 {
		return -1
	}
	i := sort.Search(len(files), func(i int) bool { return bytes.Compare(files[i].minKey, key) > 0 }) - 1
	if i < 0 {
		return 0
	}
	last := len(files) - 1
	if i == last && tailLimit >= 0 && bytes.Compare(key, files[last].maxKey) > 0 && files[last].rows >= tailLimit {
		return -1
	}
	return i
}

// baseRow is a row of an existing data file.
type baseRow struct {
	key     string
	data    []any
	deleted bool
}

func (m *mirror) readFile(ctx context.Context, f *mirrorFile) ([]baseRow, error) {
	path, err := delta.ResolvePath(m.t.Path(), f.add.Path)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: %w", m.name, err)
	}
	rows, err := delta.ReadParquetFile(ctx, path, m.schema)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: read %s: %w", m.name, f.add.Path, err)
	}
	// The file is rewritten from these rows: fewer than its stats count
	// would drop rows from the mirror.
	if f.rows >= 0 && int64(len(rows)) != f.rows {
		return nil, fmt.Errorf("mirror %s: read %s: %w: %d rows, its stats say %d", m.name, f.add.Path, errFileRows, len(rows), f.rows)
	}
	out := make([]baseRow, len(rows))
	for i, r := range rows {
		data := make([]any, len(m.dataPos))
		for j, p := range m.dataPos {
			if p >= 0 {
				data[j] = r[p]
			}
		}
		out[i] = baseRow{data: data, key: m.key(data)}
		if m.delIdx >= 0 {
			out[i].deleted = r[m.delIdx] == true
		}
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
	lastKey string
	// files are the files written, in key order; closer closes the last.
	files   []*mirrorFile
	closer  closer
	written int64
}

func (w *mergeWriter) emit(key string, data []any, deleted bool) error {
	m := w.m
	if w.w != nil && w.w.NumRows()+int64(len(w.buf)) >= w.a.cfg.TargetFileRows && key != w.lastKey {
		if err := w.close(); err != nil {
			return err
		}
	}
	if w.w == nil {
		dw, err := delta.NewDataWriter(m.t.Path(), m.schema, nil, nil, w.a.writeOptions())
		if err != nil {
			return fmt.Errorf("mirror %s: %w", m.name, err)
		}
		w.w, w.min = dw, []byte(key)
	}
	var row delta.Row
	w.buf, row = nextRow(w.buf, len(m.schema.Fields))
	for i, v := range data {
		if i < len(m.dataPos) && m.dataPos[i] >= 0 {
			if v == unchanged {
				w.a.warn(m.name, "unchanged TOAST value without an existing row; written as null")
				v = nil
			}
			row[m.dataPos[i]] = v
		}
	}
	if m.delIdx >= 0 {
		row[m.delIdx] = deleted
	}
	w.lastKey = key
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
	minKey, maxKey := w.min, []byte(w.lastKey)
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
}

// apply writes the result of an entry over the existing rows of its key.
func (w *mergeWriter) apply(key string, e *entry, base []baseRow) error {
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
			w.a.warn(m.name, "delete of a row the mirror does not hold; ignored")
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
	files := m.baseFiles()
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
		removed, files = append(removed, files...), nil
		operation = "TRUNCATE"
	}
	w := &mergeWriter{m: m, a: a}
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
	err = p.iterate(func(k []byte, e *entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		g := assignFile(files, k, tailLimit)
		if g != group {
			if group != -2 {
				if err := endGroup(); err != nil {
					return err
				}
			}
			group = g
			if g >= 0 {
				rows, err := m.readFile(ctx, files[g])
				if err != nil {
					return err
				}
				base = rows
				removed = append(removed, files[g])
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
	for _, f := range w.files {
		actions = append(actions, f.add)
		kept = append(kept, f)
	}
	sortFiles(kept)
	m.nextFiles = kept
	return actions, operation, nil
}

// removeUncommitted deletes a data file of the flush's appender that the
// flush rewrote. Should that fail, the file stays an orphan that no commit
// refers to, as one left by a crash, and vacuum deletes it.
func (m *mirror) removeUncommitted(f *mirrorFile) {
	if path, err := delta.ResolvePath(m.t.Path(), f.add.Path); err == nil {
		os.Remove(path)
	}
}

// prepare readies the mirror for write, in the flush's goroutine.
func (m *mirror) prepare(a *Applier) error {
	if len(m.dataPos) != len(m.cols.cols) {
		// The appender's writers have the schema they were opened
		// with: they are closed before it grows.
		if err := m.endAppend(); err != nil {
			return err
		}
		m.layout()
	}
	m.begin(a)
	return nil
}

// write merges the flush's changes into new data files; merged holds the
// actions that add them and remove the files they replace. It touches
// nothing but this table, so flush runs it alongside the other tables'
// (see writeData).
func (m *mirror) write(ctx context.Context, a *Applier) error {
	actions, op, err := m.merge(ctx, a)
	if err != nil {
		return err
	}
	m.merged, m.operation = actions, op
	return nil
}

// commit commits what write merged.
func (m *mirror) commit(ctx context.Context, a *Applier, ci commitInfo) error {
	if err := a.fail("data-written", m.name); err != nil {
		return err
	}
	ci.operation = m.operation
	if err := a.commit(ctx, m.deltaTable, m.merged, ci); err != nil {
		return err
	}
	m.files = m.nextFiles
	m.abort()
	return nil
}
