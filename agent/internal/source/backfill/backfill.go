// Package backfill copies the existing rows of captured tables into the
// queue while the replication stream keeps flowing: capture's second
// stage, beside the stream of package source, which it hands each chunk
// to through a Stream.
//
// An online backfill copies a table's existing rows with no lock beyond a
// SELECT's, no second slot, and no pause for the other tables (the DBLog
// method, which Debezium's incremental snapshots use too). The table is
// copied in chunks of Config.ChunkRows rows, in key order (keyset
// pagination on the primary key or the replica identity index), or by
// ctid ranges for a table without either. For each chunk, on its own SQL
// connection, the backfiller:
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
// table's rows that each transaction changes (source/backfill_track.go).
// At the high watermark it queues the chunk's rows as one transaction
// just after the watermark's position, as store.OpSnapshot changes,
// leaving out every row a change replaces: a change of a transaction that
// committed after the low watermark, or that the copy did not see. Those
// changes are queued before the chunk, so the row a transaction changed
// while it was copied ends with the transaction's value; the other rows
// are as the copy saw them, and every later change is queued after them.
// The chunk and the backfill's progress (store.Backfill: the last key
// queued) are one write of the state file: a restart resumes after the
// last chunk queued, and a chunk whose high watermark was not handled is
// copied again.
//
// A chunk is copied again, later, when what the stream noted cannot say
// which rows to leave out: too many keys, a truncate, an update that left
// TOAST values out, changes made before the tracking began. A table
// copied by ctid ranges has no key to tell its rows by: its copy starts
// with a truncate, and starts over whenever a transaction changes the
// table while it is copied (or after a restart), so that no row is both
// copied and queued as a change.
package backfill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/internal/tuning"
	"github.com/lakeside/lakeside/store"
)

// ReasonAdded is the reason (store.Backfill.Reason) of a table configured
// after the first start, or whose copy never finished: copied only when
// Config.Snapshot asks for copies.
const ReasonAdded = "added"

// MaxChunkBytes is the most memory a chunk's decoded rows take (values,
// the COPY text they point into, changes and keys): a chunk of wide rows
// holds fewer rows than configured. A chunk paged by key ends with the row
// that reaches it, the rest of its COPY being read and dropped, and the
// chunks after it read as many rows as the last one's take that much.
const MaxChunkBytes = 16 << 20

// firstChunkRows is the most rows the first chunk of a copy reads, before
// a chunk tells how much memory the table's rows take.
const firstChunkRows = 1024

// maxTuplesPerPage is the most rows a heap page of 8 kB holds
// (MaxHeapTuplesPerPage): a chunk of ctid ranges spans at most
// chunk rows / maxTuplesPerPage pages, so that it holds no more rows.
const maxTuplesPerPage = 291

// backfillLogEvery is how often a running backfill logs its progress.
const backfillLogEvery = 10 * time.Second

// RestartsToReport is how many times a copy by ctid ranges starts over
// before the log says, at ERROR, that it cannot finish while the table
// keeps changing, and what would let it.
const RestartsToReport = 5

// redosBeforeGivingWay is how many times in a row a chunk is copied again,
// or how many times the copy starts over, before the copy gives way to the
// other tables' copies, if any is pending: whatever keeps its chunks from being queued,
// one table's copy never holds the others back for ever. It resumes, from
// the last chunk queued, once they are done.
const redosBeforeGivingWay = 8

// Config configures a Backfiller for one session of capture.
type Config struct {
	// Tables are the tables the session captures, in the order of their
	// entries in the configuration: the order the copies are made in.
	Tables []Table
	// Snapshot asks for the copies of tables ReasonAdded.
	Snapshot bool
	// ChunkRows is the number of rows a chunk copies, at most.
	ChunkRows int
	// RowsPerSecond, when not zero, bounds the rows copied per second.
	RowsPerSecond int
	// Off says which performance tricks are off. The backfiller reads
	// ChunkMemory and ChunkQuery: each chunk is then decoded into new
	// memory (tuning_chunk_memory.go), and its statements and then its
	// COPY are run in two round trips (tuning_chunk_query.go).
	Off tuning.Off
	// Connect opens the backfiller's SQL connection.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// DB is the state file, which holds the copies' records.
	DB *store.DB
	// Requests carries the requests to copy a table again.
	Requests <-chan Request
	// Stream takes the chunks; Capture and Catalog are the rest of
	// capture the backfiller asks.
	Stream  Stream
	Capture Capture
	Catalog Catalog
	Logger  *slog.Logger
	// Failpoints are the points a crash is simulated at, compiled in
	// only for tests (failpoints_on.go).
	Failpoints Failpoints
}

