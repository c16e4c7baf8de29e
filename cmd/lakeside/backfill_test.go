package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/internal/pgtest"
)

// waitBackfilled waits until the running agent reports the copy of table
// done, and returns its status.
func waitBackfilled(t *testing.T, e *e2e, d *daemon, table string) agent.BackfillStatus {
	t.Helper()
	return waitBackfilledSince(t, e, d, table, time.Time{})
}

// waitBackfilledSince waits until the running agent reports a copy of
// table begun after since done, and returns its status.
func waitBackfilledSince(t *testing.T, e *e2e, d *daemon, table string, since time.Time) agent.BackfillStatus {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			t.Fatalf("agent exited; log:\n%s", d.stderr)
		default:
		}
		if st, err := agent.AskStatus(context.Background(), e.stateDir); err == nil {
			for _, b := range st.Backfills {
				if b.Table == table && b.State == agent.BackfillDone && b.Since.After(since) {
					return b
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no copy of %s begun after %s ended in 3 minutes; log:\n%s", table, since.Format(time.RFC3339Nano), d.log())
	return agent.BackfillStatus{}
}

// writeLoad updates table a's rows, and with changeB inserts, updates and
// deletes table b's (ids above 1 million are new), until stopped.
func writeLoad(t *testing.T, dsn string, changeB bool, stop <-chan struct{}) (wait func() error) {
	conn := pgtest.Conn(t, dsn)
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		next := int64(1_000_000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE a SET n = n + 1 WHERE id = $1`, 1+rand.IntN(100)); err != nil {
					return err
				}
				if !changeB {
					return nil
				}
				var err error
				switch r := rand.IntN(10); {
				case r < 3:
					_, err = tx.Exec(ctx, `INSERT INTO b VALUES ($1, $1, 'new')`, next)
					next++
				case r < 8:
					_, err = tx.Exec(ctx, `UPDATE b SET n = n + 1, payload = 'changed' WHERE id = $1`, 1+rand.Int64N(20000))
				default:
					_, err = tx.Exec(ctx, `DELETE FROM b WHERE id = $1`, 1+rand.Int64N(20000))
				}
				return err
			})
			if err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() error { wg.Wait(); return err }
}

const backfillSchema = `
CREATE TABLE a (id int PRIMARY KEY, n int8 NOT NULL);
INSERT INTO a SELECT g, 0 FROM generate_series(1, 100) g;
`

// TestBackfillOfAnAddedTable adds a table with rows to source.tables after
// the first start, while a writer keeps changing it and another table:
// the mirror ends equal to PostgreSQL row by row, the changelog holds the
// copy as snapshot rows, the other table's changes went on between the
// chunks, and the status, the metrics and the log report the copy.
func TestBackfillOfAnAddedTable(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.a"}, "http:\n  listen: "+addr+"\n")
	e.exec(backfillSchema)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.stop(d)

	e.exec(`CREATE TABLE b (id int8 PRIMARY KEY, n int8 NOT NULL, payload text)`,
		`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1, 20000) g`)
	e.setSourceKey("tables", "[public.a, public.b]")
	e.setSourceKey("backfill_chunk_rows", "500")
	stop := make(chan struct{})
	wait := writeLoad(t, e.dsn, true, stop)
	d = e.start()
	done := waitBackfilled(t, e, d, "public.b")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	e.waitApplied(d)

	out, _, code := e.lakeside("status", "--config", e.configPath)
	if code != 0 || !strings.Contains(out, "backfill:") || !strings.Contains(out, "public.b (added) done") {
		t.Errorf("status does not report the backfill: exit %d\n%s", code, out)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf(`lakeside_backfill_rows_total{table="public.b"} %d`, done.RowsCopied), `lakeside_backfill_running{table="public.b"} 0`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	e.stop(d)
	for _, want := range []string{`msg="backfill started"`, `table=public.b reason=added rows_queued=0`, `msg="backfill done"`} {
		if !strings.Contains(d.log(), want) {
			t.Errorf("the log does not say %s:\n%s", want, d.log())
		}
	}

	e.compareMirror(t, "public.b", `SELECT id, n, payload FROM b`, "id", "n", "payload")
	e.compareMirror(t, "public.a", `SELECT id, n FROM a`, "id", "n")
	var first, last int64
	snapshots := int64(0)
	for _, r := range e.deltaRows("public.b_changes") {
		if r["_op"] == "snapshot" {
			lsn := r["_lsn"].(int64)
			if first == 0 || lsn < first {
				first = lsn
			}
			last = max(last, lsn)
			snapshots++
		}
	}
	between := 0
	for _, r := range e.deltaRows("public.a_changes") {
		if lsn := r["_lsn"].(int64); r["_op"] == "update" && lsn > first && lsn < last {
			between++
		}
	}
	if snapshots != done.RowsCopied || snapshots < 15000 || between == 0 {
		t.Fatalf("the changelog of b holds %d snapshot rows (status: %d copied), and that of a %d updates between the first and last chunk; want the copy, and a's changes between its chunks",
			snapshots, done.RowsCopied, between)
	}
	t.Logf("%d rows copied in %d chunks; %d updates of a between the first and last chunk", snapshots, done.Chunks, between)
}

// TestKillDuringBackfill kills the real agent with SIGKILL at random
// moments while it copies a table of 200k rows added after the first
// start, and another table takes a steady write load; after the restarts
// the mirrors equal PostgreSQL and the changelog holds each copied row
// exactly once.
func TestKillDuringBackfill(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.a"})
	e.exec(backfillSchema)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.stop(d)

	const rows = 200000
	e.exec(`CREATE TABLE b (id int8 PRIMARY KEY, n int8 NOT NULL, payload text)`,
		fmt.Sprintf(`INSERT INTO b SELECT g, g, md5(g::text) FROM generate_series(1, %d) g`, rows))
	e.setSourceKey("tables", "[public.a, public.b]")
	e.setSourceKey("backfill_chunk_rows", "2000")
	e.setSourceKey("backfill_rows_per_second", "25000")
	stop := make(chan struct{})
	wait := writeLoad(t, e.dsn, false, stop)
	kills, during := 0, 0
	for kills < 8 {
		d = e.start()
		time.Sleep(time.Duration(1200+rand.IntN(2000)) * time.Millisecond)
		e.sigkill(d, kills)
		kills++
		if strings.Contains(d.log(), "msg=\"backfill started\"") {
			during++
		}
		// The state file, not the log, tells whether the copy is
		// done: a kill can come between the two.
		if rec := e.backfillRecord("public.b"); rec != nil && rec.Done {
			break
		}
	}
	d = e.start()
	var done agent.BackfillStatus
	if rec := e.backfillRecord("public.b"); rec != nil && rec.Done {
		// Done before the last kill: this start does not copy.
		waitState(t, e, d, "streaming")
		done = agent.BackfillStatus{Table: rec.Table, RowsCopied: rec.Rows, Chunks: rec.Chunks}
	} else {
		done = waitBackfilled(t, e, d, "public.b")
	}
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	e.waitApplied(d)
	e.stop(d)
	if during < 2 {
		t.Fatalf("only %d of %d kills came while the table was being copied", during, kills)
	}

	perKey := map[int64]int{}
	for _, r := range e.deltaRows("public.b_changes") {
		if r["_op"] != "snapshot" {
			t.Fatalf("the changelog of b holds a %v", r["_op"])
		}
		perKey[r["id"].(int64)]++
	}
	for id := int64(1); id <= rows; id++ {
		if perKey[id] != 1 {
			t.Fatalf("row %d is in the changelog %d times as a snapshot row, want once", id, perKey[id])
		}
	}
	if len(perKey) != rows || done.RowsCopied != rows {
		t.Fatalf("the changelog copies %d rows, the status %d; want %d", len(perKey), done.RowsCopied, rows)
	}
	e.compareMirror(t, "public.b", `SELECT id, n, payload FROM b`, "id", "n", "payload")
	e.compareMirror(t, "public.a", `SELECT id, n FROM a`, "id", "n")
	t.Logf("%d kills, %d of them while copying; every row copied once in %d chunks", kills, during, done.Chunks)
}

// TestResyncCommand resyncs a captured table with `lakeside resync`: the
// command follows the copy until it is done, the changelog holds a
// truncate and then the rows copied again, and the mirror equals
// PostgreSQL.
func TestResyncCommand(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.a"})
	e.exec(backfillSchema)
	e.setSourceKey("backfill_chunk_rows", "30")
	_, stderr, code := e.lakeside("resync", "--config", e.configPath, "public.a")
	if code == 0 || !strings.Contains(stderr, "needs the running agent") {
		t.Fatalf("resync without an agent: exit %d: %s", code, stderr)
	}
	d := e.start()
	waitState(t, e, d, "streaming")
	e.exec(`UPDATE a SET n = -1 WHERE id <= 10`)
	e.waitApplied(d)
	var before int64
	for _, r := range e.deltaRows("public.a_changes") {
		before = max(before, r["_lsn"].(int64))
	}
	out, stderr, code := e.lakeside("resync", "--config", e.configPath, "public.a")
	if code != 0 || !strings.Contains(out, "resync of public.a recorded") || !strings.Contains(out, "public.a (resync) done, 100 rows in 4 chunks") {
		t.Fatalf("resync: exit %d\n%s%s", code, out, stderr)
	}
	e.exec(`DELETE FROM a WHERE id = 100`)
	e.waitApplied(d)
	e.stop(d)
	ops := map[string]int{}
	var truncateLSN, firstCopy int64
	for _, r := range e.deltaRows("public.a_changes") {
		if r["_lsn"].(int64) <= before {
			continue
		}
		op := r["_op"].(string)
		ops[op]++
		switch lsn := r["_lsn"].(int64); {
		case op == "truncate":
			truncateLSN = lsn
		case op == "snapshot" && (firstCopy == 0 || lsn < firstCopy):
			firstCopy = lsn
		}
	}
	if ops["truncate"] != 1 || ops["snapshot"] != 100 || ops["delete"] != 1 || truncateLSN >= firstCopy {
		t.Fatalf("after the resync the changelog holds %v (truncate at %d, first copied row at %d); want a truncate, then 100 rows copied, and the delete", ops, truncateLSN, firstCopy)
	}
	e.compareMirror(t, "public.a", `SELECT id, n FROM a`, "id", "n")
}

// TestTableChangedWhileItIsCopied renames a table, moves it to another
// schema, drops and creates it again with other rows, or rewrites its
// values or its keys (USING), while a paced resync copies it and a writer
// changes it: the copy follows the table (or gives way to a copy of the
// new one, or of the rewritten one), and the mirror ends equal to it.
func TestTableChangedWhileItIsCopied(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, now string
		ddl       []string
	}{
		{"renamed", "stock2", []string{`ALTER TABLE stock RENAME TO stock2`}},
		{"moved to another schema", "archive.stock", []string{`CREATE SCHEMA archive`, `ALTER TABLE stock SET SCHEMA archive`}},
		{"dropped and created again", "stock", []string{`DROP TABLE stock`, `CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL)`,
			`INSERT INTO stock SELECT g, g FROM generate_series(15001, 18000) g`}},
		{"its values rewritten", "stock", []string{`ALTER TABLE stock ALTER COLUMN qty TYPE int USING qty + 5`}},
		{"its keys rewritten", "stock", []string{`ALTER TABLE stock ALTER COLUMN id TYPE int8 USING id + 1000000`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newE2E(t, []string{"public.stock"})
			d := e.startPacedStock(20000, 500, 5000)
			type result struct {
				out, errOut string
				code        int
			}
			done := make(chan result, 1)
			go func() {
				out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.stock")
				done <- result{out, errOut, code}
			}()
			time.Sleep(1500 * time.Millisecond) // of the copy's 4 s
			e.exec(c.ddl...)
			e.exec(`UPDATE `+c.now+` SET qty = -qty - 1 WHERE id % 7 = 0`,
				`DELETE FROM `+c.now+` WHERE id % 11 = 0`,
				`INSERT INTO `+c.now+` VALUES (100000, 1)`)
			r := <-done
			if r.code != 0 {
				t.Fatalf("resync exited %d\n%s%s", r.code, r.out, r.errOut)
			}
			t.Logf("resync:\n%s", r.out)
			e.exec(`UPDATE ` + c.now + ` SET qty = 0 WHERE id = 100000`)
			e.eventually(t, "the mirror equals the table", func() error {
				return e.mirrorDiff("public.stock", `SELECT id, qty FROM `+c.now, "id", "qty")
			})
			e.stop(d)
		})
	}
}

// startPacedStock creates the table stock (id, qty) with rows rows, has
// the agent copy tables in chunks of chunk rows, at most rate a second,
// starts it, and waits until the table's snapshot is applied.
func (e *e2e) startPacedStock(rows, chunk, rate int) *daemon {
	e.t.Helper()
	e.setSourceKey("backfill_chunk_rows", strconv.Itoa(chunk))
	e.setSourceKey("backfill_rows_per_second", strconv.Itoa(rate))
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL)`,
		fmt.Sprintf(`INSERT INTO stock SELECT g, 0 FROM generate_series(1, %d) g`, rows))
	d := e.start()
	e.waitApplied(d)
	return d
}

