package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// replConn is a connection in logical replication mode.
type replConn = *pgconn.PgConn

// spillChanges and spillBytes are how many changes of a transaction, and
// bytes of their values, are held in memory before they go to the spool:
// no transaction, however large or wide, is held whole.
const (
	spillChanges = 2048
	spillBytes   = 16 << 20
)

// ackEvery is the shortest time between two status updates sent because the
// durable position moved. Each update costs the walsender work (it may save
// the slot), so a busy stream is acknowledged about once a second, as
// PostgreSQL's own tools do at most.
const ackEvery = time.Second

// readTimeout bounds a wait for the next message, so that status updates and
// shutdown are never held up by a quiet stream.
const readTimeout = 200 * time.Millisecond

// idleProbe is how often an idle connection asks the server for its WAL end.
const idleProbe = time.Second

// stream is the state of one replication connection.
type stream struct {
	s    *Source
	conn replConn
	// sql is the session's ordinary connection, idle while streaming; it
	// samples the server's WAL position while capture is paused.
	sql   *pgx.Conn
	types *typemap.Map
	rels  map[uint32]*relationDecoder
	// tables are the captured tables by OID: the changes of every other
	// table are passed over (ignored holds their OIDs, and passedOver
	// the last Relation message of each, in case the table is taken over
	// as a captured table's new generation: PostgreSQL does not describe
	// it again).
	tables     map[uint32]*capturedTable
	ignored    map[uint32]bool
	passedOver map[uint32]*pglogrepl.RelationMessage
	// described holds, by table OID, the last Relation message recorded
	// (describedAs): PostgreSQL sends one again at the start of every
	// block of a streamed transaction, and an unchanged one needs no look
	// at the catalog.
	described map[uint32]string
	// noted holds, by table OID, the storage a table's rows were last
	// seen in without a rewrite since its newest schema version was
	// recorded (a TRUNCATE decoded, a VACUUM FULL the watcher announced:
	// rewrite.go).
	noted map[uint32]tableState
	// visibleXid is the last committed transaction seen visible
	// (awaitCommitVisible).
	visibleXid uint32

	// lastQueued is the end LSN of the newest transaction handed to the
	// writer; a transaction PostgreSQL sends again at or below it is dropped.
	lastQueued store.LSN
	received   store.LSN
	walEnd     store.LSN

	// The transaction between Begin and Commit (not streamed).
	inTxn   bool
	txn     store.Txn
	spilled bool // part of txn is in the spool under its xid

	// Streamed transactions: the one whose block is being received and the
	// open ones, whose changes are in the spool.
	inStream  bool
	streamXid uint32
	open      map[uint32]bool
	buf       []store.Change
	bufSubXid uint32
	// txnBytes and bufBytes are the bytes of the values of txn's changes
	// and of buf, while they hold any.
	txnBytes, bufBytes int

	slab valueSlab

	// trk notes the changes of the table a backfill copies, as asked
	// at trackGen (backfill_track.go).
	trk      *tracker
	trackGen uint64

	paused     bool
	walSampled time.Time

	lastStatus    time.Time
	deadlineSet   time.Time
	acked         store.LSN
	checkpointAsk store.LSN
	// ackAsk, when set, is a position a backfill waits to see
	// acknowledged (stream.adoptTracking): it is, as soon as it is
	// durable.
	ackAsk store.LSN
}

