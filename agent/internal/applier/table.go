package applier

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Kinds of Delta tables.
const (
	KindMirror    = "mirror"
	KindChangelog = "changelog"
)

// deltaTable is what the changelog and the mirror share: the Delta table,
// its version, the txn version read back from it, and its schema.
type deltaTable struct {
	name  string // directory name, e.g. "public.orders_changes"
	kind  string
	appID string
	t     *delta.Table
	// version is the newest version; applied the txn version of appID.
	version int64
	applied store.LSN
	// schema is the table schema, possibly extended in this flush; meta is
	// the committed metaData. schemaDirty says schema differs from meta.
	schema      *delta.StructType
	meta        *delta.Metadata
	schemaDirty bool
	// props are Config.TableProperties the committed configuration does
	// not hold yet; the next commit without a metaData of its own sets
	// them.
	props map[string]string
	// protocol is the committed protocol, and epoch the columns.epoch
	// the schema was laid out for.
	protocol *delta.Protocol
	epoch    uint64
}

// setSchema makes st the table's schema, its fields given the column
// mapping physical names and ids they have in the committed schema
// (keepColumnIDs), new ones new ids. The next commit writes it when it
// differs from the committed one.
func (dt *deltaTable) setSchema(st *delta.StructType) error {
	committed, err := dt.meta.Schema()
	if err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	keepColumnIDs(st, committed)
	if st, _, err = delta.AssignColumnIDs(st, dt.meta.MaxColumnID()); err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	s, err := st.SchemaString()
	if err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	dt.schema, dt.schemaDirty = st, s != dt.meta.SchemaString
	return nil
}

// enableColumnMapping switches a table written before column mapping to
// it, in one commit that keeps the txn version: its columns keep their
// names as physical names, so its files read as they are.
func (a *Applier) enableColumnMapping(ctx context.Context, dt *deltaTable) error {
	p, md, err := delta.EnableColumnMapping(dt.protocol, dt.meta)
	if err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	if err := a.commit(ctx, dt, []delta.Action{p, md}, commitInfo{operation: "SET TBLPROPERTIES", first: dt.applied, last: dt.applied}); err != nil {
		return err
	}
	st, err := md.Schema()
	if err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	dt.protocol, dt.meta, dt.schema = p, md, st
	a.log.Info("table switched to column mapping", "table", dt.name)
	return nil
}

// enableDeletionVectors lets a mirror made without deletion vectors take
// them (see mergedv.go), in one commit that keeps the txn version. Its
// readers then need to read them.
func (a *Applier) enableDeletionVectors(ctx context.Context, dt *deltaTable) error {
	p, md, err := delta.EnableDeletionVectors(dt.protocol, dt.meta)
	if err != nil {
		return fmt.Errorf("%s: %w", dt.name, err)
	}
	if err := a.commit(ctx, dt, []delta.Action{p, md}, commitInfo{operation: "SET TBLPROPERTIES", first: dt.applied, last: dt.applied}); err != nil {
		return err
	}
	dt.protocol, dt.meta = p, md
	a.log.Info("table switched to deletion vectors", "table", dt.name)
	return nil
}

