// Package source captures committed changes from PostgreSQL through logical
// replication (pgoutput, protocol 2 with streaming) into the queue of the
// state file, and acknowledges to PostgreSQL only what the queue has made
// durable.
package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/store"
)

// Source is the replication source of one agent.
type Source struct {
	cfg    Config
	db     *store.DB
	log    *slog.Logger
	writer *queueWriter

	// Positions, updated per message without a lock.
	confirmedLSN, receivedLSN, serverWALEnd atomic.Uint64
	lastCommitMicros                        atomic.Int64
	// Counts since start: transactions queued, row changes received, and
	// row changes of tables not in Config.Tables passed over.
	txnsQueued, changesReceived, changesIgnored atomic.Int64
	// catchingUp is what OnCatchUp was last told (the capture goroutine's
	// own); backlogEnd is the server's WAL end when it last turned false.
	catchingUp bool
	backlogEnd atomic.Uint64
	// beatBy is when the capture loop promises to beat again (Unix
	// nanoseconds); see Alive.
	beatBy atomic.Int64

	// noted holds what was logged once per table OID: a table passed over,
	// or a captured table PostgreSQL names differently now.
	noted sync.Map

	// beforeCommit, when set, is called before each commit of the state
	// file; an error it returns fails the commit as a crash there would
	// (tests only).
	beforeCommit func() error
	// failpoint holds the points a crash is simulated at, compiled in
	// only for tests (failpoints_on.go).
	failpoint failpoints
	// visibleWait, when set, bounds stream.awaitCommitVisible instead of
	// visibleWait.
	visibleWait time.Duration

	// handoff is shared by the backfill and the stream
	// (backfill_track.go); resyncs carries Resync's requests to the
	// backfill.
	handoff *handoff
	resyncs chan backfill.Request

	mu     sync.Mutex
	status Status
	// tables is what Tables reports, by the name a table is captured as.
	tables map[string]*TableStatus
	// backfills are the copies of tables, by the name a table is
	// captured as.
	backfills map[string]BackfillStatus
	// backfillNoted is closed, and made anew, when backfills changes
	// (see BackfillsChanged).
	backfillNoted chan struct{}
	ready         chan struct{}
	once          sync.Once
	connected     chan struct{}
	connectedOnce sync.Once
}

// catchUpBytes is how far behind the server's WAL capture must be to count
// as catching up. At a steady load capture is within a few transactions of
// the server; a backlog of even a few MB (a restart, a burst) is drained
// first: the queue is committed less often, and the later stages give
// capture the CPU.
const catchUpBytes = 1 << 20

// CatchingUp reports whether capture is draining a backlog: the server's WAL
// ends more than catchUpBytes past what was received. Until the server has
// said where its WAL ends, it assumes the worst.
func (s *Source) CatchingUp() bool {
	end := s.serverWALEnd.Load()
	return end == 0 || end > s.receivedLSN.Load()+catchUpBytes
}

// BacklogEnd returns where the server's WAL ended when capture last caught
// up with a backlog (zero before it first did): the transactions that end
// at or before it were committed before then and came in that backlog,
// however late capture receives the last of them (CatchingUp turns false
// with up to catchUpBytes still to come).
func (s *Source) BacklogEnd() store.LSN { return store.LSN(s.backlogEnd.Load()) }

// noteCatchUp tells Config.Threads when CatchingUp changed. The capture
// goroutine calls it after it moves the positions.
func (s *Source) noteCatchUp() {
	if c := s.CatchingUp(); c != s.catchingUp {
		s.catchingUp = c
		if !c {
			s.backlogEnd.Store(s.serverWALEnd.Load())
		}
		if s.cfg.Threads != nil {
			s.cfg.Threads.CatchUp(c)
		}
	}
}

// Status describes the source's connection and positions.
type Status struct {
	// State is "starting", "snapshot", "streaming" or "disconnected".
	State string
	// Since is when State last changed.
	Since time.Time
	// DurableLSN is the checkpoint fsync'd in the queue.
	DurableLSN store.LSN
	// ConfirmedLSN is the flush position last sent to PostgreSQL.
	ConfirmedLSN store.LSN
	// ReceivedLSN is the newest WAL position received.
	ReceivedLSN store.LSN
	// ServerWALEnd is the server's WAL end from its last message.
	ServerWALEnd store.LSN
	// LastCommitTime is the commit time of the newest transaction received.
	LastCommitTime time.Time
	// LastError is the last connection error, if any.
	LastError string
	// Transactions counts the transactions queued since start; Changes
	// counts the row changes received, including those of streamed
	// transactions that were later aborted, and the snapshot's rows.
	Transactions, Changes int64
	// IgnoredChanges counts the row changes passed over since start
	// because their table is not in Config.Tables (a publication shared
	// with other consumers, or FOR ALL TABLES).
	IgnoredChanges int64
}

