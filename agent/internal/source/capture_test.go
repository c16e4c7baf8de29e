package source

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

const itemsTable = `CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`

// workload writes to items from its own connection until stopped: inserts,
// updates and deletes in transactions of 1 to 20 statements, one in ten of
// which is rolled back.
type workload struct {
	stop chan struct{}
	wg   sync.WaitGroup
	err  error
	txns int
}

func startWorkload(t *testing.T, dsn string, firstID int64) *workload {
	t.Helper()
	w := &workload{stop: make(chan struct{})}
	conn := pgtest.Conn(t, dsn)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		ctx := context.Background()
		next := firstID
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				w.err = err
				return
			}
			for i := 0; i < 1+rand.IntN(20); i++ {
				var sql string
				var args []any
				switch r := rand.IntN(10); {
				case r < 5:
					sql, args = `INSERT INTO items VALUES ($1, $2, $3)`, []any{next, rand.Int64N(1000), strings.Repeat("n", rand.IntN(50))}
					next++
				case r < 8:
					sql, args = `UPDATE items SET v = v + 1, note = $2 WHERE id = $1`, []any{rand.Int64N(next), fmt.Sprint(rand.Int())}
				default:
					sql, args = `DELETE FROM items WHERE id = $1`, []any{rand.Int64N(next)}
				}
				if _, err := tx.Exec(ctx, sql, args...); err != nil {
					w.err = err
					tx.Rollback(ctx)
					return
				}
			}
			if rand.IntN(10) == 0 {
				err = tx.Rollback(ctx)
			} else {
				err = tx.Commit(ctx)
				w.txns++
			}
			if err != nil {
				w.err = err
				return
			}
		}
	}()
	return w
}

func (w *workload) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	if w.err != nil {
		t.Fatalf("workload: %v", w.err)
	}
}

// checkItems compares the queue, replayed, with the items table row by row.
func (h *harness) checkItems() {
	h.t.Helper()
	txns, rels := h.txns()
	rep, err := replay(txns, rels)
	if err != nil {
		h.t.Fatalf("replay: %v", err)
	}
	got := rep["public.items"]
	rows, err := h.conn.Query(context.Background(), `SELECT id, v, note FROM items`)
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string][3]any{}
	for rows.Next() {
		var id, v int64
		var note *string
		if err := rows.Scan(&id, &v, &note); err != nil {
			h.t.Fatal(err)
		}
		want[fmt.Sprintf("%d:|", id)] = [3]any{id, v, note}
	}
	if len(got) != len(want) {
		h.t.Errorf("queue replays to %d rows, table has %d", len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		g, ok := got[k]
		note := ""
		if w[2].(*string) != nil {
			note = *w[2].(*string)
		}
		if !ok || g[0].Int != w[0].(int64) || g[1].Int != w[1].(int64) || string(g[2].Bytes) != note {
			if bad++; bad <= 5 {
				h.t.Errorf("row %s: queue has %+v, table has %v", k, g, w)
			}
		}
	}
	if bad > 0 {
		h.t.Fatalf("%d rows differ", bad)
	}
}

func TestSnapshotPlusStreamEqualsTable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable, `INSERT INTO items SELECT g, g % 1000, 'seed' FROM generate_series(1, 100000) g`)
	h.cfg.Tables = []Table{{"public", "items"}}
	w := startWorkload(t, h.dsn, 100001)
	time.Sleep(200 * time.Millisecond)
	h.start()
	h.waitStreaming()
	time.Sleep(time.Second)
	w.finish(t)
	h.waitCaughtUp()
	txns, _ := h.txns()
	if len(txns) == 0 || !txns[0].Snapshot || len(txns[0].Changes) < 100000 {
		t.Fatalf("first queued transaction is not the snapshot of at least 100000 rows")
	}
	for _, c := range txns[0].Changes {
		if c.Op != store.OpSnapshot {
			t.Fatalf("the snapshot holds a change of op %s, want every row a copy (%s)", c.Op, store.OpSnapshot)
		}
	}
	if w.txns < 10 {
		t.Fatalf("workload committed only %d transactions", w.txns)
	}
	t.Logf("snapshot of %d rows, then %d transactions", len(txns[0].Changes), len(txns)-1)
	h.checkItems()
}