// Table is a table the session captures.
type Table struct {
	OID uint32
	// Name is the name the table is captured as (its Delta tables');
	// Configured and Current are its names in the configuration and in
	// PostgreSQL, by which a request may name it too.
	Name, Configured, Current string
}

// Request asks the running backfiller to copy a table again: the table
// captured under the name Table (configured, or its Delta tables'), or
// with OID set, the PostgreSQL table OID as a new generation of the table
// its Delta tables call Table. Truncate records a truncate first; with
// Restart, or Truncate, a copy under way starts over. Done receives the
// answer.
type Request struct {
	Table    string
	OID      uint32
	Reason   string
	Truncate bool
	Restart  bool
	Done     chan error
}

// Capture is the rest of capture as the backfiller records the copies:
// the state file's writer, the position acknowledged, and the status the
// source reports.
type Capture interface {
	// Record writes the records of copies, and forgets those of the
	// tables forget, and returns once they are durable.
	Record(ctx context.Context, recs []*store.Backfill, forget []uint32) error
	// Sync returns once what was queued before it is durable.
	Sync(ctx context.Context) error
	// Failed returns the error the state file's writer failed with, if
	// any: then the backfiller stops.
	Failed() error
	// Confirmed returns the position last acknowledged to PostgreSQL.
	Confirmed() store.LSN
	// Note records a copy's progress for the source's status, and the
	// times it started over.
	Note(rec *store.Backfill, running bool, restarts int64)
}

// Catalog describes a table and decodes its rows the way the stream does.
type Catalog interface {
	// Query returns the query of the catalog rows that describe the
	// table oid: one statement, which may join a list of statements
	// sent at once.
	Query(oid uint32) string
	// Relation describes the table oid, captured as table, from the
	// rows Query returned (its key LSN unset).
	Relation(ctx context.Context, conn *pgx.Conn, rows [][][]byte, oid uint32, table string) (*store.Relation, error)
	// Decoder returns a decoder of rel's rows in COPY text that
	// decodes into values and lines, and into new memory once they are
	// used up.
	Decoder(rel *store.Relation, values []store.Value, lines []byte) Decoder
}

// Decoder decodes the lines of a table's COPY text output.
type Decoder interface {
	// Decode decodes one line. When texts is not nil, it receives the
	// text of each column (unescaped; nil for NULL), which shares the
	// decoded values' memory.
	Decode(line []byte, texts [][]byte) ([]store.Value, error)
	// Size returns how many values, and bytes of lines, the rows decoded
	// take.
	Size() (values, lineBytes int)
}

// Backfiller copies the tables with a pending backfill, one at a time, on
// its own SQL connection, while the session streams.
type Backfiller struct {
	cfg    Config
	conn   *pgx.Conn
	stream Stream
	tables []Table
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
	// from the rows Catalog.Query returned (catalog).
	rel     *store.Relation
	catalog [][][]byte
	// chunks holds the memory of the copy's durable chunks, for the
	// next ones; nil with Config.Off.ChunkMemory
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

// New returns the backfiller of a session.
func New(cfg Config) *Backfiller {
	nonce := make([]byte, 8)
	rand.Read(nonce)
	b := &Backfiller{cfg: cfg, stream: cfg.Stream, tables: append([]Table(nil), cfg.Tables...), log: cfg.Logger, nonce: hex.EncodeToString(nonce)}
	if rps := cfg.RowsPerSecond; rps > 0 {
		b.limiter = rate.NewLimiter(rate.Limit(rps), max(rps, cfg.ChunkRows))
	}
	return b
}

// Run runs the backfiller until ctx is cancelled. A copy that fails (a
// lost connection, a table that is gone) is logged and tried again with
// backoff; only a failure of the state file ends it.
func (b *Backfiller) Run(ctx context.Context) error {
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
		case b.cfg.Capture.Failed() != nil:
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
		case req := <-b.cfg.Requests:
			req.Done <- b.resync(ctx, req)
		case <-time.After(wait):
		}
	}
}

