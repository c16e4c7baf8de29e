package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lakeside/lakeside/internal/tuning"
)

// Table is a source table, by schema and name as they appear in pg_class.
type Table struct{ Schema, Name string }

// String returns "schema.name".
func (t Table) String() string { return t.Schema + "." + t.Name }

// Quoted returns the table as a safely quoted SQL identifier.
func (t Table) Quoted() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// Config configures a Source.
type Config struct {
	// DSN is the PostgreSQL connection string (keyword/value or URL).
	DSN string
	// Slot and Publication name the replication slot and publication,
	// created when missing.
	Slot        string
	Publication string
	// Tables are the tables to capture.
	Tables []Table
	// Snapshot asks for a copy of the tables' existing rows: the initial
	// snapshot, and a backfill of a table configured later (backfill.go).
	Snapshot bool
	// BackfillChunkRows is the number of rows a backfill copies per
	// chunk (zero: DefaultBackfillChunkRows); at most that many are held
	// in memory, fewer when they are wide (see backfill.MaxChunkBytes).
	BackfillChunkRows int
	// BackfillRowsPerSecond, when not zero, bounds the rows a backfill
	// copies per second.
	BackfillRowsPerSecond int
	// StatusInterval is the longest time between two standby status updates.
	StatusInterval time.Duration
	// LogicalDecodingWorkMem, when not zero, sets logical_decoding_work_mem
	// (in bytes, rounded down to whole kilobytes) for the replication
	// session: the memory the walsender decodes transactions in before it
	// streams the largest one in progress. Zero leaves the server's setting.
	LogicalDecodingWorkMem int64
	// MaxValueBytes is the largest value capture keeps (zero:
	// DefaultMaxValueBytes): a larger one is queued as store.KindTooLarge,
	// its size in place of its bytes, which the Delta tables store as
	// null and list in _replaced.
	MaxValueBytes int64
	// Durable, when set, is told after each write that made changes
	// durable in the queue (from the writer's goroutine; it must not
	// block).
	Durable Notifier
	// Threads, when set, is told what capture does (see Threads).
	Threads Threads
	// Backpressure, when set, is asked before each read from PostgreSQL
	// (see Backpressure).
	Backpressure Backpressure
	// WatchInterval is how often the catalog watcher looks at the
	// captured tables in PostgreSQL's catalog (see watcher.go); zero means
	// DefaultWatchInterval. Negative runs no watcher, for tests that count
	// what the stream records by itself.
	WatchInterval time.Duration
	// Backfill, when set, is asked to copy the rows a captured table holds
	// into the queue, because capture missed them: table is the name the
	// table is captured as (its Delta tables', store.Relation.Table), oid
	// the PostgreSQL table to copy, reason why (ReasonRecreated). It is
	// called from the catalog watcher's goroutine once the change that
	// made the copy necessary (the re-created table's truncate) is durable
	// in the queue, and must not wait for capture to go on: it returns
	// once the copy is asked for (recorded, or done). The request is
	// recorded in the state file until Backfill returns nil, so after a
	// crash the same table and OID may be asked for again; nil leaves the
	// request recorded and the rows not copied.
	Backfill func(ctx context.Context, table string, oid uint32, reason string) error
	// Off says which performance tricks are off. Capture reads PollConn:
	// the replication connection is then an ordinary one, watched by Go's
	// network poller, instead of a pollConn (tuning_pollconn.go). The
	// backfiller is handed the whole value and reads ChunkMemory and
	// ChunkQuery (backfill.Config.Off).
	Off tuning.Off
	// Logger receives state changes; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultMaxValueBytes is the largest value capture keeps unless
// Config.MaxValueBytes says otherwise.
const DefaultMaxValueBytes = 256 << 20

// DefaultWatchInterval is how often the catalog watcher looks at the
// captured tables unless Config.WatchInterval says otherwise: a dropped and
// re-created table, or a schema change with no row change after it, is
// noticed within about this long.
const DefaultWatchInterval = 2 * time.Second

// ReasonRecreated is the reason Config.Backfill is given for a table that
// was dropped and created again under its configured name: the new table's
// rows are copied as its new generation.
const ReasonRecreated = "recreated"

// ReasonRewritten and ReasonKeysRewritten are the reasons Config.Backfill
// is given for a table that a schema change rewrote (a type change with
// USING, a column added with a volatile default): PostgreSQL sent no
// change for its rows. Either copy starts over a copy under way, whose rows
// copied before the rewrite hold the old values. When the rewrite changed
// a column of the replica identity (ReasonKeysRewritten), the keys the
// Delta tables hold may be gone, and the copy starts with a truncate.
const (
	ReasonRewritten     = "rewritten"
	ReasonKeysRewritten = "keys rewritten"
)

// ReasonEnumRenamed is the reason of the copy of a table with a column
// whose values hold an enum type one of whose values was renamed: the
// rows print the new name, and PostgreSQL sent no change for them. The
// copy starts with a truncate, over a copy under way (the value may be in
// a key).
const ReasonEnumRenamed = "enum value renamed"

// ReasonPartitionAttached and ReasonPartitionDetached are the reasons of
// the copy of a partitioned table a partition was attached to with rows,
// or detached or dropped from: PostgreSQL sent no change for the
// partition's rows.
const (
	ReasonPartitionAttached = "partition attached"
	ReasonPartitionDetached = "partition detached"
)

// sessionParams are set on every connection so that the text form of values
// is the one the decoders expect, whatever the server's defaults.
var sessionParams = map[string]string{
	"application_name":   "lakeside",
	"DateStyle":          "ISO, MDY",
	"IntervalStyle":      "postgres",
	"TimeZone":           "UTC",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
	// money prints as "-$1,234.56": a "$", "," between thousands and
	// two decimals, whatever the server's locale (see moneyValue).
	"lc_monetary": "C",
}

// Notifier is told that there is something new to look at.
type Notifier interface{ Notify() }

// Threads is told what capture does, so that the agent can set its
// scheduler threads by it. Its methods must not block.
type Threads interface {
	// CatchUp is told each time Source.CatchingUp changes: true as
	// capture falls behind by a backlog, false once it has caught up,
	// from the capture goroutine, between two messages.
	CatchUp(catchingUp bool)
	// CatchUpCommit is told before (true) and after (false) each commit
	// of the queue made while capture catches up, from the queue
	// writer's goroutine.
	CatchUpCommit(committing bool)
}

// Backpressure holds capture back: while Pause says true (with a reason),
// the source reads nothing and PostgreSQL keeps the WAL (invariant 6 in
// docs/architecture.md: backpressure, never drop).
type Backpressure interface {
	Pause() (paused bool, reason string)
}

// DecodingWorkMem returns a logical_decoding_work_mem of bytes as
// PostgreSQL writes it, in whole kilobytes ("1024kB"), or "" for zero: the
// server's setting.
func DecodingWorkMem(bytes int64) string {
	if bytes <= 0 {
		return ""
	}
	return strconv.FormatInt(bytes>>10, 10) + "kB"
}

// connConfig parses the DSN and applies the session parameters.
func (c Config) connConfig(replication bool) (*pgconn.Config, error) {
	pc, err := pgconn.ParseConfig(c.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse dsn: %w", err)
	}
	for k, v := range sessionParams {
		pc.RuntimeParams[k] = v
	}
	if replication {
		pc.RuntimeParams["replication"] = "database"
		if mem := DecodingWorkMem(c.LogicalDecodingWorkMem); mem != "" {
			pc.RuntimeParams["logical_decoding_work_mem"] = mem
		}
	}
	return pc, nil
}

// Connect opens an ordinary SQL connection with the session parameters.
func (c Config) Connect(ctx context.Context) (*pgx.Conn, error) {
	pc, err := c.connConfig(false)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cc.Config = *pc
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

// connectReplication opens a logical replication connection.
func (c Config) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	pc, err := c.connConfig(true)
	if err != nil {
		return nil, err
	}
	if !c.Off.PollConn {
		pc.DialFunc = dialPoll
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		var pgErr *pgconn.PgError
		if mem := DecodingWorkMem(c.LogicalDecodingWorkMem); mem != "" && errors.As(err, &pgErr) &&
			strings.Contains(pgErr.Message, "logical_decoding_work_mem") {
			// Asking again would be refused again (a pooler that passes
			// no unknown parameters, a value the server does not take).
			return nil, fatalf("connect for replication: the server refused logical_decoding_work_mem=%s for the session: %w (set source.logical_decoding_work_mem to another size, or to \"server\" to keep the server's setting)", mem, err)
		}
		return nil, fmt.Errorf("connect for replication: %w", err)
	}
	return conn, nil
}
