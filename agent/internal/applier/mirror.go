package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// The mirror table "<schema>.<table>" holds the current rows. With
// Config.DeletionVectors it is merged on read (mergedv.go): a flush deletes
// the old versions of the rows it changes with deletion vectors and writes
// the new ones into new files. Otherwise it is merged copy-on-write: a
// flush removes the data files its changes touch and adds their rewritten
// contents, as described below.
//
// Clustering. Every data file holds a range of row keys (see
// typemap.AppendKey), recorded in the add action's tags lakeside.minKey
// and lakeside.maxKey (hex). Merged copy-on-write, the ranges of different
// files never overlap; files merged with deletion vectors may overlap, and
// the copy-on-write merge then takes runs of overlapping files as one
// (groupFiles). A changed key belongs to the group with the greatest
// minKey at or below it (the first group for keys below every range). Keys above the last file's range
// go to the last file while it holds less than half of TargetFileRows rows,
// and to new files otherwise, so an append-only workload neither rewrites
// big files nor creates one file per key. With Config.Compaction they
// always go to new files: a quiet insert-only table then writes only its
// new rows each flush, and compaction merges the small files they make
// (compact.go), runs of files adjacent in key order, whose key ranges stay
// disjoint. Rewritten files are split at
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
// Keys. The key is the columns that identify a row as the first schema
// version names them (store.Relation.KeyColumns: the primary key, whatever
// the replica identity, or the replica identity's columns), stored in the
// table configuration lakeside.key. A table without a key (REPLICA IDENTITY
// FULL without a primary key, or no identity) is a multiset: the key is
// every column, the mirror keeps as many copies of a row as PostgreSQL has,
// a delete removes one copy, and an update removes one copy of the old row
// and adds the new one. A mirror made a multiset by an earlier version for
// a table that has a key is rewritten keyed by it (rekey.go).
//
// Appending. Inserts in key order above every key of the mirror are
// written straight into new data files by the flush's appender (see
// appender): the flush has nothing of them to sort and merge.
//
// Soft delete. With SoftDelete the mirror has a boolean _deleted column: a
// deleted row stays, with its last values and _deleted = true; an insert of
// the same key brings it back. TRUNCATE removes every file either way.
type mirror struct {
	*deltaTable
	cols *columns
	// keyNames are the physical names of the key columns (the names of
	// tables written before column mapping, whose physical names are
	// their names).
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
	// app is the flush's appender, if it has one; cleared are the
	// appenders of the flush before a truncate, whose files the merge
	// deletes, never committed.
	app     *appender
	cleared []*appender
	// appended counts the rows written by appenders (for tests).
	appended int64
	// last is the group of files with the greatest keys of lastOf, the
	// files it was found in (see lastGroup).
	last   *fileGroup
	lastOf []*mirrorFile
}

type mirrorFile struct {
	add            *delta.Add
	minKey, maxKey []byte
	// rows is the data file's row count from its stats, deleted rows
	// included (-1: no stats; see liveRows).
	rows int64
}

// liveRows returns the rows of the file that its deletion vector leaves:
// its stats' numRecords less the vector's cardinality (-1: no stats).
func (f *mirrorFile) liveRows() int64 {
	if f.rows < 0 || f.add.DeletionVector == nil {
		return f.rows
	}
	return f.rows - f.add.DeletionVector.Cardinality
}

const (
	confKey      = "lakeside.key"
	confMultiset = "lakeside.multiset"
	tagMinKey    = "lakeside.minKey"
	tagMaxKey    = "lakeside.maxKey"
)