// run receives and handles messages until ctx is cancelled (then it shuts
// down cleanly and returns nil) or the connection fails.
func (st *stream) run(ctx context.Context) error {
	interval := st.s.cfg.StatusInterval
	// The chores (stopping, status updates, pausing, the read deadline)
	// are done before the first read, after every choresEvery messages,
	// and whenever a read timed out: the clock stays off the per-message
	// path.
	sinceChores := choresEvery
	for {
		if sinceChores >= choresEvery {
			sinceChores = 0
			if ctx.Err() != nil {
				return st.shutdown()
			}
			// Tracking first: a backfill that begins waits for the
			// position it starts from to be acknowledged.
			st.adoptTracking()
			if err := st.statusChore(ctx, interval); err != nil {
				return err
			}
			st.sampleServerWAL(ctx)
			if paused, err := st.pause(ctx); err != nil {
				return err
			} else if paused {
				sinceChores = choresEvery // read nothing until resumed
				continue
			}
			// A read deadline on the socket, rather than a context per
			// message, bounds the wait: it is far cheaper at hundreds of
			// thousands of messages a second, and a timeout leaves the
			// connection usable.
			if now := time.Now(); now.Sub(st.deadlineSet) >= readTimeout/4 {
				if err := st.conn.Conn().SetReadDeadline(now.Add(readTimeout)); err != nil {
					return fmt.Errorf("receive: %w", err)
				}
				st.deadlineSet = now
				// The chores come at least once per read deadline:
				// promising the next beat here keeps the clock off the
				// per-message path.
				st.s.beat(streamBeat)
			}
		}
		sinceChores++
		switch err := st.receive(ctx); {
		case errors.Is(err, errReadTimeout):
			sinceChores = choresEvery
			// The deadline passed, or a backfill woke the stream
			// (handoff.wake): the chores set a new one.
			st.deadlineSet = time.Time{}
		case errors.Is(err, errStopping):
			return st.shutdown()
		case err != nil:
			return err
		}
	}
}

// statusChore sends a status update when one is due: every interval, about
// once a second while the durable position moves, and as a keepalive
// request when idle.
func (st *stream) statusChore(ctx context.Context, interval time.Duration) error {
	durable := st.s.writer.Durable()
	sinceStatus := time.Since(st.lastStatus)
	switch {
	case st.idle() && sinceStatus >= idleProbe:
		// Ask for a keepalive: its WAL end becomes the checkpoint, so an
		// idle slot's confirmed position follows the server's WAL.
		return st.sendStatus(ctx, true)
	case sinceStatus >= interval || (durable != st.acked && sinceStatus >= ackEvery):
		return st.sendStatus(ctx, false)
	case st.ackAsk != 0 && durable >= st.ackAsk:
		st.ackAsk = 0
		return st.sendStatus(ctx, false)
	}
	return nil
}

// choresEvery is how many messages are received between two turns of the
// streaming loop's chores.
const choresEvery = 64

// Results of receive that are not failures: nothing came before the read
// deadline, or the stream is stopping.
var (
	errReadTimeout = errors.New("read timed out")
	errStopping    = errors.New("stopping")
)

// receive reads and handles one message.
func (st *stream) receive(ctx context.Context) error {
	raw, err := st.conn.ReceiveMessage(context.Background())
	if err != nil {
		if ctx.Err() != nil {
			return errStopping
		}
		if pgconn.Timeout(err) {
			return errReadTimeout
		}
		return fmt.Errorf("receive: %w", err)
	}
	switch msg := raw.(type) {
	case *pgproto3.CopyData:
		err := st.copyData(ctx, msg.Data)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// A catalog read ended by the stop: the stream shuts
			// down as between two messages (it acknowledges only
			// what the writer made durable).
			return errStopping
		}
		return err
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication: %w", pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return errors.New("replication: server ended the stream")
	}
	return nil
}

// pause waits a moment, reading nothing, while the agent asks capture to
// pause; it logs once when capture pauses and once when it resumes.
func (st *stream) pause(ctx context.Context) (bool, error) {
	if st.s.cfg.Backpressure == nil {
		return false, nil
	}
	paused, reason := st.s.cfg.Backpressure.Pause()
	if paused != st.paused {
		st.paused = paused
		if paused {
			st.s.log.Warn("capture paused; PostgreSQL keeps the WAL meanwhile", "reason", reason)
			st.s.setState("paused")
		} else {
			st.s.log.Info("capture resumed")
			st.s.setState("streaming")
		}
	}
	if !paused {
		return false, nil
	}
	st.s.beat(streamBeat)
	// The flush and status updates go on, so the server keeps the
	// connection; the server's WAL position is sampled so that the slot's
	// growing lag shows.
	if err := st.flushStream(); err != nil {
		return true, err
	}
	st.sampleServerWAL(ctx)
	select {
	case <-ctx.Done():
	case <-time.After(readTimeout):
	}
	return true, nil
}

// streamBeat bounds one turn of the streaming loop: a read (readTimeout), a
// status update, and handing a message to the queue writer, which may wait
// for a group commit of the spool.
const streamBeat = time.Minute

// walSampleEvery is how often the server's current WAL position is asked for.
const walSampleEvery = time.Second

