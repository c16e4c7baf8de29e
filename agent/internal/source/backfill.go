package source

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/store"
)

// An online backfill copies a table's existing rows into the queue while the
// replication stream keeps flowing, with no lock beyond a SELECT's, no
// second slot, and no pause for the other tables (the DBLog method, which
// Debezium's incremental snapshots use too). The table is copied in chunks
// of Config.BackfillChunkRows rows, in key order (keyset pagination on the
// primary key or the replica identity index), or by ctid ranges for a table
// without either. For each chunk, on its own SQL connection, the
// backfiller:
//
//  1. takes a REPEATABLE READ snapshot and notes which transactions it
//     sees (pg_current_snapshot);
//  2. writes a low watermark into the WAL (pg_logical_emit_message,
//     non-transactional: decoded at its own position);
//  3. reads the chunk with COPY (SELECT ...) TO STDOUT, decoded like the
//     initial snapshot;
//  4. hands the rows to the stream through memory (one chunk at most) and
//     writes a high watermark.
//
// From the moment the backfill begins, the stream notes the keys of the
// table's rows that each transaction changes (backfill_track.go). At the
// high watermark it queues the chunk's rows as one transaction just after
// the watermark's position, as store.OpSnapshot changes, leaving out every
// row a change replaces: a change of a transaction that committed after
// the low watermark, or that the copy did not see. Those changes are
// queued before the chunk, so the row a transaction changed while it was
// copied ends with the transaction's value; the other rows are as the copy
// saw them, and every later change is queued after them. The chunk and
// the backfill's progress (store.Backfill: the last key queued) are one
// write of the state file: a restart resumes after the last chunk queued,
// and a chunk whose high watermark was not handled is copied again.
//
// A chunk is copied again, later, when what the stream noted cannot say
// which rows to leave out: too many keys (maxTrackedKeys), a truncate, an
// update that left TOAST values out, changes made before the tracking
// began. A table copied by ctid ranges has no key to tell its rows by:
// its copy starts with a truncate, and starts over whenever a transaction
// changes the table while it is copied (or after a restart), so that no
// row is both copied and queued as a change.

// Reasons a table is copied (store.Backfill.Reason).
const (
	reasonSnapshot = "initial snapshot"
	// ReasonAdded is the reason of a table configured after the first
	// start, or whose copy never finished.
	ReasonAdded = "added"
	// ReasonResync is the reason of a copy asked for by Resync.
	ReasonResync = "resync"
)

// DefaultBackfillChunkRows is the number of rows a backfill copies per
// chunk when Config.BackfillChunkRows is zero.
const DefaultBackfillChunkRows = 16384

// maxChunkBytes is the most memory a chunk's decoded rows take (values,
// the COPY text they point into, changes and keys): a chunk of wide rows
// holds fewer rows than configured. A chunk paged by key ends with the row
// that reaches it, the rest of its COPY being read and dropped, and the
// chunks after it read as many rows as the last one's take that much.
const maxChunkBytes = 16 << 20

// firstChunkRows is the most rows the first chunk of a copy reads, before
// a chunk tells how much memory the table's rows take.
const firstChunkRows = 1024

// maxTuplesPerPage is the most rows a heap page of 8 kB holds
// (MaxHeapTuplesPerPage): a chunk of ctid ranges spans at most
// chunk rows / maxTuplesPerPage pages, so that it holds no more rows.
const maxTuplesPerPage = 291

// backfillLogEvery is how often a running backfill logs its progress.
const backfillLogEvery = 10 * time.Second

// restartsToReport is how many times a copy by ctid ranges starts over
// before the log says, at ERROR, that it cannot finish while the table
// keeps changing, and what would let it.
const restartsToReport = 5

// chunkWindow is one chunk on its way from the backfiller to the stream.
type chunkWindow struct {
	id  string
	oid uint32
	// rel is the schema version the rows follow (its key LSN unset),
	// snap the snapshot the copy saw, and truncate tells that the chunk
	// starts by truncating the table.
	rel      *store.Relation
	snap     pgSnapshot
	truncate bool

	// Set by the backfiller before the high watermark (ready): the rows,
	// their keys (none for ctid ranges), and the progress once queued.
	ready bool
	rows  []store.Change
	keys  rowKeys
	prog  *store.Backfill
	// recycle, if set, gives the chunk's memory (rows, keys and what
	// they point into) back once the chunk is durable
	// (tuning_chunk_memory.go).
	recycle func()

	// Set by the stream: where the low watermark is, and the truncate
	// of a chunk that truncates first.
	low, truncAt store.LSN
	lowSeen      bool
	// redo says why the chunk is copied again, found at its low
	// watermark.
	redo   string
	result chan chunkResult
}

// chunkResult is what the stream did with a chunk.
type chunkResult struct {
	queued bool
	// rows were queued; replaced were left out for the stream's changes.
	rows, replaced int
	// redo says why the chunk is to be copied again; restart why a copy
	// by ctid ranges starts over.
	redo, restart string
}

// handoff is what the backfiller and the stream share, under mu.
type handoff struct {
	mu sync.Mutex
	// track is the OID of the table whose changes the stream notes (zero:
	// none), by keyNames; trackGen counts the requests, and tracked,
	// when set, receives the position from which the stream tracks.
	track    uint32
	keyNames []string
	trackGen uint64
	tracked  chan store.LSN
	// wins are the chunks between their watermarks, oldest first: a
	// chunk's high watermark is written in the round trip that writes
	// the next chunk's low watermark.
	wins []*chunkWindow
	// wake, set while a session streams, interrupts the stream's wait
	// for its next message, so that it takes a request at once.
	wake func()
}

// setWake sets (nil: clears) how to wake the stream.
func (h *handoff) setWake(wake func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wake = wake
}

// startTracking asks the stream to note the changes of table oid, and
// returns where it will receive the position it tracks from.
func (h *handoff) startTracking(oid uint32, keyNames []string) <-chan store.LSN {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan store.LSN, 1)
	h.track, h.keyNames, h.tracked = oid, keyNames, ch
	h.trackGen++
	if h.wake != nil {
		h.wake()
	}
	return ch
}

