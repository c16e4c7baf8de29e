package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/pgtest"
	"github.com/lakeside/lakeside/store"
)

// crashSchema: every workload transaction first bumps the one counter row,
// which it holds locked until it commits, so counter values follow commit
// order exactly; each row it writes carries that value.
const crashSchema = `
CREATE TABLE counter (id int PRIMARY KEY, n int8 NOT NULL);
INSERT INTO counter VALUES (1, 0);
CREATE TABLE events (id int8 PRIMARY KEY, n int8 NOT NULL, payload text);
CREATE TABLE balances (id int PRIMARY KEY, n int8 NOT NULL, amount int8 NOT NULL);
INSERT INTO balances SELECT g, 0, 0 FROM generate_series(1, 1000) g;
`

// crashWorkload runs writers until stopped. Transactions insert 1 to 20000
// events (the large ones are streamed by PostgreSQL) and update balances;
// one in eight rolls back.
func crashWorkload(t *testing.T, dsn string, writers int, stop <-chan struct{}) (wait func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		conn := pgtest.Conn(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rows := 1 + rand.IntN(10)
				switch rand.IntN(40) {
				case 0:
					rows = 20000
				case 1, 2, 3:
					rows = 500
				}
				rollback := rand.IntN(8) == 0
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					var n int64
					if err := tx.QueryRow(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1 RETURNING n`).Scan(&n); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO events SELECT $1 * 100000 + g, $1, repeat('x', g % 100) FROM generate_series(1, $2) g`, n, rows); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `UPDATE balances SET n = $1, amount = amount + 1 WHERE id = ANY($2)`, n, []int32{int32(1 + rand.IntN(1000)), int32(1 + rand.IntN(1000))}); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				if err != nil && err != errRollback {
					errs <- err
					return
				}
			}
		}()
	}
	return func() error {
		wg.Wait()
		close(errs)
		return <-errs
	}
}

var errRollback = fmt.Errorf("deliberate rollback")

// TestCrashSafety kills the real agent with SIGKILL at random moments under
// load, at least 20 times, then lets it drain and checks that the queue holds
// every committed transaction exactly once, in commit order, and nothing of
// the rolled-back ones.
func TestCrashSafety(t *testing.T) {
	e := newE2E(t, []string{"public.counter", "public.events", "public.balances"},
		map[string]string{"logical_decoding_work_mem": "256kB"})
	e.exec(crashSchema)
	stop := make(chan struct{})
	wait := crashWorkload(t, e.dsn, 3, stop)
	const kills = 20
	for i := 0; i < kills; i++ {
		d := e.start()
		time.Sleep(time.Duration(200+rand.IntN(1300)) * time.Millisecond)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-d.exited
		if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: agent exited by itself before the kill; log:\n%s", i, d.stderr)
		}
	}
	d := e.start()
	time.Sleep(time.Second)
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	e.waitCaughtUp(d)
	took := e.stop(d)
	if took > 10*time.Second {
		t.Errorf("shutdown took %v, want at most 10s", took)
	}

	txns, rels, checkpoint := e.queue()
	if confirmed := e.slotConfirmed(); confirmed != checkpoint {
		t.Errorf("after a clean stop the slot confirmed %s, the checkpoint is %s", confirmed, checkpoint)
	}
	var final int64
	if err := e.conn.QueryRow(context.Background(), `SELECT n FROM counter`).Scan(&final); err != nil {
		t.Fatal(err)
	}
	eventsPerN := map[int64]int64{}
	rows, err := e.conn.Query(context.Background(), `SELECT n, count(*) FROM events GROUP BY n`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, c int64
		if err := rows.Scan(&n, &c); err != nil {
			t.Fatal(err)
		}
		eventsPerN[n] = c
	}

	var seen []int64
	var snapshotCounter int64
	var prevEnd store.LSN
	for _, txn := range txns {
		if txn.EndLSN <= prevEnd {
			t.Fatalf("queue out of order at %s", txn.EndLSN)
		}
		prevEnd = txn.EndLSN
		if txn.Snapshot {
			for _, c := range txn.Changes {
				if rels[c.Relation].Name == "counter" {
					snapshotCounter = c.New[1].Int
				}
			}
			continue
		}
		var n int64 = -1
		var events int64
		for _, c := range txn.Changes {
			switch rels[c.Relation].Name {
			case "counter":
				n = c.New[1].Int
			case "events":
				if c.Op != store.OpInsert || c.New[1].Int != n {
					t.Fatalf("transaction %d holds an event of transaction %d", n, c.New[1].Int)
				}
				events++
			case "balances":
				if c.New[1].Int != n {
					t.Fatalf("transaction %d holds a balance update of transaction %d", n, c.New[1].Int)
				}
			}
		}
		if n < 0 {
			t.Fatalf("transaction at %s did not bump the counter", txn.EndLSN)
		}
		if events != eventsPerN[n] {
			t.Fatalf("transaction %d: %d events queued, PostgreSQL has %d", n, events, eventsPerN[n])
		}
		seen = append(seen, n)
	}
	// The snapshot holds the counter as of the slot's creation; from there
	// on every committed value appears once, in order.
	for i, n := range seen {
		if want := snapshotCounter + int64(i) + 1; n != want {
			t.Fatalf("queue position %d holds transaction %d, want %d (lost, repeated or reordered)", i, n, want)
		}
	}
	if got := snapshotCounter + int64(len(seen)); got != final {
		t.Fatalf("queue ends at transaction %d, PostgreSQL committed %d", got, final)
	}
	t.Logf("%d kills; %d transactions after a snapshot at counter %d; all %d committed transactions queued once, in order",
		kills, len(seen), snapshotCounter, final)
}