func TestLargeTransactionsAreSpooled(t *testing.T) {
	t.Parallel()
	// A tiny decoding budget makes PostgreSQL stream transactions in
	// progress; savepoints make it abort subtransactions inside them.
	h := newHarness(t, map[string]string{"logical_decoding_work_mem": "64kB"})
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, h.conn, func(tx pgx.Tx) error {
		stmts := []string{
			`INSERT INTO items SELECT g, g, 'kept' FROM generate_series(1, 20000) g`,
			`SAVEPOINT a`,
			`INSERT INTO items SELECT g, g, 'rolled back' FROM generate_series(20001, 30000) g`,
			`SAVEPOINT b`,
			`UPDATE items SET note = 'nested, rolled back' WHERE id <= 5000`,
			`ROLLBACK TO SAVEPOINT a`,
			`SAVEPOINT c`,
			`UPDATE items SET v = -v WHERE id % 2 = 0`,
			`RELEASE SAVEPOINT c`,
			`DELETE FROM items WHERE id % 3 = 0`,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A large transaction that aborts as a whole leaves nothing.
	tx, err := h.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO items SELECT g, g, 'aborted' FROM generate_series(100001, 130000) g`); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	last := h.xid(`INSERT INTO items VALUES (1000000, 1, 'last')`)
	h.waitXid(last)
	var streamed int64
	if err := h.conn.QueryRow(ctx, `SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots`).Scan(&streamed); err != nil {
		t.Fatal(err)
	}
	if streamed == 0 {
		t.Fatal("PostgreSQL streamed no transaction; the test did not exercise spooling")
	}
	txns, _ := h.txns()
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if c.Op == store.OpInsert && (string(c.New[2].Bytes) == "aborted" || string(c.New[2].Bytes) == "rolled back") {
				t.Fatalf("captured a change of an aborted (sub)transaction: %+v", c)
			}
		}
	}
	var spools int
	if err := h.db.View(func(r *store.Reader) (err error) { spools, err = r.Spools(); return err }); err != nil {
		t.Fatal(err)
	}
	if spools != 0 {
		t.Fatalf("%d spools left open after every transaction ended", spools)
	}
	t.Logf("%d transactions streamed by PostgreSQL", streamed)
	h.checkItems()
}

// TestDecodingWorkMemIsSetForTheSession checks that LogicalDecodingWorkMem
// reaches the walsender: on a server at PostgreSQL's default of 64MB, a
// transaction of a few megabytes is streamed to the agent, and spooled,
// while it is still open, instead of being sent whole after its commit.
func TestDecodingWorkMemIsSetForTheSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.LogicalDecodingWorkMem = 64 << 10
	h.start()
	h.waitStreaming()
	ctx := context.Background()
	tx, err := h.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO items SELECT g, g, 'open' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := tx.QueryRow(ctx, "SELECT (pg_current_xact_id()::text::bigint % 4294967296)").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the open transaction spooled", func(r *store.Reader) bool {
		n, err := r.Spools()
		return err == nil && n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitXid(uint32(xid))
	h.checkItems()
}

// TestDecodingWorkMemRefusedIsFatal checks that a session setting the
// server refuses stops the agent with the key to change, instead of a retry
// that would be refused again.
func TestDecodingWorkMemRefusedIsFatal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.LogicalDecodingWorkMem = 32 << 10 // under PostgreSQL's 64kB
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "logical_decoding_work_mem=32kB") ||
		!strings.Contains(err.Error(), `source.logical_decoding_work_mem to another size, or to "server"`) {
		t.Fatalf("err = %v, want a fatal error naming the refused setting and the key to change", err)
	}
	t.Log(err)
}

func TestRestartResumesWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"logical_decoding_work_mem": "64kB"})
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	w := startWorkload(t, h.dsn, 1)
	for i := 0; i < 5; i++ {
		h.start()
		h.waitStreaming()
		time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
		if err := h.stop(); err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
	}
	w.finish(t)
	h.start()
	h.waitCaughtUp()
	h.checkItems()
}

// streamingItems starts capture of the items table, after running the
// extra SQL, and waits until it streams.
func streamingItems(t *testing.T, extra ...string) *harness {
	t.Helper()
	h := newHarness(t)
	h.exec(append([]string{itemsTable}, extra...)...)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	return h
}

func TestReconnectsAfterConnectionLossAndServerCrash(t *testing.T) {
	t.Parallel()
	// It ends every walsender and crashes the server: on a cluster of
	// its own.
	h := newHarnessAlone(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	ctx := context.Background()

	// The walsender is terminated by an administrator.
	h.xid(`INSERT INTO items VALUES (1, 1, 'before terminate')`)
	h.exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_replication`)
	h.xid(`INSERT INTO items VALUES (2, 2, 'after terminate')`)

	// The server crashes and comes back.
	if err := h.cluster.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := h.cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	h.conn = pgtest.Conn(t, h.dsn)
	last := h.xid(`INSERT INTO items VALUES (3, 3, 'after crash')`)
	h.waitXid(last)
	h.checkItems()
	if st := h.src.Status(); st.State != "streaming" {
		t.Fatalf("state after reconnect = %q", st.State)
	}
}

// capturedThenStopped runs a source until it captured one transaction, and
// stops it.
func capturedThenStopped(t *testing.T, settings ...map[string]string) *harness {
	h := newHarness(t, settings...)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, NULL)`))
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSlotDroppedWhileStoppedIsFatal(t *testing.T) {
	t.Parallel()
	h := capturedThenStopped(t)
	h.dropSlot()
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("err = %v, want a fatal error saying the slot no longer exists", err)
	}
}

func TestSlotInvalidatedWhileStoppedIsFatal(t *testing.T) {
	t.Parallel()
	h := capturedThenStopped(t, map[string]string{"max_slot_wal_keep_size": "1MB"})
	// More WAL than the slot may keep, and a checkpoint that removes it.
	for range 4 {
		h.exec(`INSERT INTO items SELECT g, g, repeat('x', 500) FROM generate_series(100, 2100) g ON CONFLICT (id) DO UPDATE SET v = items.v + 1`,
			`SELECT pg_switch_wal()`)
	}
	h.exec(`CHECKPOINT`)
	var status string
	if err := h.conn.QueryRow(context.Background(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, h.cfg.Slot).Scan(&status); err != nil || status != "lost" {
		t.Fatalf("slot wal_status = %q, %v; the test needs an invalidated slot", status, err)
	}
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "invalidated") || !strings.Contains(err.Error(), "max_slot_wal_keep_size") {
		t.Fatalf("err = %v, want a fatal error saying the slot was invalidated, with the fix", err)
	}
}

func TestSlotRecreatedWhileStoppedIsFatal(t *testing.T) {
	t.Parallel()
	h := capturedThenStopped(t)
	h.dropSlot()
	h.exec(`INSERT INTO items VALUES (2, 2, 'lost to the slot')`)
	h.exec(`SELECT pg_create_logical_replication_slot('` + h.cfg.Slot + `', 'pgoutput')`)
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "beyond this agent's checkpoint") {
		t.Fatalf("err = %v, want a fatal error about the slot being ahead", err)
	}
}

func TestExistingSlotWithoutStateIsFatal(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable, `SELECT pg_create_logical_replication_slot('`+h.cfg.Slot+`', 'pgoutput')`)
	h.cfg.Tables = []Table{{"public", "items"}}
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "pg_drop_replication_slot('"+h.cfg.Slot+"')") {
		t.Fatalf("err = %v, want a fatal error naming the SQL to drop the slot", err)
	}
}

func TestPreflightNamesTheFix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"wal_level": "replica"})
	h.exec(itemsTable,
		`CREATE TABLE nokey (a int)`,
		`CREATE ROLE reader LOGIN`,
		`GRANT SELECT ON items TO reader`)
	cfg := h.cfg
	cfg.Tables = []Table{{"public", "items"}, {"public", "nokey"}, {"public", "missing"}}
	cfg.DSN = h.dsn + " user=reader"
	conn, err := cfg.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	checks, err := Preflight(context.Background(), conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantFixes := map[string]string{
		"wal_level is logical":                   "ALTER SYSTEM SET wal_level = logical;",
		"role reader may replicate":              `ALTER ROLE "reader" WITH REPLICATION;`,
		"table public.nokey identifies its rows": `ALTER TABLE "public"."nokey" REPLICA IDENTITY FULL;`,
		"table public.nokey can be read":         `GRANT SELECT ON "public"."nokey" TO "reader";`,
		"table public.missing exists":            "create the table",
	}
	for _, c := range checks {
		fix, ok := wantFixes[c.Name]
		if !ok {
			if !c.OK {
				t.Errorf("unexpected failed check: %s", c)
			}
			continue
		}
		delete(wantFixes, c.Name)
		if c.OK || !strings.Contains(c.Fix, fix) {
			t.Errorf("check %q: ok=%v fix=%q, want failure with fix containing %q", c.Name, c.OK, c.Fix, fix)
		}
	}
	for name := range wantFixes {
		t.Errorf("no check %q", name)
	}
	// The source refuses to start, with the same checks in its error.
	h.cfg = cfg
	err = h.runUntilError()
	var pe *PreflightError
	if !errors.As(err, &pe) || !IsFatal(err) || !strings.Contains(err.Error(), "wal_level = logical") {
		t.Fatalf("err = %v, want a fatal preflight error", err)
	}
}

func TestIdleSlotConfirmsServerWALEnd(t *testing.T) {
	t.Parallel()
	h := streamingItems(t, `CREATE TABLE other (a int)`)
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, NULL)`))
	// Write WAL that the publication does not include.
	h.exec(`INSERT INTO other SELECT generate_series(1, 10000)`)
	var target string
	if err := h.conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var caughtUp bool
		err := h.conn.QueryRow(context.Background(),
			`SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, target, h.cfg.Slot).Scan(&caughtUp)
		if err != nil {
			t.Fatal(err)
		}
		if caughtUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn did not reach %s while idle", target)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The status says capture is not behind: what an idle walsender has
	// decoded counts as received, so later stages do not hold back for a
	// capture that has nothing left to catch up.
	lsn, _ := pglogrepl.ParseLSN(target)
	for st := h.src.Status(); st.ReceivedLSN < store.LSN(lsn); st = h.src.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("received %s, server at %s: an idle capture still looks behind", st.ReceivedLSN, st.ServerWALEnd)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.checkItems()
}

func TestCapturesOverTCP(t *testing.T) {
	t.Parallel()
	// The replication connection works over TCP as over the Unix socket
	// the other tests use: a transaction large enough to be streamed in
	// blocks, then small ones.
	h := newHarness(t, map[string]string{"logical_decoding_work_mem": "64kB"})
	h.cfg.DSN = h.cluster.TCPDSN(h.database)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items SELECT g, g, 'over tcp' FROM generate_series(1, 20000) g`))
	h.waitXid(h.xid(`UPDATE items SET v = -v WHERE id % 7 = 0`))
	h.waitXid(h.xid(`DELETE FROM items WHERE id % 5 = 0`))
	h.checkItems()
}