// stopTracking asks the stream to stop noting changes.
func (h *handoff) stopTracking() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.track, h.keyNames, h.tracked, h.wins = 0, nil, nil, nil
	h.trackGen++
}

// open adds a chunk's window before its low watermark is written.
func (h *handoff) open(win *chunkWindow) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wins = append(h.wins, win)
}

// find returns the window of the watermark w, or nil.
func (h *handoff) find(w watermark) *chunkWindow {
	for _, win := range h.wins {
		if win.id == w.ID && win.oid == w.OID {
			return win
		}
	}
	return nil
}

// remove removes a chunk's window, under mu, and reports whether it was
// there: the stream takes a window at its high watermark, the backfiller
// withdraws one it gives up.
func (h *handoff) remove(win *chunkWindow) bool {
	n := len(h.wins)
	h.wins = slices.DeleteFunc(h.wins, func(w *chunkWindow) bool { return w == win })
	return len(h.wins) < n
}

// BackfillStatus describes the copy of one table.
type BackfillStatus struct {
	Table, Reason string
	// Rows and Chunks count what is queued.
	Rows, Chunks int64
	// Since is when the copy began; Finished when it ended.
	Since, Finished time.Time
	// Running is set while the table is being copied; Done once it is.
	Running, Done bool
	// Restarts counts the times a copy by ctid ranges (a table without a
	// key) started over in this session because a transaction changed
	// the table while it was copied.
	Restarts int64
}

// Backfills returns the copies of tables pending, running or finished
// since the source started, by the name the tables are captured as.
func (s *Source) Backfills() []BackfillStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BackfillStatus, 0, len(s.backfills))
	for _, b := range s.backfills {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b BackfillStatus) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// noteBackfill records a copy's progress for Backfills, and the times it
// started over.
func (s *Source) noteBackfill(bf *store.Backfill, running bool, restarts int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backfills[bf.Table] = BackfillStatus{Table: bf.Table, Reason: bf.Reason, Rows: bf.Rows, Chunks: bf.Chunks,
		Since: bf.Started, Finished: bf.Finished, Running: running && !bf.Done, Done: bf.Done, Restarts: restarts}
	close(s.backfillNoted)
	s.backfillNoted = make(chan struct{})
}

// Copies returns the tables, as their Delta tables are named, that a
// backfill copies now at full speed: none when Config.BackfillRowsPerSecond
// paces the copies.
func (s *Source) Copies() []string {
	if s.cfg.BackfillRowsPerSecond > 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, b := range s.backfills {
		if b.Running {
			out = append(out, b.Table)
		}
	}
	return out
}

// BackfillsChanged returns a channel that is closed when Backfills next
// changes: a copy's progress, or its end, is noted. Who waits for a copy
// asks for the channel before reading Backfills, so as to miss no change.
func (s *Source) BackfillsChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backfillNoted
}

// resyncRequest asks the running backfiller to copy a table again: the
// table captured under the name table (configured, or its Delta tables'),
// or with oid set, the PostgreSQL table oid as a new generation of the
// table its Delta tables call table. truncate records a truncate first;
// with restart, or truncate, a copy under way starts over.
type resyncRequest struct {
	table    string
	oid      uint32
	reason   string
	truncate bool
	restart  bool
	done     chan error
}

// ErrNotCapturing is returned by Resync while capture is not connected.
var ErrNotCapturing = errors.New("capture is not connected to PostgreSQL")

// Resync copies a configured table again: it records a truncate of the
// table, queued at the first chunk's low watermark, and a backfill of
// every row the table holds now, which goes on after a restart. It returns
// once both are recorded in the state file; Backfills reports the copy's
// progress. reason is recorded with it (ReasonResync); table is
// "schema.table" as configured, or as its Delta tables are named.
func (s *Source) Resync(ctx context.Context, table, reason string) error {
	return s.request(ctx, resyncRequest{table: table, reason: reason, truncate: true})
}

// askBackfill is the default Config.Backfill: it records the copy of the
// PostgreSQL table oid as the table captured as table, whose truncate the
// caller queued (for ReasonKeysRewritten and ReasonEnumRenamed, the copy's
// own), and returns once the copy is recorded.
func (s *Source) askBackfill(ctx context.Context, table string, oid uint32, reason string) error {
	truncate := reason == ReasonKeysRewritten || reason == ReasonEnumRenamed
	return s.request(ctx, resyncRequest{table: table, oid: oid, reason: reason,
		truncate: truncate, restart: truncate || reason == ReasonRewritten})
}