// New returns a source that writes into db.
func New(cfg Config, db *store.DB) *Source {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	s := &Source{cfg: cfg, db: db, log: log, ready: make(chan struct{}), connected: make(chan struct{}),
		status: Status{State: "starting", Since: time.Now()}, catchingUp: true,
		handoff: &handoff{}, resyncs: make(chan backfill.Request), backfills: map[string]BackfillStatus{}, backfillNoted: make(chan struct{})}
	if s.cfg.Backfill == nil {
		s.cfg.Backfill = s.askBackfill
	}
	s.beat(startupGrace)
	return s
}

// startupGrace is how long the source may take from New to its first beat
// and for one connection attempt (connect, preflight and setup).
const startupGrace = 2 * time.Minute

// beat records that the capture loop is alive and promises the next beat
// within d.
func (s *Source) beat(d time.Duration) {
	s.beatBy.Store(time.Now().Add(d).UnixNano())
}

// Alive reports whether the capture loop has kept its last promise to beat:
// false means it is stuck (a hung call, a deadlock), not merely
// disconnected or waiting to reconnect.
func (s *Source) Alive() bool {
	return time.Now().UnixNano() <= s.beatBy.Load()
}

// Connected is closed once the source is connected to PostgreSQL with its
// queue open: when the initial snapshot or streaming starts.
func (s *Source) Connected() <-chan struct{} { return s.connected }

// Status returns a copy of the current status.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	if s.writer != nil {
		st.DurableLSN = s.writer.Durable()
	}
	st.ConfirmedLSN = store.LSN(s.confirmedLSN.Load())
	st.ReceivedLSN = store.LSN(s.receivedLSN.Load())
	st.ServerWALEnd = store.LSN(s.serverWALEnd.Load())
	st.Transactions, st.Changes = s.txnsQueued.Load(), s.changesReceived.Load()
	st.IgnoredChanges = s.changesIgnored.Load()
	if us := s.lastCommitMicros.Load(); us != 0 {
		st.LastCommitTime = time.UnixMicro(us)
	}
	return st
}

// Ready is closed once the source streams from PostgreSQL for the first time.
func (s *Source) Ready() <-chan struct{} { return s.ready }

func (s *Source) setState(state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status.State != state {
		s.status.State = state
		s.status.Since = time.Now()
	}
	switch state {
	case "streaming":
		s.once.Do(func() { close(s.ready) })
		fallthrough
	case "snapshot", "paused":
		s.connectedOnce.Do(func() { close(s.connected) })
	}
}

func (s *Source) update(fn func(st *Status)) {
	s.mu.Lock()
	fn(&s.status)
	s.mu.Unlock()
}

// Reconnect backoff bounds.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Run captures until ctx is cancelled (a clean shutdown returns nil) or an
// error needs the operator (a *FatalError, or a failure of the state file).
// Lost connections are retried with capped exponential backoff; the log says
// so once per change of state, not once per attempt.
func (s *Source) Run(ctx context.Context) error {
	var checkpoint store.LSN
	if err := s.db.View(func(r *store.Reader) error {
		var err error
		checkpoint, err = r.Checkpoint()
		return err
	}); err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	var onDurable func()
	if s.cfg.Durable != nil {
		onDurable = s.cfg.Durable.Notify
	}
	w := newQueueWriter(s.db, s.log, checkpoint, onDurable, s.CatchingUp)
	if s.cfg.Threads != nil {
		w.onCatchUpCommit = s.cfg.Threads.CatchUpCommit
	}
	w.beforeCommit = s.beforeCommit
	s.mu.Lock()
	s.writer = w
	s.mu.Unlock()
	go w.run(ctx)

	err := s.loop(ctx)
	cerr := w.close()
	switch {
	case errors.Is(cerr, errStoppedWhileFull) && ctx.Err() != nil:
		// A stop is a stop, full disk or not: nothing unwritten was
		// acknowledged.
		s.log.Warn("stopped while the state disk is full; PostgreSQL sends what was not written again at the next start")
	case err == nil && cerr != nil:
		err = cerr
	}
	return err
}