// sampleServerWAL asks the server for its current WAL position on the
// session's idle SQL connection. Logical replication messages carry the
// position of their own change, not the server's WAL end, so this is what
// makes the slot's lag (the WAL PostgreSQL keeps) visible while streaming.
func (st *stream) sampleServerWAL(ctx context.Context) {
	if st.sql == nil || time.Since(st.walSampled) < walSampleEvery {
		return
	}
	st.walSampled = time.Now()
	var text string
	if err := st.sql.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		return
	}
	if l, err := pglogrepl.ParseLSN(text); err == nil && store.LSN(l) > st.walEnd {
		st.walEnd = store.LSN(l)
		st.s.serverWALEnd.Store(uint64(st.walEnd))
		st.s.noteCatchUp()
	}
}

// shutdown makes everything received durable, acknowledges it, and returns.
func (st *stream) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st.flushStream()
	if err := st.s.writer.sync(ctx); err != nil {
		return err
	}
	if err := st.sendStatus(ctx, false); err != nil {
		st.s.log.Warn("final acknowledgement failed", "err", err)
	}
	st.s.log.Info("stopped streaming", "confirmed", st.acked.String())
	return nil
}

// sendStatus sends a standby status update. Write, flush and apply are all
// set explicitly: flush and apply are the durable checkpoint, write is the
// newest position received.
func (st *stream) sendStatus(ctx context.Context, replyRequested bool) error {
	durable := st.s.writer.Durable()
	write := max(st.received, durable)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, st.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(write),
		WALFlushPosition: pglogrepl.LSN(durable),
		WALApplyPosition: pglogrepl.LSN(durable),
		ClientTime:       time.Now(),
		ReplyRequested:   replyRequested,
	})
	if err != nil {
		return fmt.Errorf("send status: %w", err)
	}
	st.lastStatus = time.Now()
	st.acked = durable
	st.s.confirmedLSN.Store(uint64(durable))
	return nil
}

func (st *stream) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		// A logical walsender's keepalive carries the position it has
		// decoded up to, which trails the server's WAL end while capture
		// catches up: it raises what is known of the WAL end, never
		// lowers it.
		decoded := store.LSN(pkm.ServerWALEnd)
		st.walEnd = max(st.walEnd, decoded)
		st.s.serverWALEnd.Store(uint64(st.walEnd))
		if st.idle() {
			// With no transaction open, everything before the decoded
			// position has been received; it becomes the checkpoint once
			// it is durable, so an idle slot holds no WAL. (Only the
			// decoded position: a transaction that commits after it may
			// have begun before it.)
			st.received = max(st.received, decoded)
			st.s.receivedLSN.Store(uint64(st.received))
			if decoded > st.s.writer.Durable() && decoded > st.checkpointAsk {
				st.checkpointAsk = decoded
				if err := st.s.writer.send(writeOp{kind: opCheckpoint, lsn: decoded}); err != nil {
					return err
				}
			}
		}
		st.s.noteCatchUp()
		if pkm.ReplyRequested {
			return st.sendStatus(ctx, false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse xlogdata: %w", err)
		}
		if l := store.LSN(xld.WALStart); l > st.received {
			st.received = l
		}
		st.walEnd = max(st.walEnd, store.LSN(xld.ServerWALEnd))
		if err := st.handle(ctx, xld.WALData, store.LSN(xld.WALStart)); err != nil {
			return err
		}
		st.s.receivedLSN.Store(uint64(st.received))
		st.s.serverWALEnd.Store(uint64(st.walEnd))
		st.s.noteCatchUp()
	}
	return nil
}

// idle reports whether no transaction is in progress on this connection.
func (st *stream) idle() bool { return !st.inTxn && !st.inStream && len(st.open) == 0 }

