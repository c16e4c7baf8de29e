package applier

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// harness runs the real source in-process against a database of its own to
// fill the queue, and appliers on the same state.
type harness struct {
	t         *testing.T
	dsn       string
	conn      *pgx.Conn
	stateDir  string
	tablesDir string
	db        *store.DB
	src       *source.Source
	cancel    context.CancelFunc
	done      chan error
	log       *slog.Logger
}

// newHarness creates the tables with setup, then starts capturing tables
// (with an initial snapshot).
func newHarness(t *testing.T, setup string, tables ...string) *harness {
	t.Helper()
	return newHarnessWith(t, nil, setup, tables...)
}

// shared is the cluster the package's tests share, each in a database of
// its own (pgtest.Shared).
var shared = pgtest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// newHarnessWith is newHarness with capture's configuration changed by
// mod, when not nil. The harness has a database of its own on the
// package's shared cluster, and a slot of its own named after it.
func newHarnessWith(t *testing.T, mod func(*source.Config), setup string, tables ...string) *harness {
	t.Helper()
	c := shared.Cluster(t)
	name := pgtest.NewDatabase(t, c)
	dir := t.TempDir()
	h := &harness{t: t, dsn: c.DSN(name), stateDir: dir, tablesDir: filepath.Join(dir, "tables"),
		log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}
	h.conn = pgtest.Conn(t, h.dsn)
	h.exec(setup)
	cfg := source.Config{DSN: h.dsn, Slot: name, Publication: "lakeside_test", Snapshot: true,
		StatusInterval: time.Second, Logger: h.log.With("component", "source")}
	for _, tb := range tables {
		cfg.Tables = append(cfg.Tables, source.Table{Schema: "public", Name: tb})
	}
	if mod != nil {
		mod(&cfg)
	}
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.db, h.cancel, h.done = db, cancel, make(chan error, 1)
	h.src = source.New(cfg, db)
	go func() { h.done <- h.src.Run(ctx) }()
	t.Cleanup(func() {
		h.cancel()
		select {
		case <-h.done:
		case <-time.After(15 * time.Second):
			t.Error("source did not stop")
		}
		h.db.Close()
	})
	select {
	case <-h.src.Ready():
	case err := <-h.done:
		t.Fatalf("source stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("source did not start streaming")
	}
	return h
}

func (h *harness) exec(sqls ...string) {
	h.t.Helper()
	for _, sql := range sqls {
		if _, err := h.conn.Exec(context.Background(), sql); err != nil {
			h.t.Fatalf("%s: %v", sql, err)
		}
	}
}

// caughtUp waits until everything committed so far is durable in the
// queue, and returns the end of the newest transaction queued, which the
// applier's Applied reaches once it has applied everything. (The queue's
// checkpoint may be further on: the WAL that other tests write on the
// shared cluster moves it on, and no transaction of this database holds
// that WAL.)
func (h *harness) caughtUp() store.LSN {
	h.t.Helper()
	var lsnText string
	if err := h.conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsnText); err != nil {
		h.t.Fatal(err)
	}
	target, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var cp store.LSN
		var stats store.QueueStats
		if err := h.db.View(func(r *store.Reader) (err error) {
			if cp, err = r.Checkpoint(); err != nil {
				return err
			}
			stats, err = r.QueueStats()
			return err
		}); err != nil {
			h.t.Fatal(err)
		}
		if cp >= store.LSN(target) {
			return stats.LastLSN
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("queue did not reach %s", lsnText)
	return 0
}

func (h *harness) applier(mod ...func(*Config)) *Applier {
	cfg := Config{TablesDir: h.tablesDir, AppIDPrefix: "lakeside-test", EngineInfo: "lakeside/test", DeletionVectors: true,
		FlushInterval: 50 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: h.log.With("component", "applier")}
	for _, m := range mod {
		m(&cfg)
	}
	a := New(cfg, h.db)
	if err := a.start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return a
}

// apply waits for the queue to catch up and applies all of it.
func (h *harness) apply(a *Applier) {
	h.t.Helper()
	h.caughtUp()
	if err := a.applyAll(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) snapshot(name string) *delta.Snapshot {
	h.t.Helper()
	tb, err := delta.Open(context.Background(), filepath.Join(h.tablesDir, name))
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := tb.Snapshot(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// pgColumn is a column of a PostgreSQL table.
type pgColumn struct{ name, typ string }

func (h *harness) pgColumns(table string) []pgColumn {
	h.t.Helper()
	rows, err := h.conn.Query(context.Background(), `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, table)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []pgColumn
	for rows.Next() {
		var c pgColumn
		if err := rows.Scan(&c.name, &c.typ); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// canonSQL returns an SQL expression giving the canonical text of expr, a
// value of PostgreSQL type typ, as canon formats the Delta value: computed
// by PostgreSQL itself, independently of the applier's conversions.
func canonSQL(expr, typ string) string {
	if strings.HasSuffix(typ, "[]") {
		elemType := strings.TrimSuffix(typ, "[]")
		elem := canonSQL(fmt.Sprintf("(%s)[o]", expr), elemType)
		// An array a list of elements would not hold (more than one
		// dimension, bounds other than from 1) is its text, the one
		// element of an array of strings, or null.
		other := "NULL"
		if stringType(elemType) {
			other = expr + "::text"
		}
		return fmt.Sprintf(`CASE WHEN %[1]s IS NULL THEN NULL WHEN array_ndims(%[1]s) > 1 OR array_lower(%[1]s, 1) <> 1 THEN %[3]s
			ELSE coalesce((SELECT string_agg(coalesce(%[2]s, 'NULL'), '|' ORDER BY o) FROM generate_subscripts(%[1]s, 1) s(o)), '') END`, expr, elem, other)
	}
	base := typ
	if i := strings.IndexByte(base, '('); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "boolean":
		return fmt.Sprintf(`CASE WHEN %[1]s THEN 'true' WHEN NOT %[1]s THEN 'false' END`, expr)
	case "numeric":
		if typ == "numeric" {
			return expr + "::text"
		}
		return fmt.Sprintf(`CASE WHEN %[1]s = 'NaN' THEN NULL ELSE %[1]s::text END`, expr)
	case "bytea":
		return fmt.Sprintf(`encode(%s, 'hex')`, expr)
	case "date":
		return fmt.Sprintf(`CASE WHEN %[1]s > '9999-12-31' THEN '9999-12-31' WHEN %[1]s < '0001-01-01' THEN '0001-01-01' ELSE to_char(%[1]s, 'YYYY-MM-DD') END`, expr)
	case "timestamp without time zone":
		return fmt.Sprintf(`CASE WHEN %[1]s > '9999-12-31 23:59:59.999999' THEN '9999-12-31T23:59:59.999999' WHEN %[1]s < '0001-01-01' THEN '0001-01-01T00:00:00.000000' ELSE to_char(%[1]s, 'YYYY-MM-DD"T"HH24:MI:SS.US') END`, expr)
	case "timestamp with time zone":
		return fmt.Sprintf(`CASE WHEN %[1]s > '9999-12-31 23:59:59.999999+00' THEN '9999-12-31T23:59:59.999999' WHEN %[1]s < '0001-01-01 00:00+00' THEN '0001-01-01T00:00:00.000000' ELSE to_char(%[1]s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') END`, expr)
	case "time without time zone":
		return fmt.Sprintf(`(extract(epoch from %s) * 1000000)::int8::text`, expr)
	case "smallint", "integer", "bigint", "real", "double precision":
		return expr + "::text"
	case "money":
		return expr + "::numeric::text"
	}
	// The type's output function, as pgoutput sends it (char(n) keeps its
	// padding, inet its netmask rules). A composite value whose fields are
	// all null IS NULL, but is not a null.
	return fmt.Sprintf(`CASE WHEN num_nulls(%[1]s) = 1 THEN NULL ELSE concat(%[1]s) END`, expr)
}

// stringType reports whether the applier maps the PostgreSQL type typ
// (format_type's name) to a Delta string.
func stringType(typ string) bool {
	base := typ
	if i := strings.IndexByte(base, '('); i >= 0 {
		base = base[:i]
	}
	switch base {
	case "boolean", "smallint", "integer", "bigint", "real", "double precision", "bytea", "date",
		"timestamp without time zone", "timestamp with time zone", "time without time zone", "money":
		return false
	case "numeric":
		return typ == "numeric"
	}
	return true
}

// canon formats a value read from a Delta table.
func canon(v any, dt delta.DataType) string {
	if v == nil {
		return "NULL"
	}
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x)
	case int8, int16, int32, int64:
		return fmt.Sprint(x)
	case float32:
		return canonFloat(float64(x), 32)
	case float64:
		return canonFloat(x, 64)
	case string:
		return x
	case []byte:
		return hex.EncodeToString(x)
	case delta.Decimal:
		return x.String()
	case time.Time:
		if dt == delta.TypeDate {
			return x.UTC().Format("2006-01-02")
		}
		return x.UTC().Format("2006-01-02T15:04:05.000000")
	case []any:
		parts := make([]string, len(x))
		var et delta.DataType
		if at, ok := dt.(*delta.ArrayType); ok {
			et = at.ElementType
		}
		for i, e := range x {
			parts[i] = canon(e, et)
		}
		return strings.Join(parts, "|")
	}
	return fmt.Sprintf("%T:%v", v, v)
}

func canonFloat(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// pgRows returns the canonical rows of a PostgreSQL table, sorted.
func (h *harness) pgRows(table string) []string {
	h.t.Helper()
	cols := h.pgColumns(table)
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = canonSQL(pgx.Identifier{c.name}.Sanitize(), c.typ)
	}
	var out []string
	for _, row := range h.textRows("SELECT " + strings.Join(exprs, ", ") + " FROM " + table) {
		out = append(out, strings.Join(row, " ‖ "))
	}
	slices.Sort(out)
	return out
}

// deltaRows returns the canonical live rows of a mirror snapshot, with the
// columns the PostgreSQL table has now, sorted.
func (h *harness) deltaRows(s *delta.Snapshot, table string) []string {
	h.t.Helper()
	cols := h.pgColumns(table)
	rows, err := s.ReadRows(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	st := s.Schema()
	_, del := st.Field(colDeleted)
	var out []string
	for _, r := range rows {
		if del >= 0 && r[del] == true {
			continue
		}
		parts := make([]string, len(cols))
		for i, c := range cols {
			f, j := st.Field(c.name)
			if f == nil {
				h.t.Fatalf("mirror has no column %q", c.name)
			}
			parts[i] = canon(r[j], f.Type)
		}
		out = append(out, strings.Join(parts, " ‖ "))
	}
	slices.Sort(out)
	return out
}

// checkMirror compares the mirror with the PostgreSQL table row by row.
func (h *harness) checkMirror(table string) {
	h.t.Helper()
	h.compare("mirror of "+table, h.pgRows(table), h.deltaRows(h.snapshot("public."+table), table))
}

func (h *harness) compare(what string, want, got []string) {
	h.t.Helper()
	if slices.Equal(want, got) {
		return
	}
	h.t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	shown := 0
	for _, w := range want {
		if !slices.Contains(got, w) && shown < 5 {
			h.t.Errorf("  missing: %s", w)
			shown++
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) && shown < 10 {
			h.t.Errorf("  extra:   %s", g)
			shown++
		}
	}
}

func sleepMillis(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

// captureFuncs is a Capture of functions; a nil one says not catching up,
// and no backlog.
type captureFuncs struct {
	catchingUp func() bool
	backlogEnd func() store.LSN
	copies     func() []string
}

func (c captureFuncs) Copies() []string {
	if c.copies == nil {
		return nil
	}
	return c.copies()
}

func (c captureFuncs) CatchingUp() bool {
	return c.catchingUp != nil && c.catchingUp()
}

func (c captureFuncs) BacklogEnd() store.LSN {
	if c.backlogEnd == nil {
		return 0
	}
	return c.backlogEnd()
}

// notifyFunc is a Notifier that calls itself.
type notifyFunc func()

func (f notifyFunc) Notify() { f() }

// offsetFunc is a QueueReader that calls itself.
type offsetFunc func() store.LSN

func (f offsetFunc) Offset() store.LSN { return f() }

// textRows runs a query whose columns are all text and returns its rows,
// a null as "NULL".
func (h *harness) textRows(sql string) [][]string {
	h.t.Helper()
	rows, err := h.conn.Query(context.Background(), sql)
	if err != nil {
		h.t.Fatal(err)
	}
	n := len(rows.FieldDescriptions())
	var out [][]string
	for rows.Next() {
		vals := make([]*string, n)
		dst := make([]any, n)
		for i := range vals {
			dst[i] = &vals[i]
		}
		if err := rows.Scan(dst...); err != nil {
			h.t.Fatal(err)
		}
		row := make([]string, n)
		for i, v := range vals {
			row[i] = "NULL"
			if v != nil {
				row[i] = *v
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// tableDirs returns the names in the tables directory, sorted.
func (h *harness) tableDirs() []string {
	h.t.Helper()
	entries, err := os.ReadDir(h.tablesDir)
	if err != nil {
		h.t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	return dirs
}
