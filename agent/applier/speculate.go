package applier

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Applying ahead. PostgreSQL streams a large transaction before it commits,
// and capture spools it (store.Writer.SpoolAppend); it reaches the queue
// only at its commit, whole. While the applier has nothing else to read,
// it reads the spool as it grows and applies the transaction ahead, so
// that at the commit little of it is left to do:
//
//   - its changelog rows go into data files whose _lsn, _xid, _commit_ts
//     and _commit_date, the values of the commit, are deferred
//     (delta.WriteOptions.Deferred). A full file is sealed: encoded, and
//     held in memory until the commit gives those values;
//   - its inserts, in ascending key order above every key of the mirror's
//     files, go into new mirror data files, written and closed like an
//     appender's (see mirror.go), as one run.
//
// Nothing is committed ahead. Applying ahead stops for good at the first
// change it cannot take (an update, delete or truncate, a key out of
// order, a new schema version, a change of a subtransaction, which may yet
// roll back on its own), or once the changelog files hold AheadMemoryBytes;
// the rest of the transaction is applied at its commit, as any other.
//
// The commit joins what was applied ahead into the flush that reads the
// transaction (joinAhead): the changelog files close with the commit's
// values, and the mirror's run joins the flush's appender, when the flush's
// earlier changes leave every key of the run above theirs. Then the flush
// reads the transaction's chunks after those applied ahead. When anything
// does not hold (the changes before it in the flush, a restart of the
// spools or of the queue, a table loaded again), what was applied ahead is
// dropped and the transaction read whole. A transaction that rolls back is
// dropped too, and files written ahead are deleted, or, after a crash,
// left as orphans that no commit refers to, which vacuum deletes.
type speculation struct {
	id                store.SpoolID
	generation, epoch uint64
	// chunks is the number of the spool's last chunk applied ahead whole,
	// skip the changes of the chunk after it applied ahead, and changes
	// the changes applied ahead in all: the transaction's first.
	chunks  uint64
	skip    int
	changes int64
	// stopped is set once a change could not be applied ahead, or the
	// memory limit was reached: nothing more is read.
	stopped bool
	// queued is set once the spool was found committed into the queue.
	queued  bool
	tables  []*aheadTable
	byTable map[*sourceTable]*aheadTable
}

// aheadTable is what one source table received ahead.
type aheadTable struct {
	st *sourceTable
	// clSchema and mrSchema are the schemas the files were written with.
	clSchema, mrSchema *delta.StructType
	// files are the changelog's files, sealed; open is the one filling
	// and rows its rows not yet given to it.
	files []*delta.DataWriter
	open  *delta.DataWriter
	rows  []delta.Row
	// run writes the mirror's files.
	run     *appendRun
	changes int64
}

// aheadDeferred are the changelog columns whose values come with the commit.
var aheadDeferred = []string{colLSN, colXid, colCommitTS, colCommitDate}