// openMirror opens the mirror in the directory named name, creating it
// for rel, the schema version the columns follow, when it does not exist.
func (a *Applier) openMirror(ctx context.Context, name string, cols *columns, rel *store.Relation) (*mirror, error) {
	dt, snap, err := a.openTable(ctx, name, KindMirror, func() (*delta.StructType, []string, map[string]string) {
		st := mirrorSchema(cols, a.cfg.SoftDelete)
		conf := map[string]string{}
		if a.cfg.ChangeDataFeed {
			conf[delta.EnableChangeDataFeedKey] = "true"
		}
		if a.cfg.DeletionVectors {
			conf[delta.EnableDeletionVectorsKey] = "true"
		}
		if key := cols.keyOf(rel); key == nil {
			conf[confMultiset] = "true"
		} else {
			conf[confKey] = keyConf(keyPhysical(cols, key))
		}
		return st, nil, conf
	})
	if err != nil {
		return nil, err
	}
	if a.cfg.DeletionVectors && !delta.DeletionVectorsEnabled(dt.protocol, dt.meta) {
		if err := a.enableDeletionVectors(ctx, dt); err != nil {
			return nil, err
		}
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
	return m, nil
}

// keyPhysical returns the physical names of the data columns key.
func keyPhysical(cols *columns, key []int) []string {
	names := make([]string, len(key))
	for i, j := range key {
		names[i] = cols.cols[j].physical
	}
	return names
}

// mirrorSchema returns the mirror's schema: the live data columns, and
// _deleted with soft delete.
func mirrorSchema(cols *columns, soft bool) *delta.StructType {
	st := delta.NewStructType(cols.fields()...)
	if soft {
		st.Fields = append(st.Fields, delta.NewField(colDeleted, delta.TypeBoolean, true))
	}
	return st
}

// keyConf returns the table configuration lakeside.key: the JSON list of
// the key columns' physical names.
func keyConf(physical []string) string {
	k, _ := json.Marshal(physical)
	return string(k)
}

func sortFiles(files []*mirrorFile) {
	sort.SliceStable(files, func(i, j int) bool { return bytes.Compare(files[i].minKey, files[j].minKey) < 0 })
}

// layout lays the schema out again when the columns changed, and computes
// the positions of the data columns and of the key's.
func (m *mirror) layout() error {
	if m.epoch != m.cols.epoch || len(m.dataPos) == 0 {
		if err := m.setSchema(mirrorSchema(m.cols, m.soft)); err != nil {
			return err
		}
		m.epoch = m.cols.epoch
	}
	m.dataPos = positions(m.schema, m.cols.cols)
	_, m.delIdx = m.schema.Field(colDeleted)
	m.keyIdx = m.keyIdx[:0]
	if m.multiset {
		// Every live column, in the schema's order.
		for _, f := range m.schema.Fields {
			if i := m.cols.byPhysical(f.PhysicalName()); i >= 0 {
				m.keyIdx = append(m.keyIdx, i)
			}
		}
		return nil
	}
	for _, n := range m.keyNames {
		m.keyIdx = append(m.keyIdx, m.cols.byPhysical(n))
	}
	return nil
}

// laidOut reports whether the positions are those of the columns now.
func (m *mirror) laidOut() bool {
	return m.epoch == m.cols.epoch && len(m.dataPos) == len(m.cols.cols)
}

// key returns the key of a row of data column values.
func (m *mirror) key(row []any) string {
	return string(m.appendKey(nil, row))
}

// appendKey appends the key of a row of data column values to dst.
func (m *mirror) appendKey(dst []byte, row []any) []byte {
	return typemap.AppendRowKey(dst, row, m.keyIdx, m.multiset)
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
	for _, r := range m.cleared {
		r.abort()
	}
	m.app.abort()
	m.app, m.cleared = nil, nil
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
	if rc.op == store.OpInsert || rc.op == store.OpSnapshot {
		// A copied row is an insert too: an insert of a key the mirror
		// holds replaces its row (an upsert), and a multiset gets a copy.
		return m.insert(ctx, a, key(rc.mirrorRow), &insertRow{row: rc.mirrorRow})
	}
	// Any other change ends the appender.
	if err := m.endAppend(); err != nil {
		return err
	}
	switch rc.op {
	case store.OpTruncate:
		// The rows after the truncate may start an appender of their
		// own (a reload, a resync's first chunks).
		if m.app != nil {
			m.cleared = append(m.cleared, m.app)
			m.app = nil
		}
		p.truncate()
		return nil
	case store.OpDelete:
		old := rc.oldRow
		if old == nil {
			a.Warn(m.name, "delete without an old row; ignored")
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
		row, old := rc.mirrorRow, rc.oldRow
		if old != nil && !rc.oldIsKey {
			row = fillUnchanged(row, old)
		}
		if m.multiset {
			if old == nil || rc.oldIsKey {
				a.Warn(m.name, "update without the old row in a multiset mirror; treated as an insert")
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
		if slices.Contains(row, typemap.Unchanged) {
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

// insertRow is an inserted row: its data column values (row), or its
// values of schema version m as queued (vals), which become data column
// values only if the mirror needs them so (to hold or merge them), not
// when an appender writes them (see mergeWriter.emitInsert).
type insertRow struct {
	row  []any
	m    *relMapping
	vals []store.Value
	// cols converts and puts vals.
	cols *adderColumns
	// ahead is how many changes of its transaction are still to be added,
	// this one included (see changesAhead), or zero: what an appender's
	// file opened for it expects to get.
	ahead int64
}

// values returns the row's data column values, in a table of n data
// columns.
func (r *insertRow) values(n int) []any {
	if r.row == nil {
		r.row = r.cols.convert(r.m, r.vals, n)
	}
	return r.row
}

// addInsert records an insert of a row of schema version mp, as queued,
// with ahead changes of its transaction still to be added (see
// insertRow). With quiet, values not representable are not counted (the
// changelog counted them).
func (m *mirror) addInsert(ctx context.Context, a *Applier, mp *relMapping, vals []store.Value, quiet bool, ahead int64) error {
	m.begin(a)
	ins := &insertRow{m: mp, vals: vals, cols: &mp.onAdder, ahead: ahead}
	if quiet {
		ins.cols = &mp.quietOnAdder
	}
	if m.multiset {
		m.keyBuf = m.appendKey(m.keyBuf[:0], ins.values(len(m.cols.cols)))
	} else {
		m.keyBuf = m.appendQueuedKey(m.keyBuf[:0], ins)
	}
	return m.insert(ctx, a, m.keyBuf, ins)
}

// insert records an inserted row of the given key: its flush's appender
// writes it, or the pending set takes it.
func (m *mirror) insert(ctx context.Context, a *Applier, key []byte, ins *insertRow) error {
	if ok, err := m.appendInsert(ctx, a, key, ins); ok || err != nil {
		return err
	}
	return m.pend.add(key, m.insertEntry(ins.values(len(m.cols.cols))))
}

// appendQueuedKey is appendKey for an inserted row as queued: the key its
// converted values have. Integer keys are read as they are; other key
// columns are converted.
func (m *mirror) appendQueuedKey(dst []byte, ins *insertRow) []byte {
	mp := ins.m
	for _, i := range m.keyIdx {
		if i < 0 {
			dst = typemap.AppendKeyValue(dst, nil)
			continue
		}
		v := mp.source(ins.vals, i)
		var conv typemap.Converter
		if v != nil {
			conv = ins.cols.conv[mp.src[i]]
		}
		dst = typemap.AppendQueuedKeyValue(dst, m.cols.cols[i].typ, v, conv)
	}
	return dst
}

// insertEntry returns the pending entry of an inserted row.
func (m *mirror) insertEntry(row []any) *entry {
	if m.multiset {
		return &entry{row: row, count: 1}
	}
	return &entry{row: row}
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
	groups := groupFiles(m.baseFiles())
	if i := assignGroup(groups, key, -1); i >= 0 {
		rows, err := m.readGroup(ctx, groups[i])
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

// fileGroup is a run of files, adjacent in key order, whose key ranges
// overlap one another's: one file in a mirror merged copy-on-write, whose
// ranges never overlap, more in one merged with deletion vectors, where a
// key's new version goes to a new file over the range of older ones.
type fileGroup struct {
	files          []*mirrorFile
	minKey, maxKey []byte
	// rows is the rows of its files, deleted ones included (-1 when one
	// of them has no stats).
	rows int64
}

// groupFiles returns the groups of files, files being in minKey order
// (sortFiles): a file joins the group before it when its range starts at
// or below the greatest key of that group's.
func groupFiles(files []*mirrorFile) []*fileGroup {
	var out []*fileGroup
	for _, f := range files {
		if n := len(out); n > 0 && len(out[n-1].maxKey) > 0 && bytes.Compare(f.minKey, out[n-1].maxKey) <= 0 {
			g := out[n-1]
			g.files = append(g.files, f)
			if bytes.Compare(f.maxKey, g.maxKey) > 0 {
				g.maxKey = f.maxKey
			}
			if g.rows >= 0 && f.rows >= 0 {
				g.rows += f.rows
			} else {
				g.rows = -1
			}
			continue
		}
		out = append(out, &fileGroup{files: []*mirrorFile{f}, minKey: f.minKey, maxKey: f.maxKey, rows: f.rows})
	}
	return out
}

// assignGroup implements the clustering rule over groups of files (see
// groupFiles); tailLimit is the row count from which keys above the last
// group's range open a new file (-1: never).
func assignGroup(groups []*fileGroup, key []byte, tailLimit int64) int {
	if len(groups) == 0 {
		return -1
	}
	i := sort.Search(len(groups), func(i int) bool { return bytes.Compare(groups[i].minKey, key) > 0 }) - 1
	if i < 0 {
		return 0
	}
	last := len(groups) - 1
	if i == last && tailLimit >= 0 && bytes.Compare(key, groups[last].maxKey) > 0 && groups[last].rows >= tailLimit {
		return -1
	}
	return i
}

// prepare readies the mirror for write, in the flush's goroutine.
func (m *mirror) prepare(a *Applier) error {
	if !m.laidOut() {
		// The appender's writers have the schema they were opened
		// with: they are closed before it changes.
		if err := m.endAppend(); err != nil {
			return err
		}
		if err := m.layout(); err != nil {
			return err
		}
	}
	m.begin(a)
	return nil
}

// write merges the flush's changes into new data files; merged holds the
// actions that add them and remove the files they replace. It touches
// nothing but this table, so flush runs it alongside the other tables'
// (see writeData).
func (m *mirror) write(ctx context.Context, a *Applier) error {
	merge := m.merge
	if m.deletes(a) {
		merge = m.mergeDeletes
	}
	actions, op, err := merge(ctx, a)
	if err != nil {
		return err
	}
	m.merged, m.operation = actions, op
	return nil
}

// deletes reports whether the flush merges with deletion vectors (see
// mergedv.go): they are on and the table lets writers write them, and the
// flush did not truncate it.
func (m *mirror) deletes(a *Applier) bool {
	return a.cfg.DeletionVectors && delta.DeletionVectorsEnabled(m.protocol, m.meta) && !m.pend.truncated
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