// request hands req to the running backfiller and waits for its answer.
func (s *Source) request(ctx context.Context, req resyncRequest) error {
	req.done = make(chan error, 1)
	table := req.table
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	select {
	case s.resyncs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-wait.C:
		return fmt.Errorf("resync %s: %w", table, ErrNotCapturing)
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// planBackfills records, at a session's start, a backfill for each
// configured table whose existing rows are not copied yet (when
// Config.Snapshot asks for copies), and reports the copies there are.
//
// State files from before backfills were recorded have no record of what
// the initial snapshot copied. The initial snapshot records its tables'
// schema versions at exactly the slot's consistent point, and a table
// added to the publication later is first described by the stream past
// it (its changes can only come after the ALTER PUBLICATION, itself after
// the slot): in such a state, a table with a schema version at or before
// the consistent point counts as copied, once, and is recorded so.
func (s *Source) planBackfills(ctx context.Context, tables map[uint32]*capturedTable) error {
	var recs map[uint32]*store.Backfill
	var rels map[store.RelationKey]*store.Relation
	var slot *store.SlotState
	var marked bool
	err := s.db.View(func(r *store.Reader) (err error) {
		if recs, err = r.Backfills(); err != nil {
			return err
		}
		if rels, err = r.Relations(); err != nil {
			return err
		}
		if slot, err = r.SlotState(); err != nil {
			return err
		}
		marked, err = r.CopiesRecorded()
		return err
	})
	if err != nil {
		return fmt.Errorf("read backfills: %w", err)
	}
	op := writeOp{kind: opBackfill, markCopies: !marked}
	now := time.Now().UTC()
	if !marked && slot != nil {
		for oid, c := range tables {
			if recs[oid] != nil {
				continue
			}
			for k := range rels {
				if k.OID == oid && k.LSN <= slot.ConsistentPoint {
					bf := &store.Backfill{OID: oid, Table: c.identity, Reason: reasonSnapshot, Started: now, Finished: now, Done: true}
					recs[oid] = bf
					op.backfills = append(op.backfills, bf)
					break
				}
			}
		}
	}
	var notCopied []string
	for _, c := range inConfigOrder(s.cfg.Tables, tables) {
		oid, name := c.oid, c.identity
		rec := recs[oid]
		switch {
		case rec != nil && rec.Done:
			continue
		case rec != nil:
		case !s.cfg.Snapshot:
			notCopied = append(notCopied, name)
			continue
		default:
			rec = &store.Backfill{OID: oid, Table: name, Reason: ReasonAdded, Started: now}
			for other, old := range recs {
				if other != oid && old.Table == name {
					// The table was dropped and created again: the
					// session's start queued the truncate of the old
					// one (identity.go).
					rec.Reason = ReasonRecreated
					op.forget = append(op.forget, other)
				}
			}
			op.backfills = append(op.backfills, rec)
		}
		if !s.cfg.Snapshot && rec.Reason == ReasonAdded {
			notCopied = append(notCopied, name)
			continue
		}
		s.noteBackfill(rec, false, 0)
	}
	if len(notCopied) > 0 {
		s.log.Info("not copying the existing rows of tables never copied (source.snapshot is never); only their changes are captured", "tables", notCopied)
	}
	if len(op.backfills) == 0 && len(op.forget) == 0 && !op.markCopies {
		return nil
	}
	if err := s.writer.send(op); err != nil {
		return err
	}
	return s.writer.sync(ctx)
}

// inConfigOrder returns the captured tables in the order of their entries
// in source.tables.
func inConfigOrder(configured []Table, tables map[uint32]*capturedTable) []*capturedTable {
	var out []*capturedTable
	for _, t := range configured {
		for _, c := range tables {
			if c.configured == t {
				out = append(out, c)
			}
		}
	}
	return out
}

// backfiller copies the tables with a pending backfill, one at a time, on
// its own SQL connection, while the session streams.
type backfiller struct {
	s      *Source
	conn   *pgx.Conn
	types  *typemap.Map
	tables map[uint32]*capturedTable
	log    *slog.Logger
	// nonce names this session's chunks in their watermarks; chunk
	// counts them.
	nonce string
	chunk int64
	// limiter paces the rows copied (nil: no limit).
	limiter *rate.Limiter
	// again is set when a resync asks for the table being copied.
	again bool
	// rel describes the table being copied as the last chunk read it,
	// from the rows catalogQuery returned (catalog).
	rel     *store.Relation
	catalog [][][]byte
	// chunks holds the memory of the copy's durable chunks, for the
	// next ones; nil with Config.FreshChunkMemory
	// (tuning_chunk_memory.go).
	chunks *chunkPool
	// rowBytes is the memory a row of the copy took in its last chunk
	// (zero before the first); narrow is set once the log said that the
	// copy's chunks hold fewer rows than configured.
	rowBytes int
	narrow   bool
	// gaveWay holds the tables whose copy gave way to the others' (see
	// redosBeforeGivingWay), which pending passes over while another
	// copy is pending.
	gaveWay map[uint32]bool
}

// errResyncAgain ends a copy that a resync of the same table replaces.
var errResyncAgain = errors.New("copy asked for again")

// errGaveWay ends a copy that gives way to the other tables' copies.
var errGaveWay = errors.New("copy gave way to the others")

// redosBeforeGivingWay is how many times in a row a chunk is copied again,
// or how many times the copy starts over, before the copy gives way to the
// other tables' copies, if any is pending: whatever keeps its chunks from being queued,
// one table's copy never holds the others back for ever. It resumes, from
// the last chunk queued, once they are done.
const redosBeforeGivingWay = 8

// runBackfills runs the backfiller until ctx is cancelled. A copy that
// fails (a lost connection, a table that is gone) is logged and tried
// again with backoff; only a failure of the state file ends it.
func (s *Source) runBackfills(ctx context.Context, tables map[uint32]*capturedTable) error {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	b := &backfiller{s: s, types: typemap.New(), tables: maps.Clone(tables), log: s.log, nonce: hex.EncodeToString(nonce)}
	if rps := s.cfg.BackfillRowsPerSecond; rps > 0 {
		b.limiter = rate.NewLimiter(rate.Limit(rps), max(rps, s.chunkRows()))
	}
	defer func() {
		if b.conn != nil {
			b.conn.Close(context.WithoutCancel(ctx))
		}
	}()
	// A failed copy is tried again after 1 s, doubling to a minute.
	retry := backoff.New(backoff.Policy{Min: time.Second, Max: time.Minute, Factor: 2})
	for {
		err := b.next(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			retry.Reset()
			continue
		case s.writer.failed() != nil:
			return err
		}
		wait := retry.Next()
		b.log.Warn("backfill failed; trying again", "err", err, "backoff", wait.String())
		if b.conn != nil {
			b.conn.Close(context.WithoutCancel(ctx))
			b.conn = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case req := <-s.resyncs:
			req.done <- b.resync(ctx, req)
		case <-time.After(wait):
		}
	}
}

// next copies the next table with a pending backfill, or waits for a
// resync when there is none.
func (b *backfiller) next(ctx context.Context) error {
	if b.conn == nil {
		conn, err := b.s.cfg.Connect(ctx)
		if err != nil {
			return err
		}
		b.conn = conn
	}
	rec, err := b.pending()
	if err != nil {
		return err
	}
	if rec == nil {
		select {
		case <-ctx.Done():
			return nil
		case req := <-b.s.resyncs:
			req.done <- b.resync(ctx, req)
			return nil
		}
	}
	err = b.copyTable(ctx, rec)
	if errors.Is(err, errResyncAgain) || errors.Is(err, errGaveWay) {
		return nil
	}
	return err
}

// pending returns the first configured table (in the order of
// Config.Tables) whose copy is recorded and not done, or nil.
func (b *backfiller) pending() (*store.Backfill, error) {
	var recs map[uint32]*store.Backfill
	if err := b.s.db.View(func(r *store.Reader) (err error) { recs, err = r.Backfills(); return err }); err != nil {
		return nil, fmt.Errorf("read backfills: %w", err)
	}
	var gaveWay *store.Backfill
	for _, c := range inConfigOrder(b.s.cfg.Tables, b.tables) {
		rec := recs[c.oid]
		switch {
		case rec == nil || rec.Done || (rec.Reason == ReasonAdded && !b.s.cfg.Snapshot):
			continue
		case b.gaveWay[c.oid]:
			if gaveWay == nil {
				gaveWay = rec
			}
			continue
		}
		return rec, nil
	}
	clear(b.gaveWay)
	return gaveWay, nil
}

// othersPending reports whether a copy of a table other than oid's is
// pending.
func (b *backfiller) othersPending(oid uint32) (bool, error) {
	var recs map[uint32]*store.Backfill
	if err := b.s.db.View(func(r *store.Reader) (err error) { recs, err = r.Backfills(); return err }); err != nil {
		return false, fmt.Errorf("read backfills: %w", err)
	}
	for _, c := range b.tables {
		if rec := recs[c.oid]; c.oid != oid && rec != nil && !rec.Done && (rec.Reason != ReasonAdded || b.s.cfg.Snapshot) {
			return true, nil
		}
	}
	return false, nil
}

// resync records a copy of a table again (see Source.Resync and
// Source.askBackfill).
func (b *backfiller) resync(ctx context.Context, req resyncRequest) error {
	var c *capturedTable
	for _, t := range b.tables {
		if t.identity == req.table || t.configured.String() == req.table || t.current.String() == req.table {
			c = t
		}
	}
	if c == nil {
		return fmt.Errorf("resync %s: not a captured table (source.tables)", req.table)
	}
	oid := c.oid
	if req.oid != 0 && req.oid != c.oid {
		// A new generation: the stream captures it from the truncate
		// the caller queued.
		next := *c
		next.oid = req.oid
		delete(b.tables, c.oid)
		b.tables[req.oid], c, oid = &next, &next, req.oid
	}
	var recs map[uint32]*store.Backfill
	if err := b.s.db.View(func(r *store.Reader) (err error) { recs, err = r.Backfills(); return err }); err != nil {
		return fmt.Errorf("resync %s: %w", req.table, err)
	}
	old := recs[oid]
	if !req.truncate && !req.restart && old != nil && !old.Done {
		return nil // asked for again: the copy is recorded
	}
	// A copy started over keeps the truncate of the one under way, which
	// may not be queued yet.
	truncate := req.truncate || old != nil && !old.Done && old.Truncate
	rec := &store.Backfill{OID: oid, Table: c.identity, Reason: req.reason, Started: time.Now().UTC(), Truncate: truncate}
	op := writeOp{kind: opBackfill, backfills: []*store.Backfill{rec}}
	for other, o := range recs {
		if other != oid && o.Table == rec.Table {
			op.forget = append(op.forget, other)
		}
	}
	b.s.noteBackfill(rec, false, 0)
	if err := b.s.writer.send(op); err != nil {
		return err
	}
	if err := b.s.writer.sync(ctx); err != nil {
		return err
	}
	b.again = true
	b.log.Info("copy of the table's rows recorded", "table", c.identity, "oid", oid, "reason", req.reason, "truncate_first", truncate)
	return nil
}

// keyColumn is a column the rows are paged by, with the type its values
// are cast to in the chunk's query.
type keyColumn struct{ name, typ string }

// copyTable copies one table, chunk after chunk, from the progress rec
// records.
func (b *backfiller) copyTable(ctx context.Context, rec *store.Backfill) error {
	c := b.tables[rec.OID]
	if c == nil {
		return fmt.Errorf("backfill of table %d: not captured in this session", rec.OID)
	}
	t := c.identity
	log := b.log.With("table", t)
	rel, err := relationFromCatalog(ctx, b.conn, rec.OID, t, 0, b.types.Known)
	if err != nil {
		return fmt.Errorf("backfill %s: %w", t, err)
	}
	keys, err := b.keyColumns(ctx, rel)
	if err != nil {
		return fmt.Errorf("backfill %s: %w", t, err)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	prog := *rec
	switch {
	case len(keys) == 0 && (prog.Chunks > 0 || !prog.Truncate):
		// Without a key the rows queued cannot be told from those
		// changed meanwhile: the copy starts over, after a truncate.
		prog.Page, prog.Rows, prog.Chunks, prog.Truncate = 0, 0, 0, true
	case prog.After != nil && prog.Key != nil && !slices.Equal(prog.Key, names):
		// The last key queued is a value of another key: where the
		// copy stopped is not known by the new one.
		log.Warn("backfill starts over: the table's key changed", "was", prog.Key, "now", names)
		prog.After, prog.Key, prog.Rows, prog.Chunks, prog.Truncate = nil, nil, 0, 0, true
	}
	from := time.Now()
	tracked := b.s.handoff.startTracking(rec.OID, names)
	defer b.s.handoff.stopTracking()
	var since store.LSN
	select {
	case since = <-tracked:
	case <-ctx.Done():
		return nil
	}
	// A transaction the stream received before it began tracking must
	// be visible to the first chunk's copy: under synchronous
	// replication it is only once acknowledged.
	for deadline := time.Now().Add(10 * time.Second); store.LSN(b.s.confirmedLSN.Load()) < since && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	how := "by key " + strings.Join(names, ", ")
	if len(keys) == 0 {
		how = "by ctid ranges (no primary key or replica identity index)"
	}
	// Running before the log says so, done after: what the log shows
	// between the two lines saw the copy running.
	b.s.noteBackfill(&prog, true, 0)
	log.Info("backfill started", "reason", prog.Reason, "rows_queued", prog.Rows, "chunk_rows", b.s.chunkRows(), "order", how)
	b.again = false
	// A pool of the copy's own, let go when the copy ends: what it holds,
	// and what the writer gives back after, is left to the garbage
	// collector.
	b.chunks = nil
	if !b.s.cfg.FreshChunkMemory {
		b.chunks = newChunkPool()
		defer func() { b.chunks = nil }()
	}
	b.rowBytes, b.narrow = 0, false
	// A chunk is copied again after 100 ms, doubling to 5 s while it
	// must be again.
	again := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Factor: 2})
	lastLog := time.Now()
	var redone, replaced, restarts int64
	// inARow counts the chunks copied again, and the copy's starts over,
	// since the last chunk queued.
	inARow := 0
	// held is a chunk copied whose high watermark is not written yet;
	// early says why the chunk after the last one queued is to be
	// copied again, found before it was copied.
	var held *copiedChunk
	var early string
	defer func() {
		if held != nil {
			b.drop(ctx, held)
		}
	}()
	for {
		select {
		case req := <-b.s.resyncs:
			req.done <- b.resync(ctx, req)
		default:
		}
		if b.again {
			return errResyncAgain
		}
		if held == nil && early == "" {
			var err error
			if held, early, err = b.copyChunk(ctx, t, &prog, keys, nil); err != nil {
				return err
			}
		}
		var res chunkResult
		var next *store.Backfill
		if early != "" {
			res.redo, early = early, ""
		} else {
			c := held
			held = nil
			var err error
			if res, held, early, err = b.handOver(ctx, t, c, keys); err != nil {
				return err
			}
			next = c.next
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case res.restart != "":
			restarts++
			log.Warn("backfill starts over", "why", res.restart, "times", restarts)
			if restarts == restartsToReport {
				log.Error("a table without a key cannot be copied while transactions keep changing it: its copy starts over after each",
					"times", restarts, "fix", fmt.Sprintf("give the table a primary key (ALTER TABLE %[1]s ADD PRIMARY KEY (...)) or a replica identity index (ALTER TABLE %[1]s REPLICA IDENTITY USING INDEX ...), or pause its writes until the copy is done", t))
			}
			prog.Page, prog.Rows, prog.Chunks, prog.Truncate = 0, 0, 0, true
			b.s.noteBackfill(&prog, true, restarts)
			redone++
		}
		if !res.queued {
			inARow++
		}
		if (!res.queued || res.restart != "") && max(inARow, int(restarts)) >= redosBeforeGivingWay {
			others, err := b.othersPending(rec.OID)
			if err != nil {
				return err
			}
			if others {
				log.Warn("backfill gives way to the other tables' copies, and resumes after them",
					"chunks_copied_again_in_a_row", inARow, "starts_over", restarts, "why", cmp.Or(res.redo, res.restart))
				if b.gaveWay == nil {
					b.gaveWay = map[uint32]bool{}
				}
				b.gaveWay[rec.OID] = true
				return errGaveWay
			}
		}
		if !res.queued {
			wait := again.Next()
			if res.redo != "" {
				log.Info("backfill copies a chunk again", "why", res.redo, "backoff", wait.String())
				redone++
			}
			if backoff.Sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		again.Reset()
		inARow = 0
		prog = *next
		replaced += int64(res.replaced)
		if prog.Done {
			// The next table is chosen from the state file: it
			// must record this one done first.
			if err := b.s.writer.sync(ctx); err != nil {
				return err
			}
			log.Info("backfill done", "reason", prog.Reason, "rows", prog.Rows, "chunks", prog.Chunks,
				"rows_left_to_changes", replaced, "chunks_copied_again", redone, "seconds", time.Since(from).Round(time.Millisecond).Seconds())
			b.s.noteBackfill(&prog, true, restarts)
			return nil
		}
		b.s.noteBackfill(&prog, true, restarts)
		if time.Since(lastLog) >= backfillLogEvery {
			lastLog = time.Now()
			log.Info("backfill progress", "rows", prog.Rows, "chunks", prog.Chunks, "rows_left_to_changes", replaced, "chunks_copied_again", redone)
		}
		if b.limiter != nil && res.rows > 0 {
			if err := b.limiter.WaitN(ctx, min(res.rows, b.limiter.Burst())); err != nil {
				return nil
			}
		}
	}
}

// keyColumns returns the columns a table's rows are paged by: the columns
// that identify a row (store.Relation.KeyColumns: the primary key, or the
// replica identity index), with their types; none for a table without
// either, copied by ctid ranges.
func (b *backfiller) keyColumns(ctx context.Context, rel *store.Relation) ([]keyColumn, error) {
	var keys []keyColumn
	for _, name := range keyNames(rel) {
		var typ string
		err := b.conn.QueryRow(ctx, `SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1 AND attname = $2`,
			rel.Key.OID, name).Scan(&typ)
		if err != nil {
			return nil, fmt.Errorf("read the type of %s: %w", name, err)
		}
		keys = append(keys, keyColumn{name: name, typ: typ})
	}
	return keys, nil
}

// keyNames returns the names of the columns a table's rows are paged by
// (see keyColumns), none for a table copied by ctid ranges.
func keyNames(rel *store.Relation) []string {
	if rel.Multiset() {
		return nil
	}
	var names []string
	for _, i := range rel.KeyColumns() {
		names = append(names, rel.Columns[i].Name)
	}
	return names
}

// errKeyChanged ends a copy paged by a key the table no longer has: it
// starts over, by the new one.
var errKeyChanged = errors.New("the table's key changed")

// copiedChunk is a chunk whose rows are copied and handed to the stream,
// and whose transaction stays open until its high watermark is written.
type copiedChunk struct {
	win *chunkWindow
	// next is the progress recorded once the chunk is queued.
	next *store.Backfill
}

// copyChunk copies the chunk after prog, between its low watermark and
// its transaction left open for the high one. With prev, prev's high
// watermark is written in the same round trip as the chunk's low one. It
// returns the chunk, or why it is to be copied again (the table's columns
// changed), or an error; prev's high watermark is written in the first
// two cases.
func (b *backfiller) copyChunk(ctx context.Context, t string, prog *store.Backfill, keys []keyColumn, prev *copiedChunk) (*copiedChunk, string, error) {
	// The table's columns as the chunk before it read them; the chunk's
	// first round trip reads them again, and a change is seen there.
	// A chunk that truncates first reads them before: the stream
	// queues the truncate with them at the low watermark.
	rel := b.rel
	if rel == nil || rel.Key.OID != prog.OID || prog.Truncate {
		rows, err := catalogRows(ctx, b.conn, prog.OID)
		if err != nil {
			return nil, "", fmt.Errorf("backfill %s: describe the table: %w", t, err)
		}
		if rel, err = relationFromRows(ctx, b.conn, rows, prog.OID, t, 0, b.types.Known); err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
		b.rel, b.catalog = rel, rows
	}
	rd := newRelationDecoder(b.types, rel, b.s.maxValue())
	limit := b.chunkLimit()
	mem := b.memory()
	cr := newChunkReader(rd, limit, mem)
	next := *prog
	next.After = nil
	var query string
	cols := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	from := "SELECT " + strings.Join(cols, ", ") + " FROM " + pgx.Identifier{rel.Schema, rel.Name}.Sanitize()
	if len(keys) > 0 {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.name
		}
		if cr.keyPos = keyPositions(rel, names); cr.keyPos == nil || !slices.Equal(keyNames(rel), names) {
			// The copy starts again, and reads the key anew.
			b.rel, b.catalog = nil, nil
			return nil, "", fmt.Errorf("backfill %s: %w (paged by %s, now %s)", t, errKeyChanged, strings.Join(names, ", "), strings.Join(keyNames(rel), ", "))
		}
		next.Key = names
		cr.maxBytes = maxChunkBytes
		var err error
		if query, err = keysetQuery(from, keys, prog.After, limit); err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
	} else {
		var pages, leaves int64
		// The pages of the table, or of its largest partition (a
		// range of ctids selects rows in every partition).
		err := b.conn.QueryRow(ctx, `SELECT coalesce(max(pg_relation_size(relid)), pg_relation_size($1)) / current_setting('block_size')::int,
			       count(*) FROM pg_partition_tree($1) WHERE isleaf`, prog.OID).Scan(&pages, &leaves)
		if err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
		span := max(1, int64(limit)/(maxTuplesPerPage*max(1, leaves)))
		end := prog.Page + uint64(span)
		query = fmt.Sprintf("%s WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", from, prog.Page, end)
		next.Page = end
		next.Done = int64(end) >= pages
	}
	b.chunk++
	win := &chunkWindow{id: fmt.Sprintf("%s-%d", b.nonce, b.chunk), oid: prog.OID, rel: rel,
		truncate: prog.Truncate, result: make(chan chunkResult, 1)}
	h := b.s.handoff
	h.open(win)
	// Until the chunk is handed over, its transaction is rolled back
	// and its window withdrawn on the way out.
	handed := false
	defer func() {
		if !handed {
			b.drop(ctx, &copiedChunk{win: win})
		}
	}()
	// prev's high watermark, the snapshot, the columns and the low
	// watermark, in one round trip: the chunk's transaction stays open
	// for the COPY, and is committed with its own high watermark.
	sql, skip := "", 0
	if prev != nil {
		high, err := highSQL(prev.win)
		if err != nil {
			return nil, "", err
		}
		sql, skip = high+"; ", highStatements
	}
	low, err := watermarkSQL(win, "low")
	if err != nil {
		return nil, "", err
	}
	sql += "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pg_current_snapshot()::text; " + catalogQuery(prog.OID) + "; " + low
	results, changed, err := b.beginAndCopy(ctx, sql, "COPY ("+query+") TO STDOUT", skip, cr)
	if err != nil {
		return nil, "", fmt.Errorf("backfill %s: %w", t, err)
	}
	if changed {
		// Read by the columns they had: the next try reads them anew.
		b.rel, b.catalog = nil, nil
		return nil, "the table's columns changed", nil
	}
	snap, err := parseSnapshot(string(results[skip+1][0][0]))
	if err != nil {
		return nil, "", fmt.Errorf("backfill %s: %w", t, err)
	}
	if len(cr.partial) > 0 {
		return nil, "", fmt.Errorf("backfill %s: COPY ended inside a row", t)
	}
	if b.s.failpoint != nil {
		if err := b.s.failpoint("backfill-copied"); err != nil {
			return nil, "", err
		}
	}
	if len(keys) > 0 {
		next.After = cr.lastKey()
		next.Done = len(cr.rows) < limit && cr.dropped == 0
		if next.After == nil {
			next.After = prog.After
		}
	}
	b.noteRowBytes(cr, t)
	mem.keep(cr)
	h.mu.Lock()
	win.snap, win.rows, win.keys, win.prog, win.ready = snap, cr.rows, cr.keys, &next, true
	win.recycle = b.recycler(mem)
	h.mu.Unlock()
	handed = true
	return &copiedChunk{win: win, next: &next}, "", nil
}

// beginAndCopy runs a chunk's statements, sql, and then its COPY, copySQL,
// into cr: as one query (queryThenCopy), or in two round trips with
// Config.SeparateChunkQuery. It returns the statements' rows, the first
// skip of them those of the chunk before, and whether the table's columns
// are other than those the chunk is read by (b.catalog): the COPY's data
// is then dropped, or its COPY failed for a column gone.
func (b *backfiller) beginAndCopy(ctx context.Context, sql, copySQL string, skip int, cr io.Writer) (results [][][][]byte, changed bool, err error) {
	// began checks the rows of the statements that begin the chunk, and
	// reports whether the columns are those it is read by.
	began := func(results [][][][]byte) (same bool, err error) {
		if len(results) != skip+4 || len(results[skip+1]) != 1 || len(results[skip+1][0]) != 1 {
			return false, errors.New("unexpected results")
		}
		return sameCatalogRows(results[skip+2], b.catalog), nil
	}
	if b.s.cfg.SeparateChunkQuery {
		res, err := b.conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil {
			return nil, false, fmt.Errorf("begin the chunk: %w", err)
		}
		for _, r := range res {
			results = append(results, r.Rows)
		}
		same, err := began(results)
		if err != nil {
			return nil, false, fmt.Errorf("begin the chunk: %w", err)
		}
		if !same {
			return results, true, nil
		}
		if _, err := b.conn.PgConn().CopyTo(ctx, cr, copySQL); err != nil {
			if !columnGone(err) {
				return nil, false, fmt.Errorf("copy: %w", err)
			}
			return results, true, nil
		}
		return results, false, nil
	}
	results, err = queryThenCopy(ctx, b.conn.PgConn(), sql+"; "+copySQL, func(results [][][][]byte) (io.Writer, error) {
		same, err := began(results)
		switch {
		case err != nil:
			return nil, err
		case !same:
			return io.Discard, nil
		}
		return cr, nil
	})
	if len(results) < skip+4 {
		if err == nil {
			err = errors.New("unexpected results")
		}
		return nil, false, fmt.Errorf("begin the chunk: %w", err)
	}
	results = results[:skip+4]
	same, berr := began(results)
	switch {
	case berr != nil:
		return nil, false, fmt.Errorf("begin the chunk: %w", berr)
	case !same || columnGone(err):
		return results, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("copy: %w", err)
	}
	return results, false, nil
}

// columnGone reports whether err is PostgreSQL's of a column that does
// not exist: a chunk's COPY names a column that was dropped or renamed
// after its statements read the table's columns, and before the COPY took
// the table's lock.
func columnGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
}