// TestBackfillLine describes copies for people, with how far their Delta
// tables are.
func TestBackfillLine(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	finished := since.Add(90 * time.Second)
	for _, c := range []struct {
		b    agent.BackfillStatus
		want string
	}{
		{agent.BackfillStatus{Table: "public.a", Reason: "resync", State: agent.BackfillRunning, RowsCopied: 10, Chunks: 1, Since: since},
			"public.a (resync) running, 10 rows in 1 chunks, since 2026-12-04T01:00:00Z"},
		{agent.BackfillStatus{Table: "public.a", Reason: "resync", State: agent.BackfillRunning, RowsCopied: 10, Chunks: 1, Since: since,
			Applying: "waiting for the copy"},
			"public.a (resync) running, 10 rows in 1 chunks, since 2026-12-04T01:00:00Z; its Delta tables waiting for the copy"},
		{agent.BackfillStatus{Table: "public.a", Reason: "added", State: agent.BackfillDone, RowsCopied: 30, Chunks: 3, Since: since,
			Finished: &finished, Applying: "catching up"},
			"public.a (added) done, 30 rows in 3 chunks, since 2026-12-04T01:00:00Z, took 1m30s; its Delta tables catching up"},
	} {
		if got := backfillLine(c.b); got != c.want {
			t.Errorf("backfillLine(%+v)\n got %s\nwant %s", c.b, got, c.want)
		}
	}
}
