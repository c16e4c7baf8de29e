package source

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// watcher looks at the captured tables in PostgreSQL's catalog every
// Config.WatchInterval, on a connection of its own, for what the stream
// cannot see by itself: a captured table dropped and created again under
// its configured name (the new table is not in the publication, and its
// changes have a new OID), and a schema change with no row change after
// it (PostgreSQL describes a table again only before its next change). It
// tells the stream by a logical decoding message (tableMessage), which the
// stream acts on where it reaches it, in order with the changes; it also
// logs renames and drops, and asks Config.Backfill for the copies the
// state file says are due.
type watcher struct {
	s      *Source
	conn   *pgx.Conn
	types  *typemap.Map
	tables []*watched
	// asked holds the backfills asked for in this session, by table and
	// OID, while the state file may not say so yet: the
	// store.TableGeneration.BackfillRequest asked for.
	asked map[string]uint64
	// failing is set while ticks fail, so that a failure is logged once.
	failing bool
}

// watched is what the watcher knows of a captured table.
type watched struct {
	configured Table
	identity   string
	// oid is the table captured, as the state file records it.
	oid uint32
	// name is what PostgreSQL called it when last seen.
	name Table
	// seen is the catalog's description of seenOID when last seen.
	seen    string
	seenOID uint32
	// announced holds the new OIDs whose re-creation was announced as
	// replacing announcedFor, the OID captured then.
	announced    map[uint32]bool
	announcedFor uint32
	// logged is the condition last logged, so that each is logged once.
	logged string
	// leaves are the OIDs of the partitions of a partitioned table as
	// capture last acted on them (leavesOf, while it was captured as
	// oid), sorted.
	leaves   []uint32
	leavesOf uint32
	// enums are the labels of the enum types whose values the table holds
	// (enumLabelsSQL), as the last look at enumsOf found them.
	enums   []string
	enumsOf uint32
}