func TestQuietStreamKeepsItsConnection(t *testing.T) {
	t.Parallel()
	// A quiet stream times out its reads (readTimeout) to do its chores:
	// the timeouts must be taken for what they are, not for a lost
	// connection to reconnect from.
	h := streamingItems(t)
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, NULL)`))
	before := h.src.Status()
	time.Sleep(10 * readTimeout)
	after := h.src.Status()
	if after.State != "streaming" || !after.Since.Equal(before.Since) || after.LastError != "" {
		t.Fatalf("after %v of quiet: state %q since %v (was %v), last error %q; want streaming all along",
			10*readTimeout, after.State, after.Since, before.Since, after.LastError)
	}
	h.waitXid(h.xid(`INSERT INTO items VALUES (2, 2, NULL)`))
	h.checkItems()
}

// TestServerWALEndHoldsWhileCatchingUp: while capture drains a backlog, the
// status keeps the server's WAL end it sampled; the walsender's keepalives
// (which carry only how far it has decoded) do not lower it, so the later
// stages see that capture is behind. Threads.CatchUp is told once, when capture
// has caught up, and BacklogEnd then says where the backlog ends: past
// every one of its transactions.
func TestServerWALEndHoldsWhileCatchingUp(t *testing.T) {
	t.Parallel()
	// The server's WAL end is the whole server's: other tests' WAL would
	// have capture fall behind again. On a cluster of its own.
	h := newHarnessAlone(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, NULL)`))
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.exec(`DO $$ BEGIN FOR i IN 2..30001 LOOP INSERT INTO items VALUES (i, i, NULL); COMMIT; END LOOP; END $$`)
	var text string
	if err := h.conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(text)
	end := store.LSN(l)

	var mu sync.Mutex
	var told []string
	var backlogEnd store.LSN
	h.cfg.Threads = catchUpFunc(func(catchingUp bool) {
		st := h.src.Status()
		mu.Lock()
		defer mu.Unlock()
		told = append(told, fmt.Sprintf("%v with %d bytes to go", catchingUp, int64(st.ServerWALEnd)-int64(st.ReceivedLSN)))
		backlogEnd = h.src.BacklogEnd()
	})
	h.start()
	h.waitStreaming()
	sawEnd, sawBehind := false, false
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := h.src.Status()
		if st.ServerWALEnd >= end {
			sawEnd = true
			sawBehind = sawBehind || st.ReceivedLSN < end
		} else if sawEnd {
			t.Fatalf("the server's WAL end went back from %s to %s while capture was at %s", end, st.ServerWALEnd, st.ReceivedLSN)
		}
		var cp store.LSN
		h.db.View(func(r *store.Reader) error { cp, _ = r.Checkpoint(); return nil })
		if cp >= end && st.ReceivedLSN >= end {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("capture did not catch up")
		}
		time.Sleep(time.Millisecond)
	}
	if !sawBehind {
		t.Fatal("the status never showed capture behind the server's WAL end while it drained the backlog")
	}
	h.checkItems()
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || !strings.HasPrefix(told[0], "false with ") {
		t.Fatalf("Threads.CatchUp was told %q, want once that capture caught up", told)
	}
	var left int64
	fmt.Sscanf(told[0], "false with %d", &left)
	if left > catchUpBytes {
		t.Errorf("Threads.CatchUp was told capture caught up with %d bytes to go, more than %d", left, catchUpBytes)
	}
	if backlogEnd < end || backlogEnd != h.src.BacklogEnd() {
		t.Errorf("backlog end %s when capture caught up, %s after; want the same, at or past %s, where the backlog's WAL ended",
			backlogEnd, h.src.BacklogEnd(), end)
	}
}

