package live

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// defaultAppIDPrefix is the applier's default appId prefix.
const defaultAppIDPrefix = "lakeside"

// resetIfNewEpoch starts the hub's state over when the queue belongs to
// another epoch than the state (and when the hub starts). The applier trims
// from the queue what the Delta mirrors hold, so the queue alone holds only
// what changed since the last flushes: the rows before that are loaded from
// the mirrors, and the queue's changes a mirror already holds are skipped.
func (h *Hub) resetIfNewEpoch(ctx context.Context) error {
	var (
		epoch, prefix string
		same          bool
		applied       store.LSN
		rels          map[store.RelationKey]*store.Relation
	)
	err := h.db.View(func(r *store.Reader) error {
		slot, err := r.SlotState()
		if err != nil {
			return err
		}
		epoch = epochOf(slot)
		h.mu.Lock()
		same, prefix = epoch == h.epoch, h.appIDPrefix
		h.mu.Unlock()
		if same {
			return nil
		}
		if applied, err = r.Applied(); err != nil {
			return err
		}
		rels, err = r.Relations()
		return err
	})
	if err != nil || same {
		return err
	}
	tables, held := h.seed(ctx, rels, prefix)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resetLocked(epoch)
	h.tables = tables
	// Every transaction after this position is in the queue: a client
	// that resumes from an earlier offset refetches.
	h.retainedSince = max(applied, held)
	// Every mirror holds the transactions up to the applied position, and
	// the rows were loaded from the mirrors: the hub is there, even when
	// the queue holds nothing after it.
	h.setOffsetLocked(applied)
	return nil
}

// seed reads the rows of each captured table from its mirror. It returns
// the tables and the newest position a mirror holds. A table with more rows
// than the hub keeps is marked overflowed: it is served from its mirror.
func (h *Hub) seed(ctx context.Context, rels map[store.RelationKey]*store.Relation, appIDPrefix string) (map[string]*tableState, store.LSN) {
	tables := map[string]*tableState{}
	if h.tablesDir == "" {
		return tables, 0
	}
	// The newest schema version of each table.
	newest := map[string]*store.Relation{}
	for _, rel := range rels {
		name := rel.TableName()
		if cur, ok := newest[name]; !ok || rel.Key.LSN > cur.Key.LSN {
			newest[name] = rel
		}
	}
	var held store.LSN
	for name, rel := range newest {
		tbl, err := delta.Open(ctx, filepath.Join(h.tablesDir, rel.DirName()))
		var snap *delta.Snapshot
		if err == nil {
			snap, err = tbl.Snapshot(ctx)
		}
		if errors.Is(err, delta.ErrNotATable) {
			// Not committed yet (the applier may be creating it): the
			// queue holds all of it.
			continue
		}
		t := newTableState(rel, h.maxValue)
		tables[name] = t
		if err != nil {
			// Requests for its rows go to the mirror and report the error.
			h.log.Error("live view: cannot read the table's Delta mirror; its rows are served from the mirror", "table", name, "err", err)
			t.overflow, t.rows = true, nil
			continue
		}
		if v, ok := snap.AppTransactionVersion(appIDPrefix + "/" + rel.DirName() + "/mirror"); ok {
			t.seededTo = store.LSN(v)
			held = max(held, t.seededTo)
		}
		if rows, ok := mirrorRowCount(snap); !ok || rows > int64(h.maxRows) {
			h.log.Warn("live view: table has too many rows to keep in memory; serving it from its Delta mirror", "table", name, "max_rows", h.maxRows)
			t.overflow, t.rows = true, nil
			continue
		}
		ms, err := h.newMirrorScan(filepath.Join(h.tablesDir, rel.DirName()), snap, rel)
		if err == nil {
			err = ms.each(ctx, func(row Row, key []store.Value) bool {
				t.setRow(row.Key, &rowState{key: key, json: row.Values})
				return !h.tooBig(t)
			})
		}
		if err != nil {
			h.log.Error("live view: cannot read the table's Delta mirror; its rows are served from the mirror", "table", name, "err", err)
			t.overflow, t.rows = true, nil
			continue
		}
		if h.tooBig(t) {
			h.overflowLocked(t)
			continue
		}
		h.log.Info("live view: loaded the table's rows from its Delta mirror", "table", name, "rows", len(t.rows), "version", snap.Version())
	}
	return tables, held
}

// mirrorRowCount adds up the rows of a snapshot's files from their
// statistics, less those their deletion vectors delete; ok is false when
// a file has none.
func mirrorRowCount(snap *delta.Snapshot) (rows int64, ok bool) {
	for _, add := range snap.Files() {
		if add.Stats == "" {
			return 0, false
		}
		st, err := delta.ParseStats(add.Stats)
		if err != nil {
			return 0, false
		}
		rows += st.NumRecords
		if add.DeletionVector != nil {
			rows -= add.DeletionVector.Cardinality
		}
	}
	return rows, true
}