// handOver writes c's high watermark and returns what the stream did with
// the chunk. Unless c is the last chunk, or the copy is paced, the same
// round trip begins the chunk after it, which is copied while the stream
// handles c: handOver returns it once the stream has queued c (or why it
// is to be copied again), and drops it otherwise.
func (b *backfiller) handOver(ctx context.Context, t string, c *copiedChunk, keys []keyColumn) (chunkResult, *copiedChunk, string, error) {
	var after *copiedChunk
	var redo string
	if c.next.Done || b.limiter != nil {
		if err := b.emitHigh(ctx, c.win); err != nil {
			return chunkResult{}, nil, "", b.settle(ctx, c, err)
		}
	} else {
		prog := *c.next
		prog.Truncate = false
		var err error
		if after, redo, err = b.copyChunk(ctx, t, &prog, keys, c); err != nil {
			return chunkResult{}, nil, "", b.settle(ctx, c, err)
		}
	}
	var res chunkResult
	select {
	case res = <-c.win.result:
	case <-ctx.Done():
		b.drop(ctx, c)
		if after != nil {
			b.drop(ctx, after)
		}
		return chunkResult{}, nil, "", nil
	}
	if !res.queued {
		if after != nil {
			b.drop(ctx, after)
		}
		return res, nil, "", nil
	}
	if after != nil {
		// Copied before the stream counted c's rows.
		h := b.s.handoff
		h.mu.Lock()
		after.next.Rows, after.next.Chunks = c.next.Rows, c.next.Chunks
		h.mu.Unlock()
	}
	return res, after, redo, nil
}