// TestSchemaVersionsAreKeptApart: every schema change is a new version in
// the history, and each change refers to the version its values follow.
func TestSchemaVersionsAreKeptApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	// The catalog watcher may record the catalog between two of the
	// statements below, as a version of its own (its first look comes as
	// streaming starts); this test counts the versions the stream records.
	h.cfg.WatchInterval = -1
	h.start()
	h.waitStreaming()
	h.xid(`INSERT INTO items VALUES (1, 1, 'a')`)
	h.exec(`ALTER TABLE items ADD COLUMN extra int`)
	h.xid(`INSERT INTO items VALUES (2, 2, 'b', 20)`)
	h.exec(`ALTER TABLE items ADD COLUMN more text`)
	h.xid(`UPDATE items SET more = 'x' WHERE id = 2`)
	h.exec(`ALTER TABLE items DROP COLUMN extra`)
	last := h.xid(`INSERT INTO items VALUES (3, 3, 'c', 'y')`)
	h.waitXid(last)
	// A restart replays nothing, and records no duplicate version.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitStreaming()
	last = h.xid(`INSERT INTO items VALUES (4, 4, 'd', 'z')`)
	h.waitXid(last)

	txns, rels := h.txns()
	var widths []int
	for _, txn := range txns {
		for _, c := range txn.Changes {
			rel := rels[c.Relation]
			if rel == nil {
				t.Fatalf("change refers to unknown version %+v", c.Relation)
			}
			if len(c.New) != len(rel.Columns) {
				t.Fatalf("change with %d values refers to a version with %d columns", len(c.New), len(rel.Columns))
			}
			widths = append(widths, len(c.New))
		}
	}
	if fmt.Sprint(widths) != "[3 4 5 4 4]" {
		t.Fatalf("change widths = %v, want [3 4 5 4 4]", widths)
	}
	if len(rels) != 4 {
		t.Fatalf("%d schema versions recorded, want 4", len(rels))
	}
}