func (s *Source) loop(ctx context.Context) error {
	// Full jitter keeps a fleet of branch agents from reconnecting in step.
	retry := backoff.New(backoff.Policy{Min: minBackoff, Max: maxBackoff, Factor: 2, Jitter: backoff.Full})
	var downSince time.Time
	attempts := 0
	for {
		connected := false
		s.beat(startupGrace)
		err := s.session(ctx, func() {
			connected = true
			if !downSince.IsZero() {
				s.log.Info("reconnected to PostgreSQL", "down_seconds", time.Since(downSince).Round(time.Millisecond).Seconds(), "attempts", attempts)
				downSince = time.Time{}
			}
			attempts = 0
			retry.Reset()
		})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			continue // the session asked to start over at once
		}
		if IsFatal(err) || s.writer.failed() != nil {
			s.setState("stopped")
			return err
		}
		s.update(func(st *Status) { st.LastError = err.Error() })
		s.setState("disconnected")
		attempts++
		if downSince.IsZero() || connected {
			downSince = time.Now()
			msg := "lost PostgreSQL; retrying with backoff"
			if errors.Is(err, errNotVisible) {
				msg = "waiting for a committed transaction to become visible; decoding it again after a backoff"
			}
			s.log.Warn(msg, "err", err, "max_backoff", maxBackoff.String())
		}
		sleep := retry.Next()
		s.beat(sleep + startupGrace)
		if backoff.Sleep(ctx, sleep) != nil {
			return nil
		}
	}
}