// TestLargeTransactionMemory captures a 2M-row transaction and measures the
// agent's peak RSS.
func TestLargeTransactionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("large transaction test skipped in -short mode")
	}
	e := newE2E(t, []string{"public.big"})
	e.exec(`CREATE TABLE big (id int8 PRIMARY KEY, label text NOT NULL, qty int NOT NULL)`)
	d := e.start()
	waitState(t, e, d, "streaming")
	start := time.Now()
	e.exec(`INSERT INTO big SELECT g, md5(g::text), g % 1000 FROM generate_series(1, 2000000) g`)
	e.waitCaughtUp(d)
	elapsed := time.Since(start)
	rss, err := peakRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	e.stop(d)
	txns, _, _ := e.queue()
	var rows int64
	for _, txn := range txns {
		if !txn.Snapshot {
			rows += txn.TxnHeader.Changes
		}
	}
	if rows != 2000000 {
		t.Fatalf("queued %d rows, want 2000000", rows)
	}
	t.Logf("2M-row transaction captured in %v; agent peak RSS %.1f MB", elapsed.Round(time.Millisecond), float64(rss)/(1<<20))
	if rss >= 200<<20 {
		t.Fatalf("peak RSS %.1f MB, want under 200 MB", float64(rss)/(1<<20))
	}
}

func waitState(t *testing.T, e *e2e, d *daemon, state string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			t.Fatalf("agent exited; log:\n%s", d.stderr)
		default:
		}
		cfg, _ := agent.LoadConfig(e.configPath)
		if st, err := agent.ReadStatus(context.Background(), cfg); err == nil && st.Running && st.State == state {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent did not reach state %q; log:\n%s", state, d.stderr)
}