// TestSchemaVersionsCarryColumnIdentity checks that each schema version
// records every column's number, which a rename and a type change keep and
// a drop and re-add does not, and the constant default of a column added
// with one, which rows stored before it read.
func TestSchemaVersionsCarryColumnIdentity(t *testing.T) {
	t.Parallel()
	h := streamingItems(t)
	h.exec(`ALTER TABLE items RENAME COLUMN note TO label`,
		`ALTER TABLE items ALTER COLUMN v TYPE int4`,
		`ALTER TABLE items ADD COLUMN d int DEFAULT 7`,
		`ALTER TABLE items ADD COLUMN note text`)
	h.exec(`ALTER TABLE items DROP COLUMN note`, `ALTER TABLE items ADD COLUMN note text`)
	last := h.xid(`INSERT INTO items VALUES (1, 1, 'a', 8, 'n')`)
	h.waitXid(last)
	_, rels := h.txns()
	var newest *store.Relation
	for _, r := range rels {
		if newest == nil || r.Key.LSN > newest.Key.LSN {
			newest = r
		}
	}
	var got []string
	for _, c := range newest.Columns {
		got = append(got, fmt.Sprintf("%s:%d:%d:%v:%q", c.Name, c.AttNum, c.TypeOID, c.HasMissing, c.Missing))
	}
	want := `[id:1:20:false:"" v:2:23:false:"" label:3:25:false:"" d:4:23:true:"7" note:6:25:false:""]`
	if fmt.Sprint(got) != want {
		t.Fatalf("columns = %v\nwant      %s", got, want)
	}
}
