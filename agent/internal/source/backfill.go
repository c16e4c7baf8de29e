package source

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// Capture's side of an online backfill, which copies a table's existing
// rows into the queue while the replication stream keeps flowing (package
// backfill, which runs beside the stream): the copies planned at a
// session's start, the resyncs asked for, the copies' status, and what
// the backfiller asks of capture (backfill.Capture, backfill.Catalog).
// The stream's side, which notes the changes of the table being copied
// and queues each chunk at its high watermark, is in backfill_track.go.

// Reasons a table is copied (store.Backfill.Reason).
const (
	reasonSnapshot = "initial snapshot"
	// ReasonAdded is the reason of a table configured after the first
	// start, or whose copy never finished.
	ReasonAdded = backfill.ReasonAdded
	// ReasonResync is the reason of a copy asked for by Resync.
	ReasonResync = "resync"
)

// DefaultBackfillChunkRows is the number of rows a backfill copies per
// chunk when Config.BackfillChunkRows is zero.
const DefaultBackfillChunkRows = 16384

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

// ErrNotCapturing is returned by Resync while capture is not connected.
var ErrNotCapturing = errors.New("capture is not connected to PostgreSQL")

// Resync copies a configured table again: it records a truncate of the
// table, queued at the first chunk's low watermark, and a backfill of
// every row the table holds now, which goes on after a restart. It returns
// once both are recorded in the state file; Backfills reports the copy's
// progress. reason is recorded with it (ReasonResync); table is
// "schema.table" as configured, or as its Delta tables are named.
func (s *Source) Resync(ctx context.Context, table, reason string) error {
	return s.request(ctx, backfill.Request{Table: table, Reason: reason, Truncate: true})
}

// askBackfill is the default Config.Backfill: it records the copy of the
// PostgreSQL table oid as the table captured as table, whose truncate the
// caller queued (for ReasonKeysRewritten and ReasonEnumRenamed, the copy's
// own), and returns once the copy is recorded.
func (s *Source) askBackfill(ctx context.Context, table string, oid uint32, reason string) error {
	truncate := reason == ReasonKeysRewritten || reason == ReasonEnumRenamed
	return s.request(ctx, backfill.Request{Table: table, OID: oid, Reason: reason,
		Truncate: truncate, Restart: truncate || reason == ReasonRewritten})
}

// request hands req to the running backfiller and waits for its answer.
func (s *Source) request(ctx context.Context, req backfill.Request) error {
	req.Done = make(chan error, 1)
	table := req.Table
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
	case err := <-req.Done:
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

// backfillOrder returns the captured tables in the order the backfiller
// takes them (source.tables). The stream changes tables as it runs (a
// table created again), so the session takes this copy before it starts
// the backfiller beside the stream.
func (s *Source) backfillOrder(tables map[uint32]*capturedTable) []backfill.Table {
	var order []backfill.Table
	for _, c := range inConfigOrder(s.cfg.Tables, tables) {
		order = append(order, backfill.Table{OID: c.oid, Name: c.identity, Configured: c.configured.String(), Current: c.current.String()})
	}
	return order
}

// runBackfills runs the session's backfiller (backfill.Backfiller.Run) on
// the tables of order until ctx is cancelled.
func (s *Source) runBackfills(ctx context.Context, order []backfill.Table) error {
	b := backfill.New(backfill.Config{
		Tables:        order,
		Snapshot:      s.cfg.Snapshot,
		ChunkRows:     s.chunkRows(),
		RowsPerSecond: s.cfg.BackfillRowsPerSecond,
		Off:           s.cfg.Off,
		Connect:       s.cfg.Connect,
		DB:            s.db,
		Requests:      s.resyncs,
		Stream:        s.handoff,
		Capture:       backfillCapture{s},
		Catalog:       &backfillCatalog{s: s, types: typemap.New()},
		Logger:        s.log,
		Failpoints:    s.failpoint.backfill(),
	})
	return b.Run(ctx)
}

// backfillCapture is the source as the backfiller records its copies.
type backfillCapture struct{ s *Source }

func (c backfillCapture) Record(ctx context.Context, recs []*store.Backfill, forget []uint32) error {
	if err := c.s.writer.send(writeOp{kind: opBackfill, backfills: recs, forget: forget}); err != nil {
		return err
	}
	return c.s.writer.sync(ctx)
}

func (c backfillCapture) Sync(ctx context.Context) error { return c.s.writer.sync(ctx) }

func (c backfillCapture) Failed() error { return c.s.writer.failed() }

func (c backfillCapture) Confirmed() store.LSN { return store.LSN(c.s.confirmedLSN.Load()) }

func (c backfillCapture) Note(rec *store.Backfill, running bool, restarts int64) {
	c.s.noteBackfill(rec, running, restarts)
}

// backfillCatalog describes and decodes the tables a backfill copies as
// the stream does, with types of the backfiller's own.
type backfillCatalog struct {
	s     *Source
	types *typemap.Map
}

func (c *backfillCatalog) Query(oid uint32) string { return catalogQuery(oid) }

func (c *backfillCatalog) Relation(ctx context.Context, conn *pgx.Conn, rows [][][]byte, oid uint32, table string) (*store.Relation, error) {
	return relationFromRows(ctx, conn, rows, oid, table, 0, c.types.Known)
}

func (c *backfillCatalog) Decoder(rel *store.Relation, values []store.Value, lines []byte) backfill.Decoder {
	return &copyDecoder{rd: newRelationDecoder(c.types, rel, c.s.maxValue()), slab: valueSlab{buf: values}, lines: byteSlab{buf: lines}}
}

// copyDecoder decodes a chunk's COPY text into the memory it was given
// (backfill's tuning_chunk_memory.go), and into new memory once it is
// used up.
type copyDecoder struct {
	rd    *relationDecoder
	slab  valueSlab
	lines byteSlab
}

func (d *copyDecoder) Decode(line []byte, texts [][]byte) ([]store.Value, error) {
	return d.rd.decodeCopyRow(line, &d.slab, &d.lines, texts)
}

func (d *copyDecoder) Size() (values, lineBytes int) { return d.slab.size, d.lines.size }

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