// watch runs the catalog watcher until ctx ends; leaves are the captured
// tables' partitions as capture last acted on them (seedPartitions), and
// labels the enum labels their values held as the watcher last acted on
// them (store.Reader.EnumLabels), by table OID.
func (s *Source) watch(ctx context.Context, captured []*capturedTable, leaves map[uint32][]uint32, labels map[uint32][]string) {
	if s.cfg.WatchInterval < 0 {
		return
	}
	w := &watcher{s: s, types: typemap.New(), asked: map[string]uint64{}}
	for _, c := range captured {
		t := &watched{configured: c.configured, identity: c.identity, oid: c.oid, name: c.current,
			leaves: leaves[c.oid], leavesOf: c.oid}
		if l, ok := labels[c.oid]; ok {
			t.enums, t.enumsOf = l, c.oid
		}
		w.tables = append(w.tables, t)
	}
	defer func() {
		if w.conn != nil {
			w.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	interval := cmp.Or(s.cfg.WatchInterval, DefaultWatchInterval)
	for {
		err := w.tick(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !w.failing {
				s.log.Warn("the catalog watcher failed; it tries again", "err", err, "every", interval.String())
			}
			w.failing = true
			if w.conn != nil {
				w.conn.Close(context.WithoutCancel(ctx))
				w.conn = nil
			}
		default:
			w.failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// tick looks at the catalog once.
func (w *watcher) tick(ctx context.Context) error {
	if w.conn == nil {
		conn, err := w.s.cfg.Connect(ctx)
		if err != nil {
			return err
		}
		w.conn = conn
	}
	var ids []*store.TableIdentity
	if err := w.s.db.View(func(r *store.Reader) error {
		var err error
		ids, err = r.TableIdentities()
		return err
	}); err != nil {
		return fmt.Errorf("read table identities: %w", err)
	}
	byName := map[string]*store.TableIdentity{}
	for _, id := range ids {
		byName[id.Table] = id
	}
	schemas, names, oids := make([]string, len(w.tables)), make([]string, len(w.tables)), make([]int64, len(w.tables))
	for i, t := range w.tables {
		if id := byName[t.identity]; id != nil {
			t.oid = id.Current().OID
		}
		schemas[i], names[i], oids[i] = t.configured.Schema, t.configured.Name, int64(t.oid)
	}
	looks, err := w.look(ctx, schemas, names, oids)
	if err != nil {
		return err
	}
	for i, l := range looks {
		if err := w.check(ctx, w.tables[i], l); err != nil {
			return err
		}
	}
	return w.backfills(ctx, ids)
}

// look is what the catalog says of a captured table: the OID its
// configured name finds (0 for none), whether its OID exists and under
// what name, a description of its columns (pg_attribute: number, name,
// type, type modifier, dropped, missing value, generated), primary key,
// replica identity, storage and columns stamp (rewrite.go), the OIDs of
// its leaf partitions (none for a table that is not partitioned), sorted,
// and the labels of the enum types its values hold (enums.go).
type look struct {
	nameOID uint32
	exists  bool
	name    Table
	desc    string
	leaves  []uint32
	enums   []string
}

func (w *watcher) look(ctx context.Context, schemas, names []string, oids []int64) ([]look, error) {
	rows, err := w.conn.Query(ctx, `
		SELECT coalesce((SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		                 WHERE n.nspname = t.schema AND c.relname = t.name), 0)::int8,
		       r.oid IS NOT NULL, coalesce(rn.nspname, ''), coalesce(r.relname, ''),
		       coalesce(r.relreplident::text, '') || '|' ||
		       coalesce((SELECT string_agg(a.attnum || ':' || quote_ident(a.attname) || ':' || a.atttypid || ':' || a.atttypmod || ':' ||
		                                   a.attisdropped || ':' || a.atthasmissing || ':' || a.attgenerated::text, ',' ORDER BY a.attnum)
		                 FROM pg_attribute a WHERE a.attrelid = r.oid AND a.attnum > 0), '') || '|' ||
		       coalesce((SELECT i.indkey::text FROM pg_index i WHERE i.indrelid = r.oid AND i.indisprimary), '') || '|' ||
		       coalesce((SELECT string_agg(i.indkey::text, ';') FROM pg_index i WHERE i.indrelid = r.oid AND i.indisreplident), '') || '|' ||
		       coalesce(`+storageSQL("r")+`, 0) || '|' || coalesce(`+stampSQL("r")+`, 0),
		       `+leavesSQL("r.oid")+`, `+enumLabelsSQL("r")+`
		FROM unnest($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS t(schema, name, oid, i)
		LEFT JOIN pg_class r ON r.oid = t.oid::oid
		LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace
		ORDER BY t.i`, schemas, names, oids)
	if err != nil {
		return nil, fmt.Errorf("look at the captured tables: %w", err)
	}
	var out []look
	for rows.Next() {
		var l look
		var nameOID int64
		var leaves []int64
		if err := rows.Scan(&nameOID, &l.exists, &l.name.Schema, &l.name.Name, &l.desc, &leaves, &l.enums); err != nil {
			return nil, fmt.Errorf("look at the captured tables: %w", err)
		}
		l.leaves = toOIDs(leaves)
		l.nameOID = uint32(nameOID)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look at the captured tables: %w", err)
	}
	if len(out) != len(w.tables) {
		return nil, fmt.Errorf("look at the captured tables: %d rows for %d tables", len(out), len(w.tables))
	}
	return out, nil
}

// check acts on what the catalog says of a captured table.
func (w *watcher) check(ctx context.Context, t *watched, l look) error {
	if t.announcedFor != t.oid {
		// A re-creation announced as replacing an OID that is not
		// captured any more was passed over by the stream.
		t.announced, t.announcedFor = map[uint32]bool{}, t.oid
	}
	switch {
	case l.exists:
		if l.name != t.name {
			t.name = l.name
			w.s.log.Warn("a captured table was renamed in PostgreSQL; its Delta tables keep their name (update source.tables to the new name at leisure)",
				"table", t.configured.String(), "oid", t.oid, "now", l.name.String(), "delta_table", t.identity)
			w.s.noteTable(t.identity, func(s *TableStatus) {
				s.PostgresName, s.Event, s.EventTime = l.name.String(), "renamed in PostgreSQL to "+l.name.String(), time.Now()
			})
		}
		if l.nameOID != 0 && l.nameOID != t.oid {
			w.logOnce(t, "taken "+strconv.FormatUint(uint64(l.nameOID), 10), func() {
				w.s.log.Warn("the configured name of a renamed table names another table now, which is not captured",
					"table", t.configured.String(), "oid", l.nameOID, "captured_oid", t.oid, "captured_as", l.name.String())
			})
		}
		if err := w.partitions(ctx, t, l.leaves); err != nil {
			return err
		}
		if err := w.enums(ctx, t, l.enums); err != nil {
			return err
		}
		if t.seenOID == t.oid && t.seen == l.desc {
			return nil
		}
		done, err := w.schema(ctx, t, t.seenOID != t.oid)
		if err != nil || !done {
			return err
		}
		t.seen, t.seenOID = l.desc, t.oid
	case l.nameOID != 0:
		if t.announced[l.nameOID] {
			return nil
		}
		for _, o := range w.tables {
			if o.oid == l.nameOID {
				return nil // another captured table, renamed to this name
			}
		}
		return w.recreate(ctx, t, l.nameOID)
	default:
		w.logOnce(t, "dropped", func() {
			w.s.log.Warn("a captured table was dropped in PostgreSQL; its Delta tables keep what they hold, and a table created under its configured name is captured as its next generation",
				"table", t.configured.String(), "oid", t.oid, "delta_table", t.identity)
			w.s.noteTable(t.identity, func(s *TableStatus) {
				s.PostgresName, s.Event, s.EventTime = "", "dropped in PostgreSQL", time.Now()
			})
		})
	}
	return nil
}

// partitions acts on the partitions of a captured partitioned table,
// leaves as look found them: PostgreSQL sends no row change when a
// partition is attached, detached or dropped, so its rows would be
// missing from the copy, or kept there, with nothing said. A partition
// detached or dropped has the table copied again from a truncate
// (ReasonPartitionDetached). One attached that holds rows has the table
// copied again over what its Delta tables hold (ReasonPartitionAttached),
// or from a truncate if a copy of it is under way, which may have passed
// the partition's keys. An empty one needs nothing: its rows come through
// the stream. The partitions acted on are recorded in the state file, so
// that a change made while capture is stopped is acted on at the next
// start.
func (w *watcher) partitions(ctx context.Context, t *watched, leaves []uint32) error {
	if t.leavesOf != t.oid {
		// A new generation: its partitions are its own.
		return w.recordPartitions(t, leaves)
	}
	if slices.Equal(leaves, t.leaves) {
		return nil
	}
	var added, removed []uint32
	for _, o := range leaves {
		if !slices.Contains(t.leaves, o) {
			added = append(added, o)
		}
	}
	for _, o := range t.leaves {
		if !slices.Contains(leaves, o) {
			removed = append(removed, o)
		}
	}
	req := backfill.Request{Table: t.identity, Truncate: true, Reason: ReasonPartitionDetached}
	if len(removed) == 0 {
		rows, err := w.partitionRows(ctx, added)
		if err != nil {
			return fmt.Errorf("look at the partitions of %s: %w", t.configured, err)
		}
		if !rows {
			w.s.log.Info("a partition of a captured table was attached empty; its rows come through the stream",
				"table", t.configured.String(), "oid", t.oid, "partitions", fmt.Sprint(added))
			w.s.noteTable(t.identity, func(s *TableStatus) {
				s.Event, s.EventTime = "partition attached empty", time.Now()
			})
			return w.recordPartitions(t, leaves)
		}
		req = backfill.Request{Table: t.identity, OID: t.oid, Reason: ReasonPartitionAttached}
		// A copy under way may have passed the new partition's keys:
		// the table is copied from a truncate instead.
		req.Truncate = slices.ContainsFunc(w.s.Backfills(), func(b BackfillStatus) bool { return b.Table == t.identity && !b.Done })
	}
	if err := w.s.request(ctx, req); err != nil {
		return fmt.Errorf("copy %s again after its partitions changed: %w", t.configured, err)
	}
	w.s.log.Warn("the partitions of a captured table changed, which PostgreSQL sends no row change for; the table's rows are copied again",
		"table", t.configured.String(), "oid", t.oid, "attached", fmt.Sprint(added), "detached_or_dropped", fmt.Sprint(removed),
		"reason", req.Reason, "truncate_first", req.Truncate)
	w.s.noteTable(t.identity, func(s *TableStatus) {
		s.Event, s.EventTime = req.Reason+"; copied again", time.Now()
	})
	return w.recordPartitions(t, leaves)
}

// recordPartitions records leaves as the partitions t's copy follows, in
// the watcher and the state file, in place of the record of the generation
// before t's, if any.
func (w *watcher) recordPartitions(t *watched, leaves []uint32) error {
	rec := map[uint32][]uint32{t.oid: leaves}
	if t.leavesOf != t.oid {
		rec[t.leavesOf] = nil
		t.leavesOf = t.oid
	}
	t.leaves = leaves
	return w.s.writer.send(writeOp{kind: opPartitions, partitions: rec})
}

// leavesSQL returns an expression whose value lists the leaf partitions
// of the table oid, an SQL expression (none for a table that is not
// partitioned), as an int8 array, sorted.
func leavesSQL(oid string) string {
	return `coalesce((SELECT array_agg(p.relid::oid::int8 ORDER BY p.relid::oid::int8)
		FROM pg_partition_tree(` + oid + `) p WHERE p.isleaf AND p.relid <> ` + oid + `), '{}')`
}

// toOIDs converts OIDs read as int8 to uint32; nil for none.
func toOIDs(in []int64) []uint32 {
	var out []uint32
	for _, o := range in {
		out = append(out, uint32(o))
	}
	return out
}

// seedPartitions returns the partitions of the captured tables that the
// watcher starts from: those the state file records, or, for a table with
// no record, those it has now, which are then recorded.
func (s *Source) seedPartitions(ctx context.Context, conn *pgx.Conn, captured []*capturedTable) (map[uint32][]uint32, error) {
	var recorded map[uint32][]uint32
	if err := s.db.View(func(r *store.Reader) (err error) { recorded, err = r.Partitions(); return err }); err != nil {
		return nil, fmt.Errorf("read partitions: %w", err)
	}
	out, fresh := map[uint32][]uint32{}, map[uint32][]uint32{}
	for _, c := range captured {
		if leaves, ok := recorded[c.oid]; ok {
			out[c.oid] = leaves
			continue
		}
		var leaves []int64
		if err := conn.QueryRow(ctx, "SELECT "+leavesSQL("$1::oid"), int64(c.oid)).Scan(&leaves); err != nil {
			return nil, fmt.Errorf("read the partitions of %s: %w", c.configured, err)
		}
		if out[c.oid] = toOIDs(leaves); out[c.oid] != nil {
			fresh[c.oid] = out[c.oid]
		}
	}
	if len(fresh) > 0 {
		if err := s.writer.send(writeOp{kind: opPartitions, partitions: fresh}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// partitionRows reports whether any of the partitions holds a row. A
// partition dropped meanwhile holds none.
func (w *watcher) partitionRows(ctx context.Context, partitions []uint32) (bool, error) {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+watchLockTimeout+"'"); err != nil {
		return false, err
	}
	for _, o := range partitions {
		var name string
		err := tx.QueryRow(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::oid`, int64(o)).Scan(&name)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return false, err
		}
		var rows bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+name+")").Scan(&rows); err != nil || rows {
			return rows, err
		}
	}
	return false, nil
}

// logOnce calls log unless the table's condition is what was logged last.
func (w *watcher) logOnce(t *watched, condition string, log func()) {
	if t.logged != condition {
		t.logged = condition
		log()
	}
}

// watchLockTimeout bounds the watcher's wait for a table lock: a table
// being altered is looked at again at the next tick.
const watchLockTimeout = "2s"

// schema announces the schema of a captured table to the stream. The
// table is locked against schema changes (ACCESS SHARE, which only DDL
// waits for) while its columns are read and the message is emitted, so
// that the message describes the table as it is at the message's place in
// the WAL. Nothing is announced when the schema history's newest version
// of the table has the same shape, storage and columns stamp (rewrite.go),
// nor on the first look at a table the history does not hold. done is
// false when the table could not be looked at now.
func (w *watcher) schema(ctx context.Context, t *watched, first bool) (done bool, err error) {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("look at %s: %w", t.configured, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+watchLockTimeout+"'"); err != nil {
		return false, fmt.Errorf("look at %s: %w", t.configured, err)
	}
	name, exists, err := nameOf(ctx, w.conn, t.oid)
	if err != nil || !exists {
		return false, err
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+name.Quoted()+" IN ACCESS SHARE MODE"); err != nil {
		return false, fmt.Errorf("lock %s: %w", name, err)
	}
	if now, err := oidOf(ctx, w.conn, name); err != nil || now != t.oid {
		return false, err // renamed or dropped meanwhile
	}
	rel, err := relationFromCatalog(ctx, w.conn, t.oid, t.identity, 0, w.types.Known)
	if err != nil {
		return false, err
	}
	var newest *store.Relation
	if err := w.s.db.View(func(r *store.Reader) error {
		all, err := r.Relations()
		for k, v := range all {
			if k.OID == t.oid && (newest == nil || k.LSN > newest.Key.LSN) {
				newest = v
			}
		}
		return err
	}); err != nil {
		return false, fmt.Errorf("read schema history: %w", err)
	}
	if first && newest == nil || newest != nil && newest.SameShape(rel) && stateOf(newest) == stateOf(rel) {
		return true, nil
	}
	if err := w.emit(ctx, tx, tableMessage{Kind: kindSchema, Table: t.identity, OID: t.oid, Relation: toMessageRelation(rel)}); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("announce the schema of %s: %w", t.configured, err)
	}
	if newest != nil && newest.SameShape(rel) {
		w.s.log.Debug("a captured table has new storage or a column changed in place; telling the stream where it reaches this point",
			"table", t.configured.String(), "oid", t.oid)
		return true, nil
	}
	w.s.log.Info("the schema of a captured table changed in PostgreSQL; recording it where the stream reaches this point",
		"table", t.configured.String(), "oid", t.oid, "columns", len(rel.Columns))
	return true, nil
}

// recreate announces to the stream that the captured table t was dropped
// and newOID created under its configured name, adding the new table to
// the publication in the same transaction as ensurePublication would (the
// message is in the WAL before the table is published). A new table that
// cannot identify its rows is not added: PostgreSQL would refuse its
// updates and deletes.
func (w *watcher) recreate(ctx context.Context, t *watched, newOID uint32) error {
	var role string
	if err := w.conn.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return fmt.Errorf("look at %s: %w", t.configured, err)
	}
	for _, c := range checkTable(ctx, w.conn, t.configured, pgx.Identifier{role}.Sanitize()) {
		if !c.OK {
			w.logOnce(t, "unfit "+strconv.FormatUint(uint64(newOID), 10), func() {
				w.s.log.Error("a captured table was dropped and created again, but the new table cannot be captured until it is fixed",
					"table", t.configured.String(), "old_oid", t.oid, "oid", newOID, "problem", c.String())
			})
			return nil
		}
	}
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("take over %s: %w", t.configured, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+watchLockTimeout+"'"); err != nil {
		return fmt.Errorf("take over %s: %w", t.configured, err)
	}
	add := false
	var all, member bool
	err = tx.QueryRow(ctx, `SELECT p.puballtables, EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = $2)
		FROM pg_publication p WHERE p.pubname = $1`, w.s.cfg.Publication, int64(newOID)).Scan(&all, &member)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read publication: %w", err)
	default:
		add = !all && !member
	}
	if add {
		sql := "ALTER PUBLICATION " + pgx.Identifier{w.s.cfg.Publication}.Sanitize() + " ADD TABLE " + t.configured.Quoted()
		if _, err := tx.Exec(ctx, sql); err != nil {
			w.logOnce(t, "unpublished "+strconv.FormatUint(uint64(newOID), 10), func() {
				w.s.log.Error("a captured table was dropped and created again, but the new table cannot be added to the publication",
					"table", t.configured.String(), "oid", newOID, "err", err, "fix", "run as the table's owner: "+sql+";")
			})
			return nil
		}
	}
	if now, err := oidOf(ctx, w.conn, t.configured); err != nil || now != newOID {
		return err // changed again meanwhile: looked at again at the next tick
	}
	if err := w.emit(ctx, tx, tableMessage{Kind: kindRecreated, Table: t.identity, OID: newOID, OldOID: t.oid}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("take over %s: %w", t.configured, err)
	}
	t.announced[newOID] = true
	w.s.log.Warn("a captured table was dropped and created again; the new table is taken over where the stream reaches this point",
		"table", t.configured.String(), "old_oid", t.oid, "oid", newOID, "delta_table", t.identity, "added_to_publication", add)
	return nil
}

// emit emits a tableMessage in tx, not transactional: it is in the WAL at
// once, where the stream finds it.
func (w *watcher) emit(ctx context.Context, tx pgx.Tx, m tableMessage) error {
	m.Slot, m.Time = w.s.cfg.Slot, time.Now().UTC()
	content, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(false, $1, $2::text)", tableMessagePrefix, string(content)); err != nil {
		return fmt.Errorf("emit %s message: %w", tableMessagePrefix, err)
	}
	return nil
}

// backfills asks Config.Backfill for each copy the state file says is due
// and records that it was asked. A copy due for a generation that is not
// the current one any more is dropped unasked.
func (w *watcher) backfills(ctx context.Context, ids []*store.TableIdentity) error {
	for _, id := range ids {
		cur := id.Current()
		for _, g := range id.Generations {
			key := id.Table + "\x00" + strconv.FormatUint(uint64(g.OID), 10)
			if g.Backfill == "" {
				// Asked and recorded so.
				delete(w.asked, key)
				continue
			}
			if n, ok := w.asked[key]; ok && n == g.BackfillRequest {
				// Asked, and not recorded so yet. A reason recorded
				// since (a rewrite) has the next number, and is asked
				// for in turn.
				continue
			}
			if g.OID == cur.OID {
				asked, err := w.askCopy(ctx, id.Table, g.OID, g.Backfill)
				if err != nil {
					return err
				}
				if !asked {
					w.asked[key] = g.BackfillRequest // stays recorded as due
					continue
				}
				w.s.log.Info("asked for the backfill of a captured table", "table", id.Table, "oid", g.OID, "reason", g.Backfill)
			}
			w.asked[key] = g.BackfillRequest
			if err := w.s.writer.send(writeOp{kind: opBackfillAsked, gen: &newGeneration{table: id.Table, oid: g.OID, request: g.BackfillRequest}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// askCopy asks Config.Backfill for a copy of the PostgreSQL table oid,
// captured as table, for reason. It reports false, logged, when no
// backfill is configured.
func (w *watcher) askCopy(ctx context.Context, table string, oid uint32, reason string) (bool, error) {
	if w.s.cfg.Backfill == nil {
		w.s.log.Warn("the rows of a captured table must be copied, but no backfill is configured", "table", table, "oid", oid, "reason", reason)
		return false, nil
	}
	if err := w.s.cfg.Backfill(ctx, table, oid, reason); err != nil {
		return false, fmt.Errorf("ask for the backfill of %s (OID %d): %w", table, oid, err)
	}
	return true, nil
}