// speculate applies ahead what the open spool received since the last
// call, or starts on the first open spool. It runs when the applier has
// nothing else to read, in its goroutine.
func (a *Applier) speculate(ctx context.Context) {
	gone := false
	err := a.db.View(func(r *store.Reader) error {
		gen, err := r.Generation()
		if err != nil {
			return err
		}
		epoch, err := r.SpoolEpoch()
		if err != nil {
			return err
		}
		sp := a.spec
		if sp != nil && (sp.generation != gen || sp.epoch != epoch) {
			a.dropAhead()
			sp = nil
		}
		ids, err := r.SpoolIDs()
		if err != nil {
			return err
		}
		if sp == nil {
			if len(ids) == 0 {
				return nil
			}
			sp = &speculation{id: ids[0], generation: gen, epoch: epoch, byTable: map[*sourceTable]*aheadTable{}}
			a.spec = sp
		}
		switch {
		case sp.queued:
			return nil
		case !slices.Contains(ids, sp.id):
			// Committed into the queue, or rolled back.
			err := r.Txns(0, func(_ *store.TxnHeader, cur *store.TxnCursor) error {
				if id, ok := cur.Spool(); ok && id == sp.id {
					sp.queued = true
					return store.ErrStopScan
				}
				return nil
			})
			gone = !sp.queued
			return err
		case sp.stopped:
			return nil
		}
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		_, err = r.SpoolChunks(sp.id, sp.chunks, func(ordinal uint64, subXid uint32, changes []store.Change) error {
			if subXid != uint32(sp.id) {
				sp.stopped = true
				return store.ErrStopScan
			}
			for i := range changes {
				if sp.changes%yieldEvery == 0 {
					runtime.Gosched()
				}
				ok, err := a.speculateChange(ctx, sp, rels, &changes[i], sp.changes+1)
				if err != nil {
					return err
				}
				if !ok {
					sp.stopped, sp.skip = true, i
					return store.ErrStopScan
				}
				sp.changes++
			}
			sp.chunks = ordinal
			if sp.held() > int64(a.cfg.AheadMemoryBytes) {
				sp.stopped = true
				return store.ErrStopScan
			}
			return ctx.Err()
		})
		return err
	})
	if err != nil && ctx.Err() == nil {
		a.log.Debug("applying ahead stopped", "err", err)
	}
	if err != nil || gone {
		a.dropAhead()
	}
}

// speculateChange applies one change ahead, the seq-th of its transaction,
// and reports whether it could.
func (a *Applier) speculateChange(ctx context.Context, sp *speculation, rels map[store.RelationKey]*store.Relation, ch *store.Change, seq int64) (bool, error) {
	if ch.Op != store.OpInsert {
		return false, nil
	}
	rel := rels[ch.Relation]
	if rel == nil || len(ch.New) != len(rel.Columns) {
		return false, nil
	}
	if a.tables == nil {
		a.tables = map[string]*sourceTable{}
	}
	st, err := a.table(ctx, rel)
	if err != nil {
		return false, err
	}
	if !st.cols.known(rel) {
		return false, nil
	}
	c, m := st.changelog, st.mirror
	if len(c.dataPos) != len(st.cols.cols) || len(m.dataPos) != len(st.cols.cols) {
		return false, nil
	}
	at := sp.byTable[st]
	if at == nil {
		at = &aheadTable{st: st, clSchema: c.schema, mrSchema: m.schema}
	} else if at.clSchema != c.schema || at.mrSchema != m.schema {
		return false, nil
	}
	rc := st.cols.convertChange(st.cols.mapping(rel), ch)
	key := m.appendKey(nil, rc.newRow)
	if at.run == nil {
		if last := m.lastFile(); last != nil && (len(last.maxKey) == 0 || last.rows < 0 || bytes.Compare(key, last.maxKey) <= 0) {
			return false, nil
		}
		at.run = &appendRun{w: &mergeWriter{m: m, a: a, yield: true}, first: key}
		sp.byTable[st] = at
		sp.tables = append(sp.tables, at)
	} else if bytes.Compare(key, at.run.last) <= 0 {
		return false, nil
	}
	at.run.last = key
	var row delta.Row
	at.rows, row = nextRow(at.rows, len(c.schema.Fields))
	c.fill(row, seq, rc)
	if len(at.rows) >= 1024 {
		if err := at.writeRows(a); err != nil {
			return false, err
		}
	}
	at.changes++
	return true, at.run.w.emit(string(key), rc.newRow, false)
}

// writeRows gives the changelog rows held to the file filling, and seals
// it once full.
func (at *aheadTable) writeRows(a *Applier) error {
	c := at.st.changelog
	if at.open == nil {
		opts := a.writeOptions()
		opts.Deferred, opts.Yield = aheadDeferred, true
		w, err := delta.NewDataWriter(c.t.Path(), c.schema, []string{colCommitDate}, nil, opts)
		if err != nil {
			return fmt.Errorf("changelog %s: %w", c.name, err)
		}
		at.open = w
	}
	if err := at.open.Write(at.rows); err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	at.rows = at.rows[:0]
	if at.open.NumRows() >= a.cfg.TargetFileRows {
		if err := at.open.Seal(); err != nil {
			return fmt.Errorf("changelog %s: %w", c.name, err)
		}
		at.files = append(at.files, at.open)
		at.open = nil
	}
	return nil
}