// TestStatusCheckAndRestartErrors drives the command line: status while
// running and after a stop, check, and the errors that stop a start.
func TestStatusCheckAndRestartErrors(t *testing.T) {
	e := newE2E(t, []string{"public.stock"})
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO stock SELECT g, g FROM generate_series(1, 100) g`)

	out, _, code := e.lakeside("check", "--config", e.configPath)
	if code != 0 || !strings.Contains(out, "✓ wal_level is logical") || strings.Contains(out, "✗") {
		t.Fatalf("check: exit %d, output:\n%s", code, out)
	}

	d := e.start()
	waitState(t, e, d, "streaming")
	e.exec(`UPDATE stock SET qty = qty + 1 WHERE id <= 10`)
	e.waitCaughtUp(d)
	out, stderr, code := e.lakeside("status", "--config", e.configPath, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json is not one JSON object: %v\n%s", err, out)
	}
	queue, _ := st["queue"].(map[string]any)
	if st["running"] != true || st["confirmed_lsn"] == nil || queue == nil || queue["entries"].(float64) < 2 || queue["bytes"].(float64) <= 0 {
		t.Fatalf("status while running: %s", out)
	}
	if _, ok := st["tables"].([]any); !ok {
		t.Fatalf("status has no tables list: %s", out)
	}
	e.stop(d)

	out, _, code = e.lakeside("status", "--config", e.configPath, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["running"] != false || st["confirmed_lsn"] != st["checkpoint_lsn"] {
		t.Fatalf("status after stop: exit %d\n%s", code, out)
	}
	out, _, code = e.lakeside("status", "--config", e.configPath)
	if code != 0 || !strings.Contains(out, "not running") {
		t.Fatalf("status (text) after stop: exit %d\n%s", code, out)
	}

	// A slot dropped while the agent was down stops the next start.
	e.exec(`SELECT pg_drop_replication_slot('e2e')`)
	_, stderr, code = e.lakeside("run", "--config", e.configPath)
	if code == 0 || !strings.Contains(stderr, `replication slot "e2e" no longer exists`) {
		t.Fatalf("run after the slot was dropped: exit %d\n%s", code, stderr)
	}

	// A configuration error names the file and line.
	bad := strings.Replace(e.configPath, "lakeside.yaml", "bad.yaml", 1)
	writeFile(t, bad, "source:\n  dsn: x\n  slott: y\n")
	_, stderr, code = e.lakeside("run", "--config", bad)
	if code == 0 || !strings.Contains(stderr, "bad.yaml:3:") {
		t.Fatalf("run with a bad config: exit %d\n%s", code, stderr)
	}
}

// TestKillDuringSnapshot kills the agent while it copies the initial
// snapshot; the next start begins the snapshot again on a new slot, and the
// queue ends up with exactly one complete snapshot.
func TestKillDuringSnapshot(t *testing.T) {
	e := newE2E(t, []string{"public.stock"})
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL)`,
		`INSERT INTO stock SELECT g, g % 100 FROM generate_series(1, 400000) g`)
	d := e.start()
	waitState(t, e, d, "snapshot")
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	e.exec(`UPDATE stock SET qty = -1 WHERE id <= 10`)

	d = e.start()
	waitState(t, e, d, "streaming")
	e.exec(`DELETE FROM stock WHERE id = 400000`)
	e.waitCaughtUp(d)
	e.stop(d)
	if !strings.Contains(d.stderr.String(), "starting it over") {
		t.Errorf("the restarted agent did not say it started the snapshot over; log:\n%s", d.stderr)
	}

	txns, rels, _ := e.queue()
	var snapshots int
	ids := map[int64]int64{}
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if rels[c.Relation].Name != "stock" {
				t.Fatalf("change of unknown table %+v", c.Relation)
			}
			switch c.Op {
			case store.OpInsert:
				if _, dup := ids[c.New[0].Int]; dup {
					t.Fatalf("row %d inserted twice", c.New[0].Int)
				}
				ids[c.New[0].Int] = c.New[1].Int
			case store.OpDelete:
				delete(ids, c.Old[0].Int)
			case store.OpUpdate:
				ids[c.New[0].Int] = c.New[1].Int
			}
		}
		if txn.Snapshot {
			snapshots++
		}
	}
	if snapshots != 1 {
		t.Fatalf("queue holds %d snapshots, want 1", snapshots)
	}
	if len(ids) != 399999 || ids[5] != -1 || ids[11] != 11 {
		t.Fatalf("queue replays to %d rows (id 5 → %d, id 11 → %d), want 399999 rows with ids 1-10 at -1", len(ids), ids[5], ids[11])
	}
}