// drop ends a chunk that is not handed over: its transaction is rolled
// back and its window withdrawn. It reports whether the stream had taken
// the window already (its high watermark was written).
func (b *backfiller) drop(ctx context.Context, c *copiedChunk) (taken bool) {
	b.conn.PgConn().Exec(context.WithoutCancel(ctx), "ROLLBACK").Close()
	h := b.s.handoff
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.remove(c.win)
}

// settle ends, after err, a chunk whose high watermark may have been
// written. If the stream has taken it, its result is waited for, and a
// chunk queued is made durable first, so that the copy resumes after it.
func (b *backfiller) settle(ctx context.Context, c *copiedChunk, err error) error {
	if !b.drop(ctx, c) {
		return err
	}
	select {
	case res := <-c.win.result:
		if res.queued {
			if serr := b.s.writer.sync(ctx); serr != nil {
				return serr
			}
		}
	case <-ctx.Done():
	}
	return err
}

// watermarkSQL returns the statement that writes a watermark of the chunk
// into the WAL.
func watermarkSQL(win *chunkWindow, mark string) (string, error) {
	content, err := json.Marshal(watermark{ID: win.id, OID: win.oid, Mark: mark})
	if err != nil {
		return "", err
	}
	return "SELECT pg_logical_emit_message(false, " + quoteLiteral([]byte(backfillPrefix)) + ", " + quoteLiteral(content) + ")", nil
}