// held returns the bytes the changelog files written ahead hold in memory.
func (sp *speculation) held() int64 {
	var n int64
	for _, at := range sp.tables {
		for _, w := range at.files {
			n += w.HeldBytes()
		}
	}
	return n
}

// joinAhead joins what was applied ahead of transaction h, from the spool
// sp, into the flush reading it, and reports whether it did (false: sp is
// dropped, and h is to be read whole). The changes applied ahead count as
// read. gen and epoch are the queue's generation and the spool epoch.
func (a *Applier) joinAhead(sp *speculation, h *store.TxnHeader, gen, epoch uint64) (bool, error) {
	if a.adder != nil {
		// The changes before h are added first.
		if err := a.adder.sync(); err != nil {
			a.dropSpeculation(sp)
			return false, err
		}
	}
	ok := sp.generation == gen && sp.epoch == epoch && sp.changes > 0
	for _, at := range sp.tables {
		if ok {
			ok = at.joins(a, h)
		}
	}
	if !ok {
		a.dropSpeculation(sp)
		return false, nil
	}
	for _, at := range sp.tables {
		st, c, m := at.st, at.st.changelog, at.st.mirror
		if len(at.rows) > 0 {
			if err := at.writeRows(a); err != nil {
				a.dropSpeculation(sp)
				return false, err
			}
		}
		if at.open != nil {
			at.files = append(at.files, at.open)
			at.open = nil
		}
		for _, w := range at.files {
			c.closeAhead(w, h)
		}
		at.files = nil
		if m.app == nil {
			m.app = &appender{}
		}
		m.app.runs = append(m.app.runs, at.run)
		m.appended += at.changes
		st.clFlush.noteN(h, at.changes)
		st.mrFlush.noteN(h, at.changes)
	}
	a.read.changes += sp.changes
	a.joinedAhead += sp.changes
	return true, nil
}

// joins reports whether the table's changes applied ahead of h can join
// the flush: the table is the one they were applied to, does not hold h
// yet, has the same columns, and the mirror run's keys are above every
// key of the flush so far, and can be one more run of its appender.
func (at *aheadTable) joins(a *Applier, h *store.TxnHeader) bool {
	st := at.st
	c, m := st.changelog, st.mirror
	if a.tables[st.name] != st || h.EndLSN <= c.applied || h.EndLSN <= m.applied ||
		c.schema != at.clSchema || m.schema != at.mrSchema ||
		len(c.dataPos) != len(st.cols.cols) || len(m.dataPos) != len(st.cols.cols) {
		return false
	}
	m.begin(a)
	if !m.aboveAll(at.run.first) {
		return false
	}
	r := m.app
	if r == nil {
		return true
	}
	return !r.settled && r.runs != nil && len(r.runs) < maxAppendRuns &&
		bytes.Compare(at.run.first, r.runs[len(r.runs)-1].last) > 0
}

// dropAhead drops what was applied ahead, if anything.
func (a *Applier) dropAhead() {
	if a.spec != nil {
		a.dropSpeculation(a.spec)
	}
}

// dropSpeculation deletes the files sp wrote and forgets it.
func (a *Applier) dropSpeculation(sp *speculation) {
	if a.spec == sp {
		a.spec = nil
	}
	for _, at := range sp.tables {
		if at.open != nil {
			at.open.Abort()
		}
		for _, w := range at.files {
			w.Abort()
		}
		at.files, at.open = nil, nil
		w := at.run.w
		if w.w != nil {
			w.w.Abort()
			w.w = nil
		}
		w.finish()
		for _, f := range w.files {
			at.st.mirror.removeUncommitted(f)
		}
	}
	sp.tables = nil
}