// session runs one connection's worth of capture: preflight, setup, the
// initial snapshot when it is due, and streaming. onStreaming is called when
// replication has started.
func (s *Source) session(ctx context.Context, onStreaming func()) error {
	conn, err := s.cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	ids, err := s.loadIdentities(ctx)
	if err != nil {
		return err
	}
	captured, fresh, err := s.resolveTables(ctx, conn, ids)
	if err != nil {
		return err
	}
	// The checks and the publication go by what PostgreSQL calls the
	// tables now.
	pcfg := s.cfg
	pcfg.Tables = currentNames(captured)
	checks, err := Preflight(ctx, conn, pcfg)
	if err != nil {
		return err
	}
	if bad := failed(checks); len(bad) > 0 {
		return &FatalError{Err: &PreflightError{Failed: bad}}
	}
	for _, c := range captured {
		if c.oid == 0 {
			return fatalf("table %s does not exist in PostgreSQL (check source.tables)", c.configured)
		}
	}

	repl, err := s.cfg.connectReplication(ctx)
	if err != nil {
		return err
	}
	defer repl.Close(context.WithoutCancel(ctx))

	sys, err := pglogrepl.IdentifySystem(ctx, repl)
	if err != nil {
		return fmt.Errorf("identify system: %w", err)
	}
	var state *store.SlotState
	if err := s.db.View(func(r *store.Reader) error {
		state, err = r.SlotState()
		return err
	}); err != nil {
		return err
	}
	if state != nil && (state.SystemID != sys.SystemID || state.Database != sys.DBName || state.Slot != s.cfg.Slot) {
		return fatalf("state in %s belongs to slot %q of database %q on server %s, not slot %q of database %q on server %s; point state_dir at a new directory to start over",
			s.db.Path(), state.Slot, state.Database, state.SystemID, s.cfg.Slot, sys.DBName, sys.SystemID)
	}

	created, added, err := ensurePublication(ctx, conn, pcfg)
	if err != nil {
		return err
	}
	if created {
		s.log.Info("created publication", "publication", s.cfg.Publication)
	}
	for _, t := range added {
		s.log.Info("added table to publication", "publication", s.cfg.Publication, "table", t.String())
	}

	slot, err := readSlot(ctx, conn, s.cfg.Slot)
	if err != nil {
		return err
	}
	if state != nil && !state.SnapshotDone {
		s.log.Warn("setup or initial snapshot was interrupted; starting it over", "slot", s.cfg.Slot)
		if slot.exists {
			if err := pglogrepl.DropReplicationSlot(ctx, repl, s.cfg.Slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
				return fmt.Errorf("drop interrupted slot: %w", err)
			}
			slot = slotInfo{}
		}
		if err := s.writer.send(writeOp{kind: opClearState}); err != nil {
			return err
		}
		if err := s.writer.sync(ctx); err != nil {
			return err
		}
		state = nil
		// The identities went with the rest: record those of the
		// captured tables again.
		fresh = fresh[:0]
		for _, id := range ids {
			if slices.ContainsFunc(captured, func(c *capturedTable) bool { return c.identity == id.Table }) {
				fresh = append(fresh, id)
			}
		}
		for _, c := range captured {
			if !slices.ContainsFunc(fresh, func(id *store.TableIdentity) bool { return id.Table == c.identity }) {
				fresh = append(fresh, &store.TableIdentity{Table: c.identity, Generations: []store.TableGeneration{{OID: c.oid, Generation: 1}}})
			}
		}
	}
	if len(fresh) > 0 {
		// A table's identity is recorded before anything of it is
		// captured.
		if err := s.writer.send(writeOp{kind: opIdentities, identities: fresh}); err != nil {
			return err
		}
	}

	types := typemap.New()
	rels := map[uint32]*relationDecoder{}
	if state == nil {
		if slot.exists {
			return fatalf("replication slot %q already exists, but %s has no record of it, so the changes it holds would be skipped; drop it if nothing else uses it: %s -- or use another source.slot",
				s.cfg.Slot, s.db.Path(), dropSlotSQL(s.cfg.Slot))
		}
		if err := s.createSlot(ctx, conn, repl, sys, captured, types, rels); err != nil {
			return err
		}
	} else if err := s.checkSlot(slot, sys.DBName); err != nil {
		return err
	}

	if err := s.writer.send(writeOp{kind: opDiscardSpools}); err != nil {
		return err
	}
	if err := s.writer.sync(ctx); err != nil {
		return err
	}
	start := s.writer.Durable()
	pub := pgx.Identifier{s.cfg.Publication}.Sanitize()
	err = pglogrepl.StartReplication(ctx, repl, s.cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: []string{
			"proto_version '2'",
			"publication_names '" + strings.ReplaceAll(pub, "'", "''") + "'",
			"streaming 'on'",
			// The catalog watcher's messages (tableMessagePrefix) and
			// the backfill's watermarks (backfill.Prefix).
			"messages 'true'",
		},
	})
	if err != nil {
		return fmt.Errorf("start replication: %w", err)
	}
	s.log.Info("streaming from PostgreSQL", "slot", s.cfg.Slot, "from", start.String(),
		"logical_decoding_work_mem", cmp.Or(DecodingWorkMem(s.cfg.LogicalDecodingWorkMem), "server"))
	tables := make(map[uint32]*capturedTable, len(captured))
	for _, c := range captured {
		tables[c.oid] = c
	}
	if err := s.planBackfills(ctx, tables); err != nil {
		return err
	}
	st := &stream{s: s, conn: repl, sql: conn, types: types, rels: rels, tables: tables, ignored: map[uint32]bool{}, described: map[uint32]string{},
		passedOver: map[uint32]*pglogrepl.RelationMessage{}, noted: map[uint32]tableState{}, lastQueued: start, received: start, open: map[uint32]bool{}}
	s.receivedLSN.Store(uint64(start))
	// Know how far behind the server this session starts before saying
	// it streams: later stages hold back while capture catches up.
	st.sampleServerWAL(ctx)
	// The partitions the watcher acts on the changes of: as recorded,
	// or for a table with no record, as the stream starts.
	leaves, err := s.seedPartitions(ctx, conn, captured)
	if err != nil {
		return err
	}
	// The enum labels the tables' rows were captured under, as recorded:
	// a label renamed while capture was stopped is seen at the first look.
	var labels map[uint32][]string
	if err := s.db.View(func(r *store.Reader) (err error) { labels, err = r.EnumLabels(); return err }); err != nil {
		return fmt.Errorf("read enum labels: %w", err)
	}
	s.setState("streaming")
	s.update(func(st *Status) { st.LastError = "" })
	onStreaming()
	// The catalog watcher and the backfill run beside the stream, each
	// on a connection of its own, and are done before the session
	// returns.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(wctx, captured, leaves, labels)
	}()
	backfilled := make(chan error, 1)
	// A read deadline in the past ends the stream's wait for a message
	// (a timeout, which leaves the connection usable).
	s.handoff.setWake(func() { repl.Conn().SetReadDeadline(time.Now()) })
	defer s.handoff.setWake(nil)
	order := s.backfillOrder(tables)
	go func() { backfilled <- s.runBackfills(wctx, order) }()
	err = st.run(ctx)
	stopWatch()
	<-watched
	if berr := <-backfilled; err == nil && berr != nil {
		err = berr
	}
	return err
}

