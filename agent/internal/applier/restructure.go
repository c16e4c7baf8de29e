package applier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// A schema version that changes what the Delta tables' files hold, not just
// what their schemas say, is applied to the files at that point of the
// stream, before any change of the flush that follows it (Applier.evolve;
// nextBatch never lets a flush span a new schema version):
//
//   - a column whose Delta type changed: the changelog's files and the
//     mirror's are rewritten with its values recast (typemap.Recast), so
//     that the column keeps its name (a value without one in the new type
//     becomes null and, in the changelog, is listed in _replaced);
//   - a column added with a constant default (store.Column.Missing): the
//     mirror's rows get the value PostgreSQL gives the rows stored before;
//   - another key (a new primary key or replica identity), or for a table
//     whose rows are a multiset, other columns: the mirror is keyed again.
//
// A rename or a drop only changes the schemas (column mapping), in the
// next commit. Each rewrite is one commit that keeps the table's txn
// version, so a crash before it redoes it and a crash after it finds
// nothing left to do.

// evolve brings the columns of st and its Delta tables to schema version
// target. It runs before the flush adds a change of st (the caller checks).
func (a *Applier) evolve(ctx context.Context, st *sourceTable, target *store.Relation) error {
	if a.adder != nil {
		a.adder.sync()
	}
	st.cols.evolve(target)
	if st.mirror != nil {
		if err := st.mirror.evolve(ctx, a, target); err != nil {
			return err
		}
	}
	if st.changelog != nil {
		if err := st.changelog.evolve(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// committedSchema returns the schema of the table's last commit.
func (dt *deltaTable) committedSchema() (*delta.StructType, error) {
	st, err := dt.meta.Schema()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dt.name, err)
	}
	return st, nil
}

// recastColumns returns, for each data column, its field in old (-1: none)
// and whether its values need recasting to the column's type now.
func recastColumns(old *delta.StructType, cols []dataCol) (pos []int, recast []bool) {
	idx := map[string]int{}
	for i, f := range old.Fields {
		idx[f.PhysicalName()] = i
	}
	pos, recast = make([]int, len(cols)), make([]bool, len(cols))
	for i := range cols {
		pos[i] = -1
		if j, ok := idx[cols[i].physical]; ok && cols[i].live {
			pos[i] = j
			recast[i] = old.Fields[j].Type.String() != cols[i].typ.String()
		}
	}
	return pos, recast
}

// evolve lays the mirror out for the columns now, rewriting its files when
// their contents change (see above).
func (m *mirror) evolve(ctx context.Context, a *Applier, target *store.Relation) error {
	old, err := m.committedSchema()
	if err != nil {
		return err
	}
	pos, recast := recastColumns(old, m.cols.cols)
	var why []string
	if slices.Contains(recast, true) {
		why = append(why, "column type changed")
	}
	fill := false
	for i := range m.cols.cols {
		if c := &m.cols.cols[i]; c.live && c.added != nil && pos[i] < 0 {
			fill = true
		}
	}
	if fill {
		why = append(why, "column added with a default")
	}
	key := m.cols.keyOf(target)
	keyNames := keyPhysical(m.cols, key)
	multiset := key == nil
	switch {
	case multiset != m.multiset || !multiset && !slices.Equal(keyNames, m.keyNames):
		why = append(why, "key changed")
	case multiset && !slices.Equal(livePhysical(old, m.cols), livePhysicalNow(m.cols)):
		why = append(why, "columns of a table without a key changed")
	}
	if len(why) == 0 {
		return m.layout()
	}
	return m.rewrite(ctx, a, old, keyNames, multiset, strings.Join(why, ", "))
}

// livePhysical returns the physical names of old's fields that are data
// columns, in order.
func livePhysical(old *delta.StructType, cols *columns) []string {
	var out []string
	for _, f := range old.Fields {
		if !reserved(f.Name) {
			out = append(out, f.PhysicalName())
		}
	}
	return out
}

// livePhysicalNow returns the physical names of the live columns, in order.
func livePhysicalNow(cols *columns) []string {
	out := make([]string, len(cols.order))
	for i, j := range cols.order {
		out[i] = cols.cols[j].physical
	}
	return out
}

// rewrite writes every row of the mirror again under its columns now:
// values recast to changed types, the default of columns added with one
// filled in, keyed by keyNames (or as a multiset), in one commit that keeps
// the txn version. Rows of one key, which PostgreSQL cannot hold after a
// key change, are kept once, with a warning; no other row is lost.
func (m *mirror) rewrite(ctx context.Context, a *Applier, old *delta.StructType, keyNames []string, multiset bool, why string) error {
	pos, recast := recastColumns(old, m.cols.cols)
	fill := make([]any, len(m.cols.cols))
	for i := range m.cols.cols {
		c := &m.cols.cols[i]
		if c.live && c.added != nil && pos[i] < 0 {
			v, err := a.tm.Decoder(*c.added).Value([]byte(c.added.Missing))
			if err != nil {
				return fmt.Errorf("mirror %s: default of %s: %w", m.name, c.name, err)
			}
			fill[i] = typemap.ConverterFor(c.typ, m.name+"."+c.name, a)(&v)
		}
	}
	_, oldDel := old.Field(colDeleted)
	snap, err := m.t.SnapshotAt(ctx, m.version)
	if err != nil {
		return fmt.Errorf("mirror %s: %w", m.name, err)
	}
	oldFiles := m.files
	m.multiset, m.keyNames, m.files = multiset, keyNames, nil
	if err := m.layout(); err != nil {
		return err
	}
	m.begin(a)
	defer m.abort()
	var rows, dups, lost int64
	seen := map[string]bool{}
	err = snap.ScanFiles(ctx, func(_ *delta.Add, in []delta.Row) error {
		for _, r := range in {
			data := make([]any, len(m.cols.cols))
			for i, p := range pos {
				switch {
				case p >= 0 && recast[i]:
					v, ok := typemap.Recast(r[p], old.Fields[p].Type, m.cols.cols[i].typ)
					if !ok {
						lost++
					}
					data[i] = v
				case p >= 0:
					data[i] = r[p]
				default:
					data[i] = fill[i]
				}
			}
			deleted := oldDel >= 0 && r[oldDel] == true
			k := m.key(data)
			e := &entry{row: data, deleted: deleted}
			if multiset {
				e = &entry{row: data, count: 1}
			} else if seen[k] {
				dups++
			} else {
				seen[k] = true
			}
			rows++
			if err := m.pend.add([]byte(k), e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mirror %s: rewrite: %w", m.name, err)
	}
	actions, _, err := m.merge(ctx, a)
	if err != nil {
		return fmt.Errorf("mirror %s: rewrite: %w", m.name, err)
	}
	// The rows are the same rows restated: no data change, so that
	// readers of the change data feed and of the table's stream of
	// appends pass over the commit.
	for _, act := range actions {
		if add, ok := act.(*delta.Add); ok {
			add.DataChange = false
		}
	}
	now := nowMillis(a.clock)
	for _, f := range oldFiles {
		actions = append(actions, delta.RemoveOf(f.add, now, false))
	}
	md := *m.meta
	md.Configuration = maps.Clone(md.Configuration)
	if multiset {
		delete(md.Configuration, confKey)
		md.Configuration[confMultiset] = "true"
	} else {
		delete(md.Configuration, confMultiset)
		md.Configuration[confKey] = keyConf(keyNames)
	}
	m.meta, m.schemaDirty = &md, true
	if err := a.commit(ctx, m.deltaTable, actions, commitInfo{operation: "REWRITE", first: m.applied, last: m.applied}); err != nil {
		return err
	}
	m.files = m.nextFiles
	if dups > 0 {
		a.log.Warn("mirror had rows of one key more than once; one of each is kept", "table", m.name, "rows_dropped", dups)
	}
	if lost > 0 {
		a.log.Warn("values without a value of their column's new type; written as null", "table", m.name, "values", lost)
	}
	a.log.Info("mirror rewritten", "table", m.name, "why", why, "rows", rows-dups)
	return nil
}

// evolve lays the changelog out for the columns now, first rewriting its
// files when a column's type changed: every file, its rows as they were
// but for that column's values (and _before's), recast. The rewrite is
// committed with dataChange false: no row was added or removed.
func (c *changelog) evolve(ctx context.Context, a *Applier) error {
	old, err := c.committedSchema()
	if err != nil {
		return err
	}
	pos, recast := recastColumns(old, c.cols.cols)
	if err := c.layout(); err != nil {
		return err
	}
	if !slices.Contains(recast, true) {
		return nil
	}
	snap, err := c.t.SnapshotAt(ctx, c.version)
	if err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	if err := a.restore(ctx, c.deltaTable, snap); err != nil {
		return err
	}
	// Every field of the new schema, by physical name, from old.
	from := make([]int, len(c.schema.Fields))
	for i, f := range c.schema.Fields {
		from[i] = -1
		for j, g := range old.Fields {
			if g.PhysicalName() == f.PhysicalName() {
				from[i] = j
			}
		}
	}
	oldBefore, _ := old.Field(colBefore)
	var oldBeforeType *delta.StructType
	if oldBefore != nil {
		oldBeforeType, _ = oldBefore.Type.(*delta.StructType)
	}
	var beforeFrom []int
	var beforeRecast []bool
	if oldBeforeType != nil {
		beforeFrom, beforeRecast = recastColumns(oldBeforeType, c.cols.cols)
	}
	now := nowMillis(a.clock)
	var actions []delta.Action
	var rows int64
	err = snap.ScanFiles(ctx, func(add *delta.Add, in []delta.Row) error {
		if len(in) == 0 {
			actions = append(actions, delta.RemoveOf(add, now, false))
			return nil
		}
		out := make([]delta.Row, len(in))
		for k, r := range in {
			row := make(delta.Row, len(c.schema.Fields))
			for i, j := range from {
				if j >= 0 {
					row[i] = r[j]
				}
			}
			var replaced []any
			for i, p := range pos {
				if p < 0 || !recast[i] || c.dataPos[i] < 0 {
					continue
				}
				v, ok := typemap.Recast(r[p], old.Fields[p].Type, c.cols.cols[i].typ)
				if !ok {
					replaced = append(replaced, c.cols.cols[i].name)
				}
				row[c.dataPos[i]] = v
			}
			var b delta.Row
			if bi := indexOf(old, colBefore); bi >= 0 {
				b, _ = r[bi].(delta.Row)
			}
			if b != nil && oldBeforeType != nil {
				nb := make(delta.Row, c.beforeLen)
				for i, p := range beforeFrom {
					if p < 0 || c.beforePos[i] < 0 {
						continue
					}
					v := b[p]
					if beforeRecast[i] {
						v, _ = typemap.Recast(v, oldBeforeType.Fields[p].Type, c.cols.cols[i].typ)
					}
					nb[c.beforePos[i]] = v
				}
				row[c.beforeIdx] = nb
			} else {
				row[c.beforeIdx] = nil
			}
			if replaced != nil {
				if prev, ok := row[c.replIdx].([]any); ok {
					replaced = append(prev, replaced...)
				}
				row[c.replIdx] = replaced
			}
			out[k] = row
		}
		w, err := delta.NewDataWriter(c.t.Path(), c.schema, []string{colCommitDate},
			map[string]any{colCommitDate: out[0][c.dateIdx]}, a.writeOptions(int64(len(out))))
		if err != nil {
			return err
		}
		if err := w.Write(out); err != nil {
			w.Abort()
			return err
		}
		na, err := w.Close()
		if err != nil {
			return err
		}
		na.DataChange = false
		actions = append(actions, delta.RemoveOf(add, now, false), na)
		rows += int64(len(out))
		return nil
	})
	if err != nil {
		return fmt.Errorf("changelog %s: rewrite: %w", c.name, err)
	}
	if err := a.commit(ctx, c.deltaTable, actions, commitInfo{operation: "CHANGE COLUMN", first: c.applied, last: c.applied}); err != nil {
		return err
	}
	a.log.Info("changelog rewritten", "table", c.name, "why", "column type changed", "rows", rows)
	return nil
}

// indexOf returns the index of st's field name, or -1.
func indexOf(st *delta.StructType, name string) int {
	_, i := st.Field(name)
	return i
}

// evolveIdle brings the Delta tables of a table to its newest schema
// version when no queued change brought them there: a DDL with no row
// change after it, which the catalog watcher records as a version. The
// idle applier calls it, with everything queued applied, so every version
// up to the queue's checkpoint is the table's schema now. A table without
// Delta tables yet is left to its first change.
func (a *Applier) evolveIdle(ctx context.Context) {
	var rels map[store.RelationKey]*store.Relation
	if err := a.db.View(func(r *store.Reader) (err error) { rels, err = r.Relations(); return err }); err != nil {
		a.log.Warn("read schema history", "err", err)
		return
	}
	newest := map[string]*store.Relation{}
	for k, r := range rels {
		if n := r.TableName(); k.LSN <= a.scan.durable && (newest[n] == nil || k.LSN > newest[n].Key.LSN) {
			newest[n] = r
		}
	}
	for _, rel := range newest {
		if a.evolved[rel.Key] {
			continue
		}
		if _, behind := a.behind[rel.TableName()]; behind {
			// A failing table: its retry, a flush, evolves it; a
			// table loaded here would be taken for the flush's.
			continue
		}
		if err := a.evolveTo(ctx, rels, rel); err != nil {
			a.log.Warn("apply a schema change", "table", rel.TableName(), "err", err)
			a.reset()
			return
		}
		if a.evolved == nil {
			a.evolved = map[store.RelationKey]bool{}
		}
		a.evolved[rel.Key] = true
	}
}

// evolveTo brings the Delta tables of rel's table, if it has them, to
// schema version rel, committing a schema that only changed in metaData
// commits that keep the txn version.
func (a *Applier) evolveTo(ctx context.Context, rels map[store.RelationKey]*store.Relation, rel *store.Relation) error {
	if st := a.tables[rel.TableName()]; st == nil {
		if _, err := os.Stat(filepath.Join(a.cfg.TablesDir, rel.DirName(), "_delta_log")); err != nil {
			return nil
		}
	}
	if a.tables == nil {
		a.tables = map[string]*sourceTable{}
	}
	a.read.target = rel.Key.LSN
	defer func() { a.read.target = 0 }()
	st := a.table(ctx, rels, rel)
	if err := st.failed(); err != nil {
		return err
	}
	if st.cols.follows != rel.Key {
		if err := a.evolve(ctx, st, rel); err != nil {
			return err
		}
	}
	for _, dt := range []*deltaTable{st.changelog.deltaTable, st.mirror.deltaTable} {
		if dt.schemaDirty {
			if err := a.commit(ctx, dt, nil, commitInfo{operation: "CHANGE COLUMN", first: dt.applied, last: dt.applied}); err != nil {
				return err
			}
		}
	}
	return nil
}

// restore brings back the data files of snap that are no longer on local
// disk (pruned, see Config.Restore), so that a rewrite can read them.
func (a *Applier) restore(ctx context.Context, dt *deltaTable, snap *delta.Snapshot) error {
	if a.cfg.Restore == nil {
		return nil
	}
	for _, add := range snap.Files() {
		p, err := delta.ResolvePath(dt.t.Path(), add.Path)
		if err != nil {
			return fmt.Errorf("%s: %w", dt.name, err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := a.cfg.Restore(ctx, dt.name, add.Path, p); err != nil {
			return fmt.Errorf("%s: restore %s: %w", dt.name, add.Path, err)
		}
		a.log.Info("data file restored from the replica", "table", dt.name, "path", add.Path)
	}
	return nil
}