// handle decodes one pgoutput message. The catalog reads it makes end with
// ctx.
func (st *stream) handle(ctx context.Context, data []byte, at store.LSN) error {
	switch data[0] {
	case 'I', 'U', 'D':
		xid, c, captured, err := st.rowChangeOf(data)
		if err != nil || !captured {
			return err
		}
		st.s.changesReceived.Add(1)
		return st.add(xid, c)
	}
	msg, err := pglogrepl.ParseV2(data, st.inStream)
	if err != nil {
		return fmt.Errorf("parse pgoutput message: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessageV2:
		return st.relation(ctx, &m.RelationMessage, at)
	case *pglogrepl.BeginMessage:
		st.inTxn, st.spilled = true, false
		st.txn = store.Txn{TxnHeader: store.TxnHeader{Xid: m.Xid}}
	case *pglogrepl.CommitMessage:
		return st.commit(m)
	case *pglogrepl.TruncateMessageV2:
		for _, oid := range m.RelationIDs {
			rd, captured, err := st.relationFor(oid)
			if err != nil {
				return err
			}
			if !captured {
				continue
			}
			if err := st.add(m.Xid, store.Change{Op: store.OpTruncate, Relation: rd.rel.Key}); err != nil {
				return err
			}
			if err := st.noteTruncate(ctx, rd.rel); err != nil {
				return err
			}
		}
	case *pglogrepl.StreamStartMessageV2:
		st.inStream, st.streamXid = true, m.Xid
		st.open[m.Xid] = true
	case *pglogrepl.StreamStopMessageV2:
		if err := st.flushStream(); err != nil {
			return err
		}
		st.inStream = false
	case *pglogrepl.StreamCommitMessageV2:
		return st.streamCommit(m)
	case *pglogrepl.StreamAbortMessageV2:
		if err := st.flushStream(); err != nil {
			return err
		}
		if m.Xid == m.SubXid {
			delete(st.open, m.Xid)
		}
		if st.trk != nil {
			st.trk.abort(m.Xid, m.SubXid)
		}
		return st.s.writer.send(writeOp{kind: opSpoolAbort, spool: store.SpoolID(m.Xid), subXid: m.SubXid})
	case *pglogrepl.LogicalDecodingMessageV2:
		return st.message(ctx, &m.LogicalDecodingMessage)
	}
	// Type and origin messages carry nothing to capture.
	return nil
}

// message handles a logical decoding message by its prefix; a message of
// another prefix is someone else's and passed over.
func (st *stream) message(ctx context.Context, m *pglogrepl.LogicalDecodingMessage) error {
	switch m.Prefix {
	case tableMessagePrefix:
		return st.tableMessage(ctx, m)
	case backfill.Prefix:
		if !m.Transactional {
			return st.watermark(m)
		}
	}
	return nil
}

// relation records a Relation message, keeping a new schema version in the
// schema history when the table's shape changed.
//
// PostgreSQL sends Relation messages with no WAL position of their own, so a
// new version is keyed by the newest position received, raised above every
// version of the table already recorded: keys never collide, and a version
// is never overwritten while queued changes still refer to it.
func (st *stream) relation(ctx context.Context, m *pglogrepl.RelationMessage, at store.LSN) error {
	t, ok := st.tables[m.RelationID]
	if !ok {
		st.ignored[m.RelationID] = true
		st.passedOver[m.RelationID] = m
		if _, logged := st.s.noted.LoadOrStore(m.RelationID, true); !logged {
			level, msg := slog.LevelWarn, "passing over the changes of a table not in source.tables (the publication has more tables than the agent captures)"
			if st.partitionOfCaptured(ctx, m.RelationID) {
				// PostgreSQL describes a partition too; its changes
				// come as the partitioned table's.
				level, msg = slog.LevelDebug, "a partition of a captured table; its changes come as the table's"
			}
			st.s.log.Log(ctx, level, msg, "oid", m.RelationID, "schema", m.Namespace, "table", m.RelationName)
		}
		return nil
	}
	delete(st.ignored, m.RelationID)
	desc := describedAs(m)
	if _, had := st.rels[m.RelationID]; had && st.described[m.RelationID] == desc {
		return nil
	}
	if m.Namespace != t.configured.Schema || m.RelationName != t.configured.Name {
		if _, logged := st.s.noted.LoadOrStore(m.RelationID, true); !logged {
			st.s.log.Warn("a captured table has another name in PostgreSQL now; its Delta tables keep their name (update source.tables to the new name at leisure)",
				"table", t.configured.String(), "oid", m.RelationID, "now_schema", m.Namespace, "now_table", m.RelationName, "delta_table", t.identity)
		}
	}
	rel := &store.Relation{
		Key:             store.RelationKey{OID: m.RelationID},
		Schema:          m.Namespace,
		Name:            m.RelationName,
		Table:           t.identity,
		ReplicaIdentity: m.ReplicaIdentity,
		Columns:         make([]store.Column, len(m.Columns)),
	}
	// The catalog read must show the schema change the message
	// describes: a committed transaction's, once PostgreSQL makes it
	// visible. A streamed transaction is still in progress, and its own
	// changes are not in the catalog (facts.apply).
	if _, err := st.awaitCommitVisible(ctx); err != nil {
		return err
	}
	facts, err := st.columnFacts(ctx, m.RelationID)
	if err != nil {
		return err
	}
	for i, c := range m.Columns {
		rel.Columns[i] = store.Column{Name: c.Name, TypeOID: c.DataType, TypeMod: c.TypeModifier, Key: c.Flags&1 == 1}
	}
	facts.apply(rel.Columns, st.inStream)
	facts.state.setOn(rel)
	if cur, had := st.rels[m.RelationID]; had && len(facts.cols) == 0 {
		// The table is gone from the catalog (dropped since the
		// message was written): its columns are as they were.
		keepFacts(rel, cur.rel)
	}
	tctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	defer cancel()
	if err := resolveTypes(tctx, st.sql, rel.Columns, st.types.Known); err != nil {
		return err
	}
	if err := st.recordVersion(rel, at); err != nil {
		return err
	}
	st.described[m.RelationID] = desc
	return nil
}

// recordVersion makes rel the schema version the table's changes are
// decoded with from here on, and records it in the schema history unless
// the newest recorded version has its shape and the table was not
// rewritten since (rewrite.go). at is the position it is seen at (see
// relation for its key).
func (st *stream) recordVersion(rel *store.Relation, at store.LSN) error {
	oid := rel.Key.OID
	cur, had := st.rels[oid]
	newest, err := st.newestVersion(oid)
	if err != nil {
		return err
	}
	prev := cmp.Or(newest, curRel(cur))
	if had && cur.rel.SameShape(rel) {
		prev = cur.rel
	}
	was := st.baseline(prev)
	rewrite := rewritten(prev, was, rel)
	if prev != nil && prev.SameShape(rel) && !rewrite {
		st.notice(was, rel)
		if prev != curRel(cur) {
			st.rels[oid] = newRelationDecoder(st.types, prev, st.s.maxValue())
		}
		return nil
	}
	key := max(at, st.received)
	if newest != nil && key <= newest.Key.LSN {
		key = newest.Key.LSN + 1
	}
	if had && key <= cur.rel.Key.LSN {
		key = cur.rel.Key.LSN + 1
	}
	rel.Key.LSN = key
	if prev != nil && !prev.SameShape(rel) {
		st.s.log.Info("table schema changed", "table", rel.QualifiedName(), "columns", len(rel.Columns), "version_lsn", key.String())
	}
	st.rels[oid] = newRelationDecoder(st.types, rel, st.s.maxValue())
	delete(st.noted, oid)
	var gen *newGeneration
	if rewrite {
		// PostgreSQL sends no change for the rows it rewrote: the
		// table's rows are copied again (the catalog watcher asks).
		keys := keysRewritten(was, rel)
		st.s.log.Info("table rewritten by a schema change; its rows are copied again", "table", rel.TableName(),
			"version_lsn", key.String(), "keys_rewritten", keys)
		reason := ReasonRewritten
		if keys {
			reason = ReasonKeysRewritten
		}
		gen = &newGeneration{table: rel.TableName(), oid: oid, backfill: reason}
	}
	return st.s.writer.send(writeOp{kind: opRelation, rel: rel, gen: gen})
}

// curRel returns the schema version of a relation decoder, or nil.
func curRel(rd *relationDecoder) *store.Relation {
	if rd == nil {
		return nil
	}
	return rd.rel
}

// describedAs returns what a Relation message says of its table, to tell
// one that says something new.
func describedAs(m *pglogrepl.RelationMessage) string {
	b := fmt.Appendf(nil, "%q.%q %c", m.Namespace, m.RelationName, m.ReplicaIdentity)
	for _, c := range m.Columns {
		b = fmt.Appendf(b, " %q:%d:%d:%d", c.Name, c.DataType, c.TypeModifier, c.Flags)
	}
	return string(b)
}

// keepFacts gives the columns of rel what the catalog said of the columns
// of the same name in prev, the version before it.
func keepFacts(rel, prev *store.Relation) {
	for i := range rel.Columns {
		c := &rel.Columns[i]
		for _, p := range prev.Columns {
			if p.Name == c.Name {
				c.AttNum, c.Dims, c.PrimaryKey, c.HasMissing, c.Missing = p.AttNum, p.Dims, p.PrimaryKey, p.HasMissing, p.Missing
			}
		}
	}
	stateOf(prev).setOn(rel)
}

// catalogColumn is what the catalog says of a column beyond what a
// Relation message does.
type catalogColumn struct {
	attnum, dims int
	primaryKey   bool
	hasMissing   bool
	missing      string
	// typeOID and typeMod are the column's type now.
	typeOID uint32
	typeMod int32
}

// columnFacts are a table's columns as the catalog has them, and the
// position of each by name.
type columnFacts struct {
	cols   []catalogColumn
	byName map[string]int
	// state is the table's storage and stamps (rewrite.go), and natts
	// its relnatts: the highest attnum, of dropped columns too.
	state tableState
	natts int
}

// apply sets on cols, a Relation message's columns, what the catalog says
// of them: each column is found by name; when a name is not in the catalog
// (renamed again since the message was written) and the message has as
// many columns as the catalog, by position, which pgoutput keeps in attnum
// order.
//
// The message of a transaction still in progress (inProgress, streamed)
// may name columns the transaction added, which the catalog shows no one
// else before the commit (nor does anyone else change the table's columns
// meanwhile: ALTER TABLE holds its lock to the end). Columns after the
// last one found, with no column of the catalog after it left over, are
// such columns: PostgreSQL numbers them on from the table's highest
// attnum, in order.
//
// A column found no way keeps AttNum zero, and is then matched by name
// downstream.
func (f columnFacts) apply(cols []store.Column, inProgress bool) {
	byPosition := len(cols) == len(f.cols)
	found := make([]bool, len(f.cols))
	last, lastAt := -1, 0
	for i := range cols {
		j, ok := f.byName[cols[i].Name]
		if !ok && byPosition {
			j, ok = i, true
		}
		if !ok {
			continue
		}
		c := f.cols[j]
		cols[i].AttNum, cols[i].Dims, cols[i].PrimaryKey = c.attnum, c.dims, c.primaryKey
		cols[i].HasMissing, cols[i].Missing = c.hasMissing, c.missing
		found[j], last, lastAt = true, i, c.attnum
	}
	if !inProgress || f.natts == 0 {
		return
	}
	for j, c := range f.cols {
		if !found[j] && c.attnum > lastAt {
			return
		}
	}
	next := f.natts
	for i := last + 1; i < len(cols); i++ {
		next++
		cols[i].AttNum = next
	}
}

// describe reports whether cols, a schema version's columns, are the
// catalog's: the same numbers, in order, of the same types.
func (f columnFacts) describe(cols []store.Column) bool {
	return slices.EqualFunc(cols, f.cols, func(c store.Column, k catalogColumn) bool {
		return c.AttNum == k.attnum && c.TypeOID == k.typeOID && c.TypeMod == k.typeMod
	})
}

// columnFacts reads what the Relation message does not say of the table
// oid's columns, as the catalog has it now: each column's number (its
// identity across renames and type changes), whether it is in the primary
// key (the message flags the replica identity's columns, every column
// under REPLICA IDENTITY FULL), the dimensions an array column is declared
// with, and the constant default rows stored before the column was added
// read (attmissingval). The reads end with ctx, or after catalogTimeout.
func (st *stream) columnFacts(ctx context.Context, oid uint32) (columnFacts, error) {
	ctx, cancel := context.WithTimeout(ctx, catalogTimeout)
	defer cancel()
	rows, err := st.sql.Query(ctx, catalogColumnsQuery, oid)
	if err != nil {
		return columnFacts{}, fmt.Errorf("read the columns of table %d: %w", oid, err)
	}
	f, err := scanCatalogColumns(rows)
	if err != nil {
		return columnFacts{}, fmt.Errorf("read the columns of table %d: %w", oid, err)
	}
	var storage int64
	if err := st.sql.QueryRow(ctx, `SELECT c.relnatts, `+tableStateSQL("c")+` FROM pg_class c WHERE c.oid = $1`, oid).Scan(&f.natts, &storage, &f.state.stamp, &f.state.keyStamp); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return columnFacts{}, fmt.Errorf("read the storage of table %d: %w", oid, err)
	}
	f.state.fileNode = uint32(storage)
	return f, nil
}

