package applier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakeside/lakeside/store"
)

// flush applies the queued transactions after where the batch starts (see
// nextBatch) up to and including the one ending at upTo: the changes not
// read ahead yet (readAhead) are streamed chunk by chunk into the
// changelogs' Parquet writers and the mirrors' pending sets, the touched
// tables' data files are written (writeData), then each touched table
// commits once (changelog first, then mirror), and finally the applied
// position is recorded and the queue trimmed. A source table that fails
// falls behind and the others commit: flush then returns tableErrors (see
// failure.go). When more is queued by then, another flush follows at
// once: the queue is then trimmed only up to where it was applied before,
// and the rest by the next flush (or by the idle applier, trimBehind), so
// that trimming does not hold up its tables. (Trimming 100k small
// transactions took 28 ms, by which the flush after them started later.)
func (a *Applier) flush(ctx context.Context, upTo store.LSN) (err error) {
	start := time.Now()
	defer func() {
		for w, n := range a.warnings {
			a.log.Warn("values not representable", "problem", w, "count", n)
		}
		a.warnings = nil
		a.readAheadFailed = false
		defer a.releaseBatch()
		var failed tableErrors
		if err != nil && !errors.As(err, &failed) {
			a.reset()
			a.buffers.Release()
		}
	}()
	if _, err := a.ingest(ctx, upTo, 0); err != nil {
		return err
	}
	txns, changes := a.read.txns, a.read.changes
	a.read = queueRead{}
	touched := a.touched()
	a.writeData(ctx, touched)
	for _, st := range touched {
		if st.failed() == nil && st.clFlush.ci.changes > 0 {
			if err := st.changelog.commit(ctx, a, st.clFlush.ci); err != nil {
				st.fail(err)
			}
		}
		if st.failed() == nil && st.mrFlush.ci.changes > 0 {
			if err := st.mirror.commit(ctx, a, st.mrFlush.ci); err != nil {
				st.fail(err)
			}
		}
		st.clFlush, st.mrFlush = flushStats{}, flushStats{}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	failed := a.dropFailed()
	if err := a.fail("before-applied", ""); err != nil {
		return err
	}
	applied := a.settle(upTo, failed)
	var trimTo, last store.LSN
	var trimmed int
	err = a.db.Update(func(w *store.Writer) error {
		if err := w.SetApplied(applied); err != nil {
			return err
		}
		qs, err := w.QueueStats()
		if err != nil {
			return err
		}
		trimTo, last = applied, qs.LastLSN
		if qs.LastLSN > upTo {
			trimTo = min(applied, a.Applied())
		}
		trimTo = a.trimmable(trimTo)
		trimmed, err = w.Trim(trimTo)
		return err
	})
	if err != nil {
		return fmt.Errorf("record applied position %s: %w", applied, err)
	}
	a.trimmed = max(a.trimmed, trimTo)
	if last <= upTo || a.cfg.Capture == nil || a.cfg.Capture.BacklogEnd() <= upTo {
		// Nothing of the backlog is left (before Config.Committed, which may
		// ask).
		a.backlog.Store(false)
	}
	if a.cfg.Committed != nil {
		a.cfg.Committed.Notify()
	}
	a.mu.Lock()
	a.applied = max(a.applied, applied)
	a.mu.Unlock()
	a.log.Debug("applied", "up_to", upTo, "transactions", txns, "changes", changes, "trimmed", trimmed, "took", time.Since(start))
	if failed != nil {
		return fmt.Errorf("apply up to %s: %w", upTo, failed)
	}
	return nil
}

// dropFailed forgets the tables of the flush that failed, and those it
// held, so that a retry loads them again from disk, and returns the
// failures.
func (a *Applier) dropFailed() tableErrors {
	var failed tableErrors
	for name, st := range a.tables {
		err := st.failed()
		if err == nil && !st.held {
			continue
		}
		st.abort()
		delete(a.tables, name)
		if err != nil {
			if failed == nil {
				failed = tableErrors{}
			}
			failed[name] = err
		}
	}
	a.lastRel, a.lastTable = nil, nil
	return failed
}

// trimBehind trims what flushes applied but could not trim then, because
// another reader of the queue (Config.Reader, the live view) had not
// read it yet, or a full batch left it to the next flush. The idle applier
// calls it, so that an idle agent's queue ends empty once that reader has
// caught up; it writes to the state file only when there is something to
// trim.
func (a *Applier) trimBehind() {
	to := a.trimmable(a.Applied())
	if to <= a.trimmed {
		return
	}
	err := a.db.Update(func(w *store.Writer) error {
		_, err := w.Trim(to)
		return err
	})
	if err != nil {
		a.log.Warn("trim queue", "up_to", to, "err", err)
		return
	}
	a.trimmed = to
}

// trimmable returns how far the queue may be trimmed of what is applied up
// to upTo: no further than its other reader has read (Config.Reader).
func (a *Applier) trimmable(upTo store.LSN) store.LSN {
	if a.cfg.Reader != nil {
		return min(upTo, a.cfg.Reader.Offset())
	}
	return upTo
}

// touched returns the source tables the pending flush changes, by name,
// but for those that failed.
func (a *Applier) touched() []*sourceTable {
	var out []*sourceTable
	for _, st := range a.tables {
		if st.failed() == nil && (st.clFlush.ci.changes > 0 || st.mrFlush.ci.changes > 0) {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(x, y *sourceTable) int { return strings.Compare(x.name, y.name) })
	return out
}

// writeData writes the data files of the flush: each touched changelog
// closes its writers and each touched mirror merges its changes. Each
// writes files of its own table only, so they run side by side, as many
// at once as Go has scheduler threads (GOMAXPROCS); the commits follow, in
// order, once all are written. A failure is the failure of its source
// table (sourceTable.fail), and stops none of the others.
func (a *Applier) writeData(ctx context.Context, touched []*sourceTable) {
	for _, st := range touched {
		if st.clFlush.ci.changes > 0 {
			if err := st.changelog.ensureColumns(); err != nil {
				st.fail(err)
				continue
			}
		}
		if st.mrFlush.ci.changes > 0 {
			if err := st.mirror.prepare(a); err != nil {
				st.fail(err)
			}
		}
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, st := range touched {
		if st.failed() != nil {
			continue
		}
		if st.clFlush.ci.changes > 0 {
			g.Go(func() error {
				if err := st.changelog.write(); err != nil {
					st.fail(err)
				}
				return nil
			})
		}
		if st.mrFlush.ci.changes > 0 {
			g.Go(func() error {
				if err := st.mirror.write(ctx, a); err != nil {
					st.fail(err)
				}
				return nil
			})
		}
	}
	g.Wait()
}

// queueRead is how far the pending flush has read the queue: through the
// transaction ending at upTo (zero: nothing yet), in the queue's
// generation, for the batch of scan (batchScan.id), txns and changes in
// all.
type queueRead struct {
	// target is the end of the batch being read: schema versions up to
	// it are the ones its tables follow (targetVersion).
	upTo, target  store.LSN
	generation    uint64
	scan          uint64
	txns, changes int64
}

// yieldEvery is how many changes reading ahead handles between two turns
// it gives to the other goroutines: capture shares the scheduler thread
// and reads the stream in between, long before the walsender's socket
// fills (a few dozen changes take some tens of microseconds).
const yieldEvery = 32

// readAheadSlice is about how many changes one call of readAhead reads: it
// stops at the end of the transaction that reaches it. Between two calls
// the applier looks at the queue again, so that a flush that falls due
// meanwhile (the backlog is durable) starts at once rather than after the
// whole batch is read ahead at the pace of a shared thread. (In the
// end-to-end bench, the flush after a backlog of 100k transactions started
// up to 33 ms after the backlog was durable.)
const readAheadSlice = 1024

// ingest reads the queued transactions after those the pending flush has
// read, up to and including the one ending at upTo, into the changelogs'
// Parquet writers and the mirrors' pending sets. With slice above zero
// (reading ahead), it gives its turn away every yieldEvery changes and
// stops at the end of the transaction that brings what it read to slice
// changes; without (a flush), an adder adds what it reads in a goroutine
// of its own (adder.go). It reports whether it read up to upTo. A queue
// cleared since the last read (an initial snapshot that starts over) is
// read again from its start. After a failure the caller drops what was
// read (reset).
func (a *Applier) ingest(ctx context.Context, upTo store.LSN, slice int64) (done bool, err error) {
	yield := slice > 0
	done = true
	a.holdBatch(upTo)
	err = a.db.View(func(r *store.Reader) (err error) {
		gen, err := r.Generation()
		if err != nil {
			return err
		}
		if a.read.upTo != 0 && (gen != a.read.generation || a.read.scan != a.scan.id) {
			a.reset()
		}
		a.read.generation, a.read.scan = gen, a.scan.id
		a.read.target = max(a.read.target, upTo)
		if a.warnings == nil {
			a.warnings = map[string]int{}
		}
		if a.tables == nil {
			a.tables = map[string]*sourceTable{}
		}
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		// Each chunk's memory goes back to the pool once its changes
		// are added, and the next chunks are decoded into it.
		pool := new(store.ChunkPool)
		if !yield && !a.cfg.Off.Adder {
			// The values read are valid only in this read transaction:
			// the adder is done with them before it ends.
			a.adder = newAdder(ctx, a, pool)
			defer func() {
				a.adder.close()
				a.adder = nil
			}()
		}
		var read int64
		quarantine := a.crash != nil && a.crash.anyQuarantined()
		return r.Txns(max(a.scan.base, a.read.upTo), func(h *store.TxnHeader, cur *store.TxnCursor) error {
			if h.EndLSN > upTo {
				return store.ErrStopScan
			}
			if yield && read >= slice {
				done = false
				return store.ErrStopScan
			}
			a.read.txns++
			if quarantine {
				if q := a.crash.quarantined(h.EndLSN); q != nil {
					a.read.upTo = max(a.read.upTo, h.EndLSN)
					return a.quarantine(ctx, rels, h, cur, q)
				}
			}
			var seq int64
			err := cur.RecycledChunks(pool, func(chs []store.Change, mem *store.ChunkMemory) error {
				for i := range chs {
					seq++
					a.read.changes++
					if yield && a.read.changes%yieldEvery == 0 {
						runtime.Gosched()
					}
					if err := a.applyChange(ctx, rels, h, seq, &chs[i]); err != nil {
						return err
					}
				}
				if a.adder != nil {
					a.adder.release(mem)
				} else {
					pool.Put(mem)
				}
				if st := a.lastTable; h.Copied && len(chs) > 0 && st != nil && st.held {
					// Rows a backfill copied are of one table: the rest
					// of a table held is passed over, not decoded.
					if st.waits != nil {
						st.waits.waitingChanges += h.Changes - seq
					}
					return errPassOver
				}
				return ctx.Err()
			})
			if errors.Is(err, errPassOver) {
				err = nil
			}
			read += seq
			a.read.upTo = max(a.read.upTo, h.EndLSN)
			return err
		})
	})
	if err != nil {
		return false, fmt.Errorf("apply up to %s: %w", upTo, err)
	}
	if done {
		a.read.upTo = max(a.read.upTo, upTo)
	}
	return done, nil
}

// reset drops the in-memory state after a failure, with what was read of
// the queue and the warnings counted while reading it; the next flush loads
// the tables again from disk.
func (a *Applier) reset() {
	a.read, a.warnings = queueRead{}, nil
	for _, st := range a.tables {
		st.abort()
	}
	a.tables = nil
	a.lastRel, a.lastTable = nil, nil
}

// applyChange routes one change to its table's changelog and mirror, unless
// the table already holds the transaction, failed in this flush, or is
// held (behind and not retried). A change that its table cannot take fails
// the table (sourceTable.fail), not the flush.
func (a *Applier) applyChange(ctx context.Context, rels map[store.RelationKey]*store.Relation, h *store.TxnHeader, seq int64, ch *store.Change) error {
	rel := a.lastRel
	if rel == nil || rel.Key != ch.Relation {
		// (A schema version never changes: the one of the last change
		// routed, read before, is the same.)
		rel = rels[ch.Relation]
	}
	if rel == nil {
		return fmt.Errorf("%w: oid %d at %s", errNoRelation, ch.Relation.OID, ch.Relation.LSN)
	}
	st := a.table(ctx, rels, rel)
	if st.waits != nil {
		st.waits.waitingChanges++
	}
	if st.held || st.failed() != nil {
		return nil
	}
	if first := st.clFlush.ci.changes == 0 && st.mrFlush.ci.changes == 0; first || !st.cols.known(rel) {
		if target := a.targetVersion(rels, rel); target.Key != st.cols.follows {
			if !first {
				// Not before the flush's first change of the table:
				// it fails, and its retry starts a flush there.
				st.fail(fmt.Errorf("%w: schema version %s of %s", errVersionBoundary, target.Key.LSN, rel.TableName()))
				return nil
			}
			if err := a.evolve(ctx, st, target); err != nil {
				st.fail(err)
				return nil
			}
		}
	}
	for _, vals := range [][]store.Value{ch.New, ch.Old} {
		if vals != nil && len(vals) != len(rel.Columns) {
			st.fail(fmt.Errorf("%w: change at %s has %d values, schema version %s/%s of %s has %d columns",
				errSchemaMismatch, h.EndLSN, len(vals), ch.Relation.LSN, rel.Key.LSN, rel.TableName(), len(rel.Columns)))
			return nil
		}
	}
	toCL, toMR := h.EndLSN > st.changelog.applied, h.EndLSN > st.mirror.applied
	if !toCL && !toMR {
		return nil
	}
	if a.adder != nil && !st.cols.known(rel) {
		// A new schema version may add columns, which the adder's
		// goroutine reads: it first adds what it has.
		a.adder.sync()
	}
	if toCL {
		st.clFlush.note(h)
	}
	if toMR {
		st.mrFlush.note(h)
	}
	x := addition{st: st, h: h, seq: seq, toCL: toCL, toMR: toMR}
	m := st.cols.mapping(rel)
	if (ch.Op == store.OpInsert || ch.Op == store.OpSnapshot) && ch.Old == nil && !slices.ContainsFunc(ch.New, isUnchanged) && len(m.fill) == 0 {
		// An insert (or a copied row) goes as queued: its values are
		// written into the tables' columns as they are (putter), not
		// converted to Go values and built into rows first, which took
		// about a fifth of the time of applying a 1M-row insert.
		x.m, x.ins, x.op = m, ch.New, ch.Op
	} else {
		// The values are converted once, for both tables.
		x.rc = st.cols.convertChange(m, ch)
		x.size = store.ValuesBytes(ch.New) + store.ValuesBytes(ch.Old)
	}
	if a.adder != nil {
		a.adder.add(x)
	} else if err := a.addChange(ctx, &x); err != nil {
		st.fail(err)
	}
	return nil
}

// targetVersion returns the schema version the Delta tables of rel's table
// follow in the flush: the newest of the table's (by the name it is
// captured as, so a re-created table's too) at or before the flush's end (nextBatch ends a batch before a new version, so that this
// is the version of every change of the flush but those of a transaction
// that changed the schema in its middle).
func (a *Applier) targetVersion(rels map[store.RelationKey]*store.Relation, rel *store.Relation) *store.Relation {
	newest, name := rel, rel.TableName()
	for k, r := range rels {
		if k.LSN > newest.Key.LSN && k.LSN <= a.read.target && r.TableName() == name {
			newest = r
		}
	}
	return newest
}

// isUnchanged reports whether v is an unchanged TOAST value.
func isUnchanged(v store.Value) bool { return v.Kind == store.KindUnchanged }

// table returns the loaded state of a source table, opening (or creating)
// its Delta tables. Existing tables are opened first so that their columns
// come before the columns of the current schema version. A table that
// cannot be opened is returned failed, and a table held in this flush
// without its Delta tables. A table is the configured table its OID was
// captured as (store.Relation.TableName), whose Delta tables are in
// directories named safely after it (store.Relation.DirName).
func (a *Applier) table(ctx context.Context, rels map[store.RelationKey]*store.Relation, rel *store.Relation) *sourceTable {
	if rel == a.lastRel && a.lastTable != nil {
		return a.lastTable
	}
	name := rel.TableName()
	st := a.tables[name]
	if st == nil && a.held(name) {
		st = &sourceTable{name: name, held: true}
		if b := a.behind[name]; b.waiting {
			st.waits = b
		}
		a.tables[name] = st
	}
	if st != nil {
		a.lastRel, a.lastTable = rel, st
		return st
	}
	st = &sourceTable{name: name, cols: newColumns(a.tm, a.log, a)}
	exists := func(dir string) bool {
		_, err := os.Stat(filepath.Join(a.cfg.TablesDir, dir, "_delta_log"))
		return err == nil
	}
	// Existing tables first, so that their columns are known before the
	// columns follow the flush's schema version; a new table is created
	// with that version's columns.
	target := a.targetVersion(rels, rel)
	open := func(dir string, fn func() error) error {
		if !exists(dir) {
			st.cols.evolve(target)
		}
		return fn()
	}
	dir := rel.DirName()
	openCL := func() error {
		return open(dir+store.ChangelogSuffix, func() (err error) {
			if st.changelog, err = a.openChangelog(ctx, dir, st.cols); err == nil {
				st.changelog.source = name
			}
			return err
		})
	}
	openMR := func() error {
		return open(dir, func() (err error) {
			st.mirror, err = a.openMirror(ctx, dir, st.cols, target)
			return err
		})
	}
	order := []func() error{openMR, openCL}
	if exists(dir+store.ChangelogSuffix) && !exists(dir) {
		order = []func() error{openCL, openMR}
	}
	for _, fn := range order {
		if err := fn(); err != nil {
			st.fail(err)
			break
		}
	}
	if st.failed() == nil {
		if err := a.evolve(ctx, st, target); err != nil {
			st.fail(err)
		}
	}
	a.tables[name] = st
	a.lastRel, a.lastTable = rel, st
	return st
}