// openTable opens the table at path, or creates it with the schema,
// partition columns and configuration init returns.
func (a *Applier) openTable(ctx context.Context, name, kind string,
	init func() (*delta.StructType, []string, map[string]string)) (*deltaTable, *delta.Snapshot, error) {
	path := filepath.Join(a.cfg.TablesDir, name)
	opts := []delta.Option{delta.WithCheckpointInterval(0), delta.WithLogger(a.log)}
	if a.clock != nil {
		opts = append(opts, delta.WithClock(a.clock))
	}
	t, err := delta.Open(ctx, path, opts...)
	if errors.Is(err, delta.ErrNotATable) {
		st, parts, conf := init()
		if conf == nil {
			conf = map[string]string{}
		}
		// Column mapping from the start (see schema.go).
		conf[delta.ColumnMappingModeKey] = delta.ColumnMappingName
		maps.Copy(conf, a.cfg.TableProperties)
		info := &delta.CommitInfo{Operation: "CREATE TABLE", EngineInfo: a.cfg.EngineInfo}
		if err := os.MkdirAll(path, 0o750); err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", name, err)
		}
		t, err = delta.Create(ctx, path, st, parts, conf, info, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	snap, err := t.Snapshot(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	dt := &deltaTable{name: name, kind: kind, appID: a.cfg.AppIDPrefix + "/" + name + "/" + kind, t: t,
		version: snap.Version(), schema: cloneStruct(snap.Schema()), meta: snap.Metadata(), protocol: snap.Protocol()}
	if v, ok := snap.AppTransactionVersion(dt.appID); ok {
		dt.applied = store.LSN(v)
	}
	a.setStatus(dt)
	if snap.ColumnMappingMode() != delta.ColumnMappingName {
		if err := a.enableColumnMapping(ctx, dt); err != nil {
			return nil, nil, err
		}
	}
	for k, v := range a.cfg.TableProperties {
		if dt.meta.Configuration[k] != v {
			if dt.props == nil {
				dt.props = map[string]string{}
			}
			dt.props[k] = v
		}
	}
	return dt, snap, nil
}

// commitInfo describes one commit of a flush.
type commitInfo struct {
	operation string
	first     store.LSN // commit LSN of the first transaction
	last      store.LSN // end LSN of the last transaction
	txns      int
	changes   int
}

// commit writes actions plus the metaData (when the schema grew or the
// change data feed is switched), the txn action and the commitInfo as the
// next version, then checkpoints the table when one is due.
func (a *Applier) commit(ctx context.Context, dt *deltaTable, actions []delta.Action, ci commitInfo) error {
	var md *delta.Metadata
	props := dt.props
	if slices.ContainsFunc(actions, func(a delta.Action) bool { _, ok := a.(*delta.Metadata); return ok }) {
		props = nil // a commit holds one metaData: the next one sets them
	}
	if dt.schemaDirty || props != nil {
		base := dt.meta
		if props != nil {
			c := *base
			c.Configuration = maps.Clone(base.Configuration)
			if c.Configuration == nil {
				c.Configuration = map[string]string{}
			}
			maps.Copy(c.Configuration, props)
			base = &c
		}
		var err error
		if md, err = base.WithSchema(dt.schema); err != nil {
			return fmt.Errorf("commit %s: %w", dt.name, err)
		}
	}
	proto, md := a.changeDataFeed(dt, actions, md)
	if proto != nil {
		actions = append(actions, proto)
	}
	if md != nil {
		actions = append(actions, md)
	}
	actions = append(actions,
		&delta.Txn{AppID: dt.appID, Version: int64(ci.last)},
		&delta.CommitInfo{
			Operation:  ci.operation,
			EngineInfo: a.cfg.EngineInfo,
			Extra: map[string]any{"lakeside": map[string]any{
				"firstLSN":     ci.first.String(),
				"lastLSN":      ci.last.String(),
				"transactions": ci.txns,
				"changes":      ci.changes,
			}},
		})
	if err := a.fail("before-commit", dt.name); err != nil {
		return err
	}
	v, err := dt.t.Commit(ctx, dt.version, actions)
	if err != nil {
		return fmt.Errorf("commit %s: %w", dt.name, err)
	}
	dt.version, dt.applied = v, ci.last
	if md != nil {
		dt.meta, dt.schemaDirty = md, false
		if props != nil {
			dt.props = nil
		}
	}
	if proto != nil {
		dt.protocol = proto
	}
	a.setStatus(dt)
	a.countCommit(dt, actions)
	if a.checkpointDue(dt.t, v) {
		if err := a.fail("before-checkpoint", dt.name); err != nil {
			return err
		}
		if err := dt.t.Checkpoint(ctx, v); err != nil {
			// The commit is durable; the next checkpoint covers this one.
			a.log.Warn("checkpoint failed", "table", dt.name, "version", v, "err", err)
		}
	}
	return a.fail("after-commit", dt.name)
}

// checkpointDue reports whether version v of t is to be checkpointed.
func (a *Applier) checkpointDue(t *delta.Table, v int64) bool {
	due, err := t.CheckpointDue(v, delta.CheckpointPolicy{Interval: a.cfg.CheckpointInterval, Fixed: a.cfg.FixedCheckpoints})
	if err != nil {
		a.log.Warn("checkpoint skipped", "table", t.Path(), "version", v, "err", err)
	}
	return due
}

func nowMillis(clock func() time.Time) int64 {
	if clock != nil {
		return clock().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// nextRow appends an empty row of n values to rows, which buffers rows for
// a delta.DataWriter, and returns both. Once the writer has the buffered
// rows (it keeps their values, not the slices), rows[:0] makes their
// slices the next ones nextRow returns.
func nextRow(rows []delta.Row, n int) ([]delta.Row, delta.Row) {
	if i := len(rows); i < cap(rows) {
		rows = rows[:i+1]
		if r := rows[i]; len(r) == n {
			clear(r)
			return rows, r
		}
		rows[i] = make(delta.Row, n)
		return rows, rows[i]
	}
	r := make(delta.Row, n)
	return append(rows, r), r
}

// startRow writes the rows buffered for w (see nextRow), which come before,
// and starts a row given value by value (delta.RowBuilder).
func startRow(w *delta.DataWriter, buffered *[]delta.Row) (*delta.RowBuilder, error) {
	if len(*buffered) > 0 {
		if err := w.Write(*buffered); err != nil {
			return nil, err
		}
		*buffered = (*buffered)[:0]
	}
	return w.Row(), nil
}

// changeDataFeed returns the protocol and metaData a commit of dt with
// actions adds so that a mirror's delta.enableChangeDataFeed is what
// Config.ChangeDataFeed says (see cdf.go): md, the metaData the commit
// writes already or nil, with the property set, and a protocol when the
// table's does not cover the feature. A commit that brings its own
// protocol or metaData (the column mapping upgrade) is left as it is.
func (a *Applier) changeDataFeed(dt *deltaTable, actions []delta.Action, md *delta.Metadata) (*delta.Protocol, *delta.Metadata) {
	if dt.kind != KindMirror || delta.ChangeDataFeedEnabled(dt.meta) == a.cfg.ChangeDataFeed {
		return nil, md
	}
	for _, act := range actions {
		switch act.(type) {
		case *delta.Protocol, *delta.Metadata:
			return nil, md
		}
	}
	if md == nil {
		md = dt.meta
	}
	md = md.WithChangeDataFeed(a.cfg.ChangeDataFeed)
	var proto *delta.Protocol
	if p := delta.ChangeDataFeedProtocol(dt.protocol); a.cfg.ChangeDataFeed && p != dt.protocol {
		proto = p
	}
	return proto, md
}
