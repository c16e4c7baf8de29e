package applier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/lakeside/lakeside/store"
)

// flush applies the queued transactions after the applied position up to
// and including the one ending at upTo: the changes are streamed chunk by
// chunk into the changelogs' Parquet writers and the mirrors' pending sets,
// then each touched table commits once (changelog first, then mirror), and
// finally the applied position is recorded and the queue trimmed.
func (a *Applier) flush(ctx context.Context, upTo store.LSN) (err error) {
	start := time.Now()
	a.warnings = map[string]int{}
	defer func() {
		a.buffers.Release()
		for w, n := range a.warnings {
			a.log.Warn("values not representable", "problem", w, "count", n)
		}
		a.warnings = nil
		if err != nil {
			a.reset()
		}
	}()
	if a.tables == nil {
		a.tables = map[string]*sourceTable{}
	}
	var applied store.LSN
	var txns, changes int64
	err = a.db.View(func(r *store.Reader) error {
		var err error
		if applied, err = r.Applied(); err != nil {
			return err
		}
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		return r.Txns(applied, func(h *store.TxnHeader, cur *store.TxnCursor) error {
			if h.EndLSN > upTo {
				return store.ErrStopScan
			}
			txns++
			var seq int64
			return cur.SharedChunks(func(chs []store.Change) error {
				for i := range chs {
					seq++
					changes++
					if err := a.applyChange(ctx, rels, h, seq, &chs[i]); err != nil {
						return err
					}
				}
				return ctx.Err()
			})
		})
	})
	if err != nil {
		return fmt.Errorf("apply up to %s: %w", upTo, err)
	}
	names := make([]string, 0, len(a.tables))
	for n := range a.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st := a.tables[n]
		if st.clFlush.ci.changes > 0 {
			if err := st.changelog.finish(ctx, a, st.clFlush.ci); err != nil {
				return fmt.Errorf("apply up to %s: %w", upTo, err)
			}
		}
		if st.mrFlush.ci.changes > 0 {
			if err := st.mirror.finish(ctx, a, st.mrFlush.ci); err != nil {
				return fmt.Errorf("apply up to %s: %w", upTo, err)
			}
		}
		st.clFlush, st.mrFlush = flushStats{}, flushStats{}
	}
	if err := a.fail("before-applied", ""); err != nil {
		return err
	}
	trimTo := upTo
	if a.cfg.TrimLimit != nil {
		trimTo = min(trimTo, a.cfg.TrimLimit())
	}
	var trimmed int
	err = a.db.Update(func(w *store.Writer) error {
		if err := w.SetApplied(upTo); err != nil {
			return err
		}
		var err error
		trimmed, err = w.Trim(trimTo)
		return err
	})
	if err != nil {
		return fmt.Errorf("record applied position %s: %w", upTo, err)
	}
	if a.cfg.OnCommit != nil {
		a.cfg.OnCommit()
	}
	a.mu.Lock()
	a.applied = max(a.applied, upTo)
	a.mu.Unlock()
	a.log.Debug("applied", "up_to", upTo, "transactions", txns, "changes", changes, "trimmed", trimmed, "took", time.Since(start))
	return nil
}

// reset drops the in-memory state after a failure; the next flush loads
// the tables again from disk.
func (a *Applier) reset() {
	for _, st := range a.tables {
		st.changelog.abort()
		st.mirror.abort()
	}
	a.tables = nil
	a.lastRel, a.lastTable = nil, nil
}

// applyChange routes one change to its table's changelog and mirror, unless
// the table already holds the transaction.
func (a *Applier) applyChange(ctx context.Context, rels map[store.RelationKey]*store.Relation, h *store.TxnHeader, seq int64, ch *store.Change) error {
	rel := rels[ch.Relation]
	if rel == nil {
		return fmt.Errorf("%w: oid %d at %s", errNoRelation, ch.Relation.OID, ch.Relation.LSN)
	}
	for _, vals := range [][]store.Value{ch.New, ch.Old} {
		if vals != nil && len(vals) != len(rel.Columns) {
			return fmt.Errorf("%w: change at %s has %d values, schema version %s/%s of %s has %d columns",
				errSchemaMismatch, h.EndLSN, len(vals), ch.Relation.LSN, rel.Key.LSN, rel.QualifiedName(), len(rel.Columns))
		}
	}
	st, err := a.table(ctx, rel)
	if err != nil {
		return err
	}
	toCL, toMR := h.EndLSN > st.changelog.applied, h.EndLSN > st.mirror.applied
	if !toCL && !toMR {
		return nil
	}
	// The values are converted once, for both tables.
	rc := st.cols.convertChange(st.cols.mapping(rel), ch)
	if toCL {
		st.clFlush.note(h)
		if err := st.changelog.add(a, h, seq, rc); err != nil {
			return err
		}
	}
	if toMR {
		st.mrFlush.note(h)
		if err := st.mirror.add(ctx, a, rc); err != nil {
			return err
		}
	}
	return nil
}

// table returns the loaded state of a source table, opening (or creating)
// its Delta tables. Existing tables are opened first so that their columns
// come before the columns of the current schema version.
func (a *Applier) table(ctx context.Context, rel *store.Relation) (*sourceTable, error) {
	if rel == a.lastRel && a.lastTable != nil {
		return a.lastTable, nil
	}
	name := rel.QualifiedName()
	if st := a.tables[name]; st != nil {
		a.lastRel, a.lastTable = rel, st
		return st, nil
	}
	st := &sourceTable{name: name, cols: newColumns(a.tm, a.log, a)}
	exists := func(dir string) bool {
		_, err := os.Stat(filepath.Join(a.cfg.TablesDir, dir, "_delta_log"))
		return err == nil
	}
	// Existing tables first, so that their columns come first and a type
	// change is detected against them; a new table starts from rel.
	open := func(dir string, fn func() error) error {
		if !exists(dir) {
			st.cols.mapping(rel)
		}
		return fn()
	}
	openCL := func() error {
		return open(name+"_changes", func() (err error) {
			st.changelog, err = a.openChangelog(ctx, name, st.cols)
			return err
		})
	}
	openMR := func() error {
		return open(name, func() (err error) {
			st.mirror, err = a.openMirror(ctx, name, st.cols, rel)
			return err
		})
	}
	order := []func() error{openMR, openCL}
	if exists(name+"_changes") && !exists(name) {
		order = []func() error{openCL, openMR}
	}
	for _, fn := range order {
		if err := fn(); err != nil {
			return nil, err
		}
	}
	a.tables[name] = st
	a.lastRel, a.lastTable = rel, st
	return st, nil
}
