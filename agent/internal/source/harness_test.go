package source

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgcluster"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// harness runs a Source in-process against a database of its own.
type harness struct {
	t        *testing.T
	cluster  *pgcluster.Cluster
	database string
	dsn      string
	conn     *pgx.Conn
	stateDir string
	cfg      Config

	db     *store.DB
	src    *Source
	cancel context.CancelFunc
	done   chan error
	// beforeCommit and failpoint, when set, are the next source's.
	beforeCommit func() error
	failpoint    func(point string) error
	// visibleWait, when set, is the next source's.
	visibleWait time.Duration
}

// shared is the cluster the package's tests share, each in a database of
// its own (pgtest.Shared).
var shared = pgtest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// newHarness returns a harness on a database of its own in the package's
// shared cluster, with a slot of its own (named after the database), or,
// given settings (which are the whole server's), on a cluster of its own.
func newHarness(t *testing.T, settings ...map[string]string) *harness {
	t.Helper()
	if len(settings) > 0 {
		return newHarnessOn(t, pgtest.Start(t, settings...))
	}
	return newHarnessOn(t, shared.Cluster(t))
}

// newHarnessAlone is newHarness on a cluster of the test's own, for a test
// that does what other tests must not see: crash the server, end every
// walsender.
func newHarnessAlone(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, pgtest.Start(t))
}