// highStatements is the number of statements highSQL returns.
const highStatements = 6

// highSQL returns the statements that commit a chunk's transaction and
// write its high watermark, then flush the WAL up to it. A
// non-transactional message is decoded once the WAL holding it is
// flushed, which nothing else may do for a while (up to
// wal_writer_delay); a transaction with an xid flushes it at its commit
// (locally: a synchronous standby, which the agent may itself be, is not
// waited for). PostgreSQL 17's flush argument would do it without an xid.
func highSQL(win *chunkWindow) (string, error) {
	high, err := watermarkSQL(win, "high")
	if err != nil {
		return "", err
	}
	return "COMMIT; BEGIN; SET LOCAL synchronous_commit = local; " + high + "; SELECT pg_current_xact_id(); COMMIT", nil
}

// emitHigh writes the high watermark of the chunk (highSQL) in a round
// trip of its own.
func (b *backfiller) emitHigh(ctx context.Context, win *chunkWindow) error {
	sql, err := highSQL(win)
	if err != nil {
		return err
	}
	if _, err := b.conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("backfill: write the high watermark: %w", err)
	}
	return nil
}

// keysetQuery returns the query of the limit rows after the key after
// (from the first row when after is nil), in key order. The key's values
// are literals cast to the columns' types: COPY takes no parameters.
func keysetQuery(from string, keys []keyColumn, after [][]byte, limit int) (string, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = pgx.Identifier{k.name}.Sanitize()
	}
	order := strings.Join(names, ", ")
	q := from
	if after != nil {
		if len(after) != len(keys) {
			return "", fmt.Errorf("the last key copied has %d values, the key %d columns", len(after), len(keys))
		}
		lits := make([]string, len(keys))
		for i, k := range keys {
			lits[i] = "CAST(" + quoteLiteral(after[i]) + " AS " + k.typ + ")"
		}
		q += " WHERE (" + order + ") > (" + strings.Join(lits, ", ") + ")"
	}
	return fmt.Sprintf("%s ORDER BY %s LIMIT %d", q, order, limit), nil
}