// Bounds of the stream's reads of the catalog: of a table's columns and
// types, and of whether a table passed over is a partition of a captured
// one (a question for a log message only).
const (
	catalogTimeout   = 30 * time.Second
	partitionTimeout = 5 * time.Second
)

// catalogColumnsQuery reads the published columns of table $1 (generated
// columns are not published) in attnum order: name, attnum, dimensions,
// primary key membership, missing value, type and type modifier.
const catalogColumnsQuery = `SELECT a.attname, a.attnum, a.attndims,
	       a.attnum = ANY (SELECT unnest(i.indkey) FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisprimary),
	       CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END, a.atttypid, a.atttypmod
	FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
	ORDER BY a.attnum`

// scanCatalogColumns reads the rows of catalogColumnsQuery.
func scanCatalogColumns(rows pgx.Rows) (columnFacts, error) {
	defer rows.Close()
	f := columnFacts{byName: map[string]int{}}
	for rows.Next() {
		var name string
		var c catalogColumn
		var inPK *bool
		var missing *string
		if err := rows.Scan(&name, &c.attnum, &c.dims, &inPK, &missing, &c.typeOID, &c.typeMod); err != nil {
			return columnFacts{}, err
		}
		c.primaryKey = inPK != nil && *inPK
		if missing != nil {
			c.hasMissing, c.missing = true, *missing
		}
		f.byName[name] = len(f.cols)
		f.cols = append(f.cols, c)
	}
	return f, rows.Err()
}