// createSlot creates the replication slot and, when configured, copies the
// initial snapshot from the slot's exported snapshot. The state records the
// setup as pending first, so that a crash part-way starts it over cleanly.
func (s *Source) createSlot(ctx context.Context, conn *pgx.Conn, repl replConn, sys pglogrepl.IdentifySystemResult, captured []*capturedTable, types *typemap.Map, rels map[uint32]*relationDecoder) error {
	state := &store.SlotState{SystemID: sys.SystemID, Database: sys.DBName, Slot: s.cfg.Slot, Publication: s.cfg.Publication}
	if err := s.writer.send(writeOp{kind: opSlotState, slot: state}); err != nil {
		return err
	}
	if err := s.writer.sync(ctx); err != nil {
		return err
	}
	action := "NOEXPORT_SNAPSHOT"
	if s.cfg.Snapshot {
		action = "EXPORT_SNAPSHOT"
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	if err != nil {
		return fmt.Errorf("create replication slot %s: %w", s.cfg.Slot, err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("create replication slot %s: %w", s.cfg.Slot, err)
	}
	s.log.Info("created replication slot", "slot", s.cfg.Slot, "consistent_point", res.ConsistentPoint)
	state.ConsistentPoint = store.LSN(cp)
	done := *state
	done.SnapshotDone = true
	if s.cfg.Snapshot {
		s.setState("snapshot")
		if err := s.writer.send(writeOp{kind: opCheckpoint, lsn: state.ConsistentPoint}); err != nil {
			return err
		}
		// The snapshot joins the queue in the same write as the record
		// that it is done: were the record a write of its own, a crash
		// between the two would start the snapshot over on a new slot
		// after the first one could have been applied.
		if err := s.copySnapshot(ctx, conn, res.SnapshotName, &done, captured, types, rels); err != nil {
			return err
		}
		if err := s.failpoint.fail("snapshot-queued"); err != nil {
			return err
		}
	} else {
		for _, op := range []writeOp{{kind: opCheckpoint, lsn: state.ConsistentPoint}, {kind: opSlotState, slot: &done, markCopies: true}} {
			if err := s.writer.send(op); err != nil {
				return err
			}
		}
	}
	return s.writer.sync(ctx)
}

// checkSlot compares an existing slot with the state's checkpoint.
func (s *Source) checkSlot(slot slotInfo, database string) error {
	checkpoint := s.writer.Durable()
	switch {
	case !slot.exists:
		return fatalf("replication slot %q no longer exists (dropped while the agent was stopped?); changes after %s cannot be captured any more. To start over with a new snapshot, stop the agent, move %s away, and start it again",
			s.cfg.Slot, checkpoint, s.db.Path())
	case slot.walStatus == "lost":
		return fatalf("replication slot %q was invalidated by PostgreSQL: it needed more WAL than max_slot_wal_keep_size keeps, and the changes after %s are gone from the server. Raise max_slot_wal_keep_size (or set it to -1) so that outages this long fit; then, to start over with a new snapshot, stop the agent, drop the slot (%s), move %s away, and start it again",
			s.cfg.Slot, checkpoint, dropSlotSQL(s.cfg.Slot), s.db.Path())
	case slot.plugin != "pgoutput":
		return fatalf("replication slot %q uses plugin %q, not pgoutput", s.cfg.Slot, slot.plugin)
	case slot.database != database:
		return fatalf("replication slot %q belongs to database %q, not %q", s.cfg.Slot, slot.database, database)
	case slot.active:
		return errors.New("replication slot " + s.cfg.Slot + " is in use by another connection (another agent on the same slot?)")
	case slot.confirmedFlush > checkpoint:
		return fatalf("replication slot %q has confirmed %s, beyond this agent's checkpoint %s: the slot was recreated or advanced by someone else, and the changes in between are not in the queue. To start over with a new snapshot, stop the agent, drop the slot (%s), move %s away, and start it again",
			s.cfg.Slot, slot.confirmedFlush, checkpoint, dropSlotSQL(s.cfg.Slot), s.db.Path())
	}
	return nil
}