// quoteLiteral quotes text as an SQL string literal, whatever
// standard_conforming_strings says (as PostgreSQL's quote_literal does).
func quoteLiteral(text []byte) string {
	q := "'" + strings.ReplaceAll(string(text), "'", "''") + "'"
	if bytes.IndexByte(text, '\\') >= 0 {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// chunkReader receives a chunk's COPY text output and decodes its rows,
// their keys, and the text of the last row's key.
type chunkReader struct {
	rd      *relationDecoder
	keyPos  []int
	partial []byte
	slab    valueSlab
	lines   byteSlab
	texts   [][]byte
	rows    []store.Change
	keys    rowKeys
	last    [][]byte
	// maxBytes, when set, is the memory at which the chunk is full: the
	// rows after the one that reaches it are dropped, and counted in
	// dropped (see maxChunkBytes).
	maxBytes int
	dropped  int
}

// rowKeys are the encoded keys of a chunk's rows, in one buffer.
type rowKeys struct {
	data []byte
	ends []int
}

// add appends the key of the next row, which write appends to its
// argument.
func (k *rowKeys) add(write func([]byte) []byte) {
	k.data = write(k.data)
	k.ends = append(k.ends, len(k.data))
}

// at returns the key of row i.
func (k *rowKeys) at(i int) []byte {
	start := 0
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.data[start:k.ends[i]]
}

// newChunkReader returns a reader of a chunk of up to limit rows (a chunk
// by ctid ranges may hold more) that decodes them into mem.
func newChunkReader(rd *relationDecoder, limit int, mem *chunkMemory) *chunkReader {
	slab, lines := mem.take(limit)
	return &chunkReader{rd: rd, texts: make([][]byte, len(rd.cols)), slab: slab, lines: lines, rows: mem.rows, keys: mem.keys}
}

// lastKey returns the text of the last row's key, in memory of its own:
// the progress keeps it after the chunk's memory is used again.
func (c *chunkReader) lastKey() [][]byte {
	if c.last == nil {
		return nil
	}
	key := make([][]byte, len(c.last))
	for i, text := range c.last {
		key[i] = bytes.Clone(text)
	}
	return key
}

func (c *chunkReader) Write(p []byte) (int, error) {
	if err := eachLine(&c.partial, p, c.row); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *chunkReader) row(line []byte) error {
	if c.maxBytes > 0 && c.memory() >= c.maxBytes {
		c.dropped++
		return nil
	}
	vals, err := c.rd.decodeCopyRow(line, &c.slab, &c.lines, c.texts)
	if err != nil {
		return err
	}
	c.rows = append(c.rows, store.Change{Op: store.OpSnapshot, Relation: c.rd.rel.Key, New: vals})
	if c.keyPos == nil {
		return nil
	}
	c.last = c.last[:0]
	for _, p := range c.keyPos {
		if c.texts[p] == nil {
			return fmt.Errorf("copy %s: key column %s is null", c.rd.rel.QualifiedName(), c.rd.rel.Columns[p].Name)
		}
		c.last = append(c.last, c.texts[p])
	}
	c.keys.add(func(b []byte) []byte {
		for _, p := range c.keyPos {
			b = typemap.AppendValueKey(b, &vals[p])
		}
		return b
	})
	return nil
}

// memory returns the memory the chunk's rows take: their values, the
// copies of the COPY lines the values point into, their changes and keys.
func (c *chunkReader) memory() int {
	return c.slab.size*int(unsafe.Sizeof(store.Value{})) + c.lines.size + len(c.rows)*int(unsafe.Sizeof(store.Change{})) + len(c.keys.data)
}

// chunkLimit returns how many rows the next chunk of the copy reads: the
// configured chunk rows, fewer when rows like the last chunk's would take
// more than maxChunkBytes, and at most firstChunkRows before a chunk tells.
func (b *backfiller) chunkLimit() int {
	rows := b.s.chunkRows()
	if b.rowBytes == 0 {
		return min(rows, firstChunkRows)
	}
	return max(1, min(rows, maxChunkBytes/b.rowBytes))
}

// noteRowBytes takes the memory a row of the chunk cr read took, for the
// next chunk's limit, and logs it the first time the copy's chunks hold
// fewer rows than configured because of it.
func (b *backfiller) noteRowBytes(cr *chunkReader, table string) {
	if len(cr.rows) == 0 {
		return
	}
	b.rowBytes = max(1, cr.memory()/len(cr.rows))
	if rows := b.chunkLimit(); rows < b.s.chunkRows() && !b.narrow {
		b.narrow = true
		b.log.Info("backfill chunks hold fewer rows than configured: the rows are wide", "table", table,
			"chunk_rows", rows, "bytes_per_row", b.rowBytes, "chunk_bytes", maxChunkBytes)
	}
}

// maxValue is the largest value capture keeps (Config.MaxValueBytes).
func (s *Source) maxValue() int {
	if s.cfg.MaxValueBytes > 0 {
		return int(min(s.cfg.MaxValueBytes, math.MaxInt32))
	}
	return DefaultMaxValueBytes
}

// chunkRows is the number of rows a backfill copies per chunk.
func (s *Source) chunkRows() int {
	if s.cfg.BackfillChunkRows > 0 {
		return s.cfg.BackfillChunkRows
	}
	return DefaultBackfillChunkRows
}