// partitionOfCaptured reports whether the table oid is a partition of a
// captured table (false when the catalog cannot say, within
// partitionTimeout or before ctx ends).
func (st *stream) partitionOfCaptured(ctx context.Context, oid uint32) bool {
	roots := make([]uint32, 0, len(st.tables))
	for root := range st.tables {
		roots = append(roots, root)
	}
	ctx, cancel := context.WithTimeout(ctx, partitionTimeout)
	defer cancel()
	var in bool
	err := st.sql.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_partition_ancestors($1) a WHERE a.relid = ANY ($2::oid[]))`,
		oid, roots).Scan(&in)
	return err == nil && in
}

// newestVersion returns the newest recorded schema version of a table, or nil.
func (st *stream) newestVersion(oid uint32) (*store.Relation, error) {
	var found *store.Relation
	err := st.s.db.View(func(r *store.Reader) error {
		all, err := r.Relations()
		if err != nil {
			return err
		}
		for k, v := range all {
			if k.OID == oid && (found == nil || k.LSN > found.Key.LSN) {
				found = v
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read schema history: %w", err)
	}
	return found, nil
}

// relationFor returns the decoder of a table's change; captured is false
// for a table passed over (not configured). One map lookup serves the
// captured tables, on every change.
func (st *stream) relationFor(oid uint32) (rd *relationDecoder, captured bool, err error) {
	if rd, ok := st.rels[oid]; ok {
		return rd, true, nil
	}
	if st.ignored[oid] {
		// A table not configured (never in rels): counted, passed over.
		st.s.changesIgnored.Add(1)
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("change for relation %d before its Relation message", oid)
}

// add adds a change to the current transaction, or to the current stream
// block's buffer when streaming.
func (st *stream) add(subXid uint32, c store.Change) error {
	if st.trk != nil && c.Relation.OID == st.trk.oid {
		if st.inStream {
			st.trk.note(st.rels, st.streamXid, subXid, &c)
		} else {
			st.trk.note(st.rels, st.txn.Xid, st.txn.Xid, &c)
		}
	}
	size := store.ValuesBytes(c.New) + store.ValuesBytes(c.Old)
	if st.inStream {
		if len(st.buf) > 0 && (subXid != st.bufSubXid || len(st.buf) >= spillChanges || st.bufBytes+size > spillBytes) {
			if err := st.flushStream(); err != nil {
				return err
			}
		}
		if len(st.buf) == 0 {
			st.bufBytes = 0
		}
		st.bufSubXid = subXid
		st.buf = append(st.buf, c)
		st.bufBytes += size
		return nil
	}
	if !st.inTxn {
		return errors.New("change outside a transaction")
	}
	if len(st.txn.Changes) == 0 {
		st.txnBytes = 0
	}
	st.txn.Changes = append(st.txn.Changes, c)
	if st.txnBytes += size; len(st.txn.Changes) >= spillChanges || st.txnBytes >= spillBytes {
		st.spilled = true
		changes := st.txn.Changes
		st.txn.Changes = nil
		return st.s.writer.send(writeOp{kind: opSpoolAppend, spool: store.SpoolID(st.txn.Xid), subXid: st.txn.Xid, changes: changes,
			weight: heldWeight(changes, st.txnBytes)})
	}
	return nil
}

// heldWeight is the writer's weight of an operation of the changes the
// stream held, whose values hold size bytes (txnBytes, bufBytes), counted
// as add took them rather than again (opWeight).
func heldWeight(changes []store.Change, size int) int64 {
	if len(changes) == 0 {
		size = 0 // the count of changes held before
	}
	return 1 + weightOf(len(changes), size)
}

// flushStream spools the buffered changes of the current stream block.
func (st *stream) flushStream() error {
	if len(st.buf) == 0 {
		return nil
	}
	changes := st.buf
	st.buf = nil
	return st.s.writer.send(writeOp{kind: opSpoolAppend, spool: store.SpoolID(st.streamXid), subXid: st.bufSubXid, changes: changes,
		weight: heldWeight(changes, st.bufBytes)})
}

// commit queues the transaction that just committed, unless it is at or
// below what is already queued (PostgreSQL resending after a restart).
func (st *stream) commit(m *pglogrepl.CommitMessage) error {
	st.inTxn = false
	h := st.txn.TxnHeader
	h.CommitLSN, h.EndLSN, h.CommitTime = store.LSN(m.CommitLSN), store.LSN(m.TransactionEndLSN), m.CommitTime
	st.s.lastCommitMicros.Store(m.CommitTime.UnixMicro())
	id := store.SpoolID(h.Xid)
	if st.trk != nil {
		st.trk.commit(h.Xid, h.EndLSN)
	}
	if h.EndLSN <= st.lastQueued {
		st.txn = store.Txn{}
		if st.spilled {
			return st.s.writer.send(writeOp{kind: opSpoolAbort, spool: id, subXid: h.Xid})
		}
		return nil
	}
	st.lastQueued = h.EndLSN
	st.s.txnsQueued.Add(1)
	if st.spilled {
		if len(st.txn.Changes) > 0 {
			if err := st.s.writer.send(writeOp{kind: opSpoolAppend, spool: id, subXid: h.Xid, changes: st.txn.Changes,
				weight: heldWeight(st.txn.Changes, st.txnBytes)}); err != nil {
				return err
			}
		}
		st.txn = store.Txn{}
		return st.s.writer.send(writeOp{kind: opSpoolCommit, spool: id, header: h})
	}
	txn := &store.Txn{TxnHeader: h, Changes: st.txn.Changes}
	st.txn = store.Txn{}
	return st.s.writer.send(writeOp{kind: opAppendTxn, txn: txn, weight: heldWeight(txn.Changes, st.txnBytes)})
}

// streamCommit queues a streamed transaction from its spool.
func (st *stream) streamCommit(m *pglogrepl.StreamCommitMessageV2) error {
	delete(st.open, m.Xid)
	id := store.SpoolID(m.Xid)
	h := store.TxnHeader{Xid: m.Xid, CommitLSN: store.LSN(m.CommitLSN), EndLSN: store.LSN(m.TransactionEndLSN), CommitTime: m.CommitTime}
	st.s.lastCommitMicros.Store(m.CommitTime.UnixMicro())
	if st.trk != nil {
		st.trk.commit(m.Xid, h.EndLSN)
	}
	if h.EndLSN <= st.lastQueued {
		return st.s.writer.send(writeOp{kind: opSpoolAbort, spool: id, subXid: m.Xid})
	}
	st.lastQueued = h.EndLSN
	st.s.txnsQueued.Add(1)
	return st.s.writer.send(writeOp{kind: opSpoolCommit, spool: id, header: h})
}