// newHarnessOn returns a harness on a new database of cluster c.
func newHarnessOn(t *testing.T, c *pgcluster.Cluster) *harness {
	t.Helper()
	name := pgtest.NewDatabase(t, c)
	h := &harness{t: t, cluster: c, database: name, dsn: c.DSN(name), stateDir: t.TempDir()}
	h.conn = pgtest.Conn(t, h.dsn)
	h.cfg = Config{
		DSN:            h.dsn,
		Slot:           name,
		Publication:    "lakeside_test",
		Snapshot:       true,
		StatusInterval: time.Second,
		Logger:         slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	t.Cleanup(func() {
		if h.src != nil {
			h.stop()
		}
	})
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

// xid runs sql in one transaction and returns the transaction's xid.
func (h *harness) xid(sql string, args ...any) uint32 {
	h.t.Helper()
	ctx := context.Background()
	var xid int64
	err := pgx.BeginFunc(ctx, h.conn, func(tx pgx.Tx) error {
		if sql != "" {
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, "SELECT (pg_current_xact_id()::text::bigint % 4294967296)").Scan(&xid)
	})
	if err != nil {
		h.t.Fatalf("%s: %v", sql, err)
	}
	return uint32(xid)
}

func (h *harness) start() {
	h.t.Helper()
	db, err := store.Open(h.stateDir, store.Options{})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.db, h.cancel, h.done = db, cancel, make(chan error, 1)
	h.src = New(h.cfg, db)
	h.src.beforeCommit, h.src.visibleWait = h.beforeCommit, h.visibleWait
	h.src.failpoint.set(h.failpoint)
	go func() { h.done <- h.src.Run(ctx) }()
}

// stop stops the source and returns what Run returned.
func (h *harness) stop() error {
	h.t.Helper()
	h.cancel()
	var err error
	select {
	case err = <-h.done:
	case <-time.After(15 * time.Second):
		h.t.Fatal("source did not stop within 15s")
	}
	h.db.Close()
	h.src = nil
	return err
}

// runUntilError starts the source and expects Run to fail by itself.
func (h *harness) runUntilError() error {
	h.t.Helper()
	h.start()
	select {
	case err := <-h.done:
		h.db.Close()
		h.src = nil
		if err == nil {
			h.t.Fatal("Run returned nil, want an error")
		}
		return err
	case <-time.After(30 * time.Second):
		h.t.Fatal("Run did not fail within 30s")
	}
	return nil
}

// waitStreaming waits until the source streams.
func (h *harness) waitStreaming() {
	h.t.Helper()
	select {
	case <-h.src.Ready():
	case err := <-h.done:
		h.t.Fatalf("source stopped before streaming: %v", err)
	case <-time.After(60 * time.Second):
		h.t.Fatal("source did not start streaming within 60s")
	}
}

// waitXid waits until the transaction with the given xid is in the queue.
func (h *harness) waitXid(xid uint32) {
	h.t.Helper()
	h.waitFor("transaction "+strconv.FormatUint(uint64(xid), 10)+" queued", func(r *store.Reader) bool {
		found := false
		_ = r.Txns(0, func(hd *store.TxnHeader, _ *store.TxnCursor) error {
			if hd.Xid == xid && !hd.Snapshot {
				found = true
				return store.ErrStopScan
			}
			return nil
		})
		return found
	})
}

func (h *harness) waitFor(what string, cond func(r *store.Reader) bool) {
	h.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		ok := false
		if err := h.db.View(func(r *store.Reader) error { ok = cond(r); return nil }); err != nil {
			h.t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case err := <-h.done:
			h.t.Fatalf("source stopped while waiting for %s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	h.t.Fatalf("timed out waiting for %s", what)
}

// txns reads the whole queue.
func (h *harness) txns() ([]*store.Txn, map[store.RelationKey]*store.Relation) {
	h.t.Helper()
	var txns []*store.Txn
	var rels map[store.RelationKey]*store.Relation
	err := h.db.View(func(r *store.Reader) error {
		var err error
		if txns, err = r.ReadTxns(0, 0); err != nil {
			return err
		}
		rels, err = r.Relations()
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return txns, rels
}

// waitCaughtUp waits until the checkpoint reaches the server's current WAL
// position, i.e. everything committed so far is durable in the queue.
func (h *harness) waitCaughtUp() {
	h.t.Helper()
	var lsnText string
	if err := h.conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&lsnText); err != nil {
		h.t.Fatal(err)
	}
	target, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		h.t.Fatal(err)
	}
	h.waitFor("checkpoint at "+lsnText, func(r *store.Reader) bool {
		cp, err := r.Checkpoint()
		return err == nil && cp >= store.LSN(target)
	})
}

// replica is the state of tables rebuilt from the queue, keyed by table and
// by the text of the key columns.
type replica map[string]map[string][]store.Value

// replay applies queued transactions the way a mirror would, strictly:
// an insert of a key held, or an update or delete of a key not held, is
// an error. A copied row (store.OpSnapshot) replaces the row of its key.
func replay(txns []*store.Txn, rels map[store.RelationKey]*store.Relation) (replica, error) {
	return replayWith(txns, rels, false)
}

// replayWith is replay; with lenient, an update of a key not held sets its
// row and a delete of a key not held does nothing, as for a table being
// copied while it changes.
func replayWith(txns []*store.Txn, rels map[store.RelationKey]*store.Relation, lenient bool) (replica, error) {
	out := replica{}
	keyOf := func(rel *store.Relation, vals []store.Value) string {
		var b strings.Builder
		for i, c := range rel.Columns {
			if c.Key {
				fmt.Fprintf(&b, "%d:%s|", vals[i].Int, vals[i].Bytes)
			}
		}
		return b.String()
	}
	for _, txn := range txns {
		for _, c := range txn.Changes {
			rel := rels[c.Relation]
			if rel == nil {
				return nil, fmt.Errorf("unknown relation %+v", c.Relation)
			}
			tbl := out[rel.QualifiedName()]
			if tbl == nil {
				tbl = map[string][]store.Value{}
				out[rel.QualifiedName()] = tbl
			}
			switch c.Op {
			case store.OpSnapshot:
				tbl[keyOf(rel, c.New)] = c.New
			case store.OpInsert:
				k := keyOf(rel, c.New)
				if _, dup := tbl[k]; dup {
					return nil, fmt.Errorf("%s: insert of existing key %s at %s", rel.QualifiedName(), k, txn.EndLSN)
				}
				tbl[k] = c.New
			case store.OpUpdate:
				oldKey := keyOf(rel, c.New)
				if c.Old != nil {
					oldKey = keyOf(rel, c.Old)
				}
				prev, ok := tbl[oldKey]
				if !ok && !lenient {
					return nil, fmt.Errorf("%s: update of missing key %s at %s", rel.QualifiedName(), oldKey, txn.EndLSN)
				}
				row := append([]store.Value(nil), c.New...)
				for i := range row {
					if row[i].Kind == store.KindUnchanged {
						if prev == nil {
							return nil, fmt.Errorf("%s: update of missing key %s leaves values out at %s", rel.QualifiedName(), oldKey, txn.EndLSN)
						}
						row[i] = prev[i]
					}
				}
				delete(tbl, oldKey)
				tbl[keyOf(rel, row)] = row
			case store.OpDelete:
				k := keyOf(rel, c.Old)
				if _, ok := tbl[k]; !ok && !lenient {
					return nil, fmt.Errorf("%s: delete of missing key %s at %s", rel.QualifiedName(), k, txn.EndLSN)
				}
				delete(tbl, k)
			case store.OpTruncate:
				clear(tbl)
			}
		}
	}
	return out, nil
}

// dropSlot drops the test slot once its walsender has gone: a stopped
// source's server process can take a moment to exit.
func (h *harness) dropSlot() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := h.conn.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, h.cfg.Slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("drop slot: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// catchUpFunc is Threads that tells only CatchUp, to itself.
type catchUpFunc func(catchingUp bool)

func (f catchUpFunc) CatchUp(catchingUp bool) { f(catchingUp) }
func (f catchUpFunc) CatchUpCommit(bool)      {}

// logRecord keeps what a source logs, to wait for a line.
type logRecord struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecord) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// wait waits until the log holds text, for up to 30 seconds.
func (l *logRecord) wait(t *testing.T, text string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		l.mu.Lock()
		found := bytes.Contains(l.buf.Bytes(), []byte(text))
		l.mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q after 30 s", text)
		}
	}
}

// recordLog makes the next source log at DEBUG, into the record it returns
// as well as into the test's output.
func (h *harness) recordLog() *logRecord {
	l := &logRecord{}
	h.cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(h.t.Output(), l), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l
}