// next copies the next table with a pending backfill, or waits for a
// resync when there is none.
func (b *Backfiller) next(ctx context.Context) error {
	if b.conn == nil {
		conn, err := b.cfg.Connect(ctx)
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
		case req := <-b.cfg.Requests:
			req.Done <- b.resync(ctx, req)
			return nil
		}
	}
	err = b.copyTable(ctx, rec)
	if errors.Is(err, errResyncAgain) || errors.Is(err, errGaveWay) {
		return nil
	}
	return err
}

// records reads the copies recorded in the state file.
func (b *Backfiller) records() (recs map[uint32]*store.Backfill, err error) {
	err = b.cfg.DB.View(func(r *store.Reader) (err error) { recs, err = r.Backfills(); return err })
	return recs, err
}

// pending returns the first configured table (in the order of
// Config.Tables) whose copy is recorded and not done, or nil.
func (b *Backfiller) pending() (*store.Backfill, error) {
	recs, err := b.records()
	if err != nil {
		return nil, fmt.Errorf("read backfills: %w", err)
	}
	var gaveWay *store.Backfill
	for _, c := range b.tables {
		rec := recs[c.OID]
		switch {
		case rec == nil || rec.Done || (rec.Reason == ReasonAdded && !b.cfg.Snapshot):
			continue
		case b.gaveWay[c.OID]:
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
func (b *Backfiller) othersPending(oid uint32) (bool, error) {
	recs, err := b.records()
	if err != nil {
		return false, fmt.Errorf("read backfills: %w", err)
	}
	for _, c := range b.tables {
		if rec := recs[c.OID]; c.OID != oid && rec != nil && !rec.Done && (rec.Reason != ReasonAdded || b.cfg.Snapshot) {
			return true, nil
		}
	}
	return false, nil
}

// table returns the captured table named name, or nil.
func (b *Backfiller) table(name string) *Table {
	var c *Table
	for i, t := range b.tables {
		if t.Name == name || t.Configured == name || t.Current == name {
			c = &b.tables[i]
		}
	}
	return c
}

// resync records a copy of a table again (see Source.Resync and
// Source.askBackfill).
func (b *Backfiller) resync(ctx context.Context, req Request) error {
	c := b.table(req.Table)
	if c == nil {
		return fmt.Errorf("resync %s: not a captured table (source.tables)", req.Table)
	}
	if req.OID != 0 && req.OID != c.OID {
		// A new generation: the stream captures it from the truncate
		// the caller queued.
		c.OID = req.OID
	}
	oid := c.OID
	recs, err := b.records()
	if err != nil {
		return fmt.Errorf("resync %s: %w", req.Table, err)
	}
	old := recs[oid]
	if !req.Truncate && !req.Restart && old != nil && !old.Done {
		return nil // asked for again: the copy is recorded
	}
	// A copy started over keeps the truncate of the one under way, which
	// may not be queued yet.
	truncate := req.Truncate || old != nil && !old.Done && old.Truncate
	rec := &store.Backfill{OID: oid, Table: c.Name, Reason: req.Reason, Started: time.Now().UTC(), Truncate: truncate}
	var forget []uint32
	for other, o := range recs {
		if other != oid && o.Table == rec.Table {
			forget = append(forget, other)
		}
	}
	b.cfg.Capture.Note(rec, false, 0)
	if err := b.cfg.Capture.Record(ctx, []*store.Backfill{rec}, forget); err != nil {
		return err
	}
	b.again = true
	b.log.Info("copy of the table's rows recorded", "table", c.Name, "oid", oid, "reason", req.Reason, "truncate_first", truncate)
	return nil
}
