package main

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/pgtest"
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
	return gatedCrashWorkload(t, dsn, writers, 0, stop, nil)
}

// gatedCrashWorkload is crashWorkload whose writers each pause for pause
// between transactions, and whose transactions, with gate, each hold its
// read lock: a test that write-locks it pauses the workload.
func gatedCrashWorkload(t *testing.T, dsn string, writers int, pause time.Duration, stop <-chan struct{}, gate *sync.RWMutex) (wait func() error) {
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
				case <-time.After(pause):
				}
				rows := 1 + rand.IntN(10)
				switch rand.IntN(40) {
				case 0:
					rows = 20000
				case 1, 2, 3:
					rows = 500
				}
				rollback := rand.IntN(8) == 0
				if gate != nil {
					gate.RLock()
				}
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					var n int64
					if err := tx.QueryRow(ctx, `UPDATE counter SET n = n + 1 WHERE id = 1 RETURNING n`).Scan(&n); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, `INSERT INTO events SELECT $1::int8 * 100000 + g, $1, repeat('x', g % 100) FROM generate_series(1, $2) g`, n, rows); err != nil {
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
				if gate != nil {
					gate.RUnlock()
				}
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
// the rolled-back ones. Compaction runs every second, so kills land in
// merges with deletion vectors and in compactions that purge them (the
// test fails unless one purged a vector by the end).
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	e := newE2EWith(t, []string{"public.counter", "public.events", "public.balances"},
		"delta:\n  flush_interval: 200ms\n  compact_interval: 1s\n  compact_min_files: 2\n  compact_bytes_per_second: 0\n")
	// Transactions of a few hundred rows are streamed in progress, so kills
	// also land while spooling.
	e.setSourceKey("logical_decoding_work_mem", "256KiB")
	e.exec(crashSchema)
	stop := make(chan struct{})
	wait := crashWorkload(t, e.dsn, 3, stop)
	const kills = 20
	for i := 0; i < kills; i++ {
		d := e.start()
		time.Sleep(time.Duration(200+rand.IntN(1300)) * time.Millisecond)
		e.sigkill(d, i)
	}
	purgedUnderKills := e.purges("public.balances")
	d := e.start()
	time.Sleep(time.Second)
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	e.waitApplied(d)
	// On a loaded machine the kills may come too fast for a compaction
	// to commit: the last run gets a minute for one.
	for deadline := time.Now().Add(time.Minute); e.purges("public.balances") == 0 && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("compactions purged %d deletion vectors of the balances mirror while the agent was killed, %d in all", purgedUnderKills, e.purges("public.balances"))
	took := e.stop(d)
	if took > 10*time.Second {
		t.Errorf("shutdown took %v, want at most 10s", took)
	}
	_, _, checkpoint := e.queue()
	if confirmed := e.slotConfirmed(); confirmed != checkpoint {
		t.Errorf("after a clean stop the slot confirmed %s, the checkpoint is %s", confirmed, checkpoint)
	}
	var streamed int64
	if err := e.conn.QueryRow(context.Background(), `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1`, e.slot).Scan(&streamed); err != nil {
		t.Fatal(err)
	}
	if streamed == 0 {
		t.Error("PostgreSQL streamed no transaction in progress: source.logical_decoding_work_mem did not reach the walsender")
	}
	e.checkCrashTables(t, kills)
	if n := e.purges("public.balances"); n == 0 {
		t.Error("no compaction of the balances mirror purged a deletion vector")
	}
}

// purges returns how many files with a deletion vector the OPTIMIZE
// commits of a table removed.
func (e *e2e) purges(table string) int {
	e.t.Helper()
	ctx := context.Background()
	tbl := e.localTable(table)
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for v := int64(1); v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			e.t.Fatal(err)
		}
		optimize := slices.ContainsFunc(acts, func(a delta.Action) bool {
			ci, ok := a.(*delta.CommitInfo)
			return ok && ci.Operation == "OPTIMIZE"
		})
		for _, a := range acts {
			if rm, ok := a.(*delta.Remove); ok && optimize && rm.DeletionVector != nil {
				n++
			}
		}
	}
	return n
}

// checkCrashTables compares the Delta tables with PostgreSQL after the
// crash workload: the changelog holds every committed change exactly once,
// in commit order, and nothing of rolled-back transactions; the mirrors
// equal the tables row by row.
func (e *e2e) checkCrashTables(t *testing.T, kills int) {
	ctx := context.Background()
	var final int64
	if err := e.conn.QueryRow(ctx, `SELECT n FROM counter`).Scan(&final); err != nil {
		t.Fatal(err)
	}

	// Counter changes in _lsn order: the snapshot's value, then every
	// committed value once, in order.
	type counterChange struct {
		lsn int64
		op  string
		n   int64
	}
	var counter []counterChange
	for _, r := range e.deltaRows("public.counter_changes") {
		counter = append(counter, counterChange{r["_lsn"].(int64), r["_op"].(string), r["n"].(int64)})
	}
	slices.SortFunc(counter, func(a, b counterChange) int { return cmp.Compare(a.lsn, b.lsn) })
	if len(counter) == 0 || counter[0].op != "snapshot" {
		t.Fatalf("counter changelog does not start with the snapshot row: %v", counter)
	}
	snapshotCounter := counter[0].n
	for i, c := range counter[1:] {
		if want := snapshotCounter + int64(i) + 1; c.op != "update" || c.n != want {
			t.Fatalf("counter changelog position %d holds %s of transaction %d, want update of %d (lost, repeated or reordered)", i, c.op, c.n, want)
		}
	}
	if got := counter[len(counter)-1].n; got != final {
		t.Fatalf("counter changelog ends at transaction %d, PostgreSQL committed %d", got, final)
	}

	// Events: each committed transaction's events exactly once.
	eventsPerN, logged, badOp := e.eventsPerTxn(t)
	if badOp != nil {
		t.Fatalf("events changelog holds a %v", badOp)
	}
	if !maps.Equal(logged, eventsPerN) {
		t.Fatalf("events changelog: %d transactions' events differ from PostgreSQL's %d", len(logged), len(eventsPerN))
	}

	// Mirrors equal the tables row by row.
	e.compareMirror(t, "public.events", `SELECT id, n, payload FROM events`, "id", "n", "payload")
	e.compareMirror(t, "public.balances", `SELECT id, n, amount FROM balances`, "id", "n", "amount")
	e.compareMirror(t, "public.counter", `SELECT id, n FROM counter`, "id", "n")
	t.Logf("%d kills; %d transactions after a snapshot at counter %d; changelog exactly once and in order, mirrors equal PostgreSQL",
		kills, len(counter)-1, snapshotCounter)
}

// eventsPerTxn counts the crash workload's events per transaction (its
// counter value n) in PostgreSQL and in the events changelog, and returns
// an operation of the changelog other than an insert or the snapshot's, if
// one is there. The changelog is counted a file at a time: it holds
// millions of rows.
func (e *e2e) eventsPerTxn(t *testing.T) (pg, logged map[int64]int64, badOp any) {
	t.Helper()
	pg, logged = map[int64]int64{}, map[int64]int64{}
	rows, err := e.conn.Query(context.Background(), `SELECT n, count(*) FROM events GROUP BY n`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n, c int64
		if err := rows.Scan(&n, &c); err != nil {
			t.Fatal(err)
		}
		pg[n] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	err = e.scanDelta("public.events_changes", func(r map[string]any) {
		if r["_op"] != "insert" && r["_op"] != "snapshot" {
			badOp = r["_op"]
		}
		logged[r["n"].(int64)]++
	})
	if err != nil {
		t.Fatal(err)
	}
	return pg, logged, badOp
}

// compareMirror compares a mirror with a query's rows, column by column
// (values compared as text).
func (e *e2e) compareMirror(t *testing.T, table, query string, cols ...string) {
	t.Helper()
	if err := e.mirrorDiff(table, query, cols...); err != nil {
		t.Fatal(err)
	}
}

// mirrorDiff says how a mirror differs from a query's rows, column by
// column (values compared as text, rows as a multiset; a column the mirror
// lacks is a difference), or returns nil. The mirror is read a file at a
// time into one count per row text (PostgreSQL's rows add, the mirror's
// take away), so that a large table is compared in the memory of its
// texts.
func (e *e2e) mirrorDiff(table, query string, cols ...string) error {
	count := map[string]int{}
	rows, err := e.conn.Query(context.Background(), query)
	if err != nil {
		return err
	}
	want := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return err
		}
		count[fmt.Sprint(vals...)]++
		want++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var noColumn string
	vals := make([]any, len(cols))
	err = e.scanDelta(table, func(r map[string]any) {
		if r["_deleted"] == true {
			return
		}
		for i, c := range cols {
			v, ok := r[c]
			if !ok {
				noColumn = c
			}
			vals[i] = v
		}
		count[fmt.Sprint(vals...)]--
	})
	if err != nil {
		return err
	}
	if noColumn != "" {
		return fmt.Errorf("mirror %s has no column %s", table, noColumn)
	}
	var missing, extra []string
	for key, n := range count {
		for range n {
			missing = append(missing, key)
		}
		for range -n {
			extra = append(extra, key)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		return fmt.Errorf("mirror %s differs from PostgreSQL's %d rows: %d missing (first %v), %d not in PostgreSQL or repeated (first %v)",
			table, want, len(missing), missing[:min(len(missing), 5)], len(extra), extra[:min(len(extra), 5)])
	}
	return nil
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
	mem := sampleMemory(d.cmd.Process.Pid, "")
	start := time.Now()
	e.exec(`INSERT INTO big SELECT g, md5(g::text), g % 1000 FROM generate_series(1, 2000000) g`)
	e.waitApplied(d)
	elapsed := time.Since(start)
	anon, file := mem.stop()
	peakAnon, peakFile := anon[""], file[""]
	hwm, err := peakRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	e.stop(d)
	var rows int64
	for _, r := range e.deltaRows("public.big_changes") {
		if r["_op"] == "insert" {
			rows++
		}
	}
	if rows != 2000000 {
		t.Fatalf("changelog holds %d inserted rows, want 2000000", rows)
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	t.Logf("2M-row transaction captured and applied in %v; agent peak anonymous RSS %.1f MB, peak file-backed RSS %.1f MB (state file), VmHWM %.1f MB",
		elapsed.Round(time.Millisecond), mb(peakAnon), mb(peakFile), mb(hwm))
	if peakAnon >= 200<<20 {
		t.Fatalf("peak anonymous RSS %.1f MB, want under 200 MB", mb(peakAnon))
	}
}

// TestWideRowsMemory copies, streams and resyncs a table of 51 kB rows
// (8000 of them, 400 MB of text that neither PostgreSQL's TOAST nor snappy
// compresses), with the live view on as the packaged configuration has it:
// the agent's memory stays a fraction of the table's, as its row groups,
// copy chunks, snapshot writes, queue writer and the live view's rows and
// retained transactions are bounded by bytes as well as rows, and the
// mirror holds every row as PostgreSQL does.
func TestWideRowsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("wide rows memory test skipped in -short mode")
	}
	e := newE2EWith(t, []string{"public.wide"}, "http:\n  listen: "+freeAddr(t)+"\n")
	const doc = `(SELECT string_agg(md5(g::text || '.' || i::text), '') FROM generate_series(1, 1600) i)`
	e.exec(`CREATE TABLE wide (id int8 PRIMARY KEY, doc text NOT NULL)`,
		`ALTER TABLE wide ALTER doc SET STORAGE EXTERNAL`,
		`INSERT INTO wide SELECT g, `+doc+` FROM generate_series(1, 6000) g`)
	d := e.start()
	mem := sampleMemory(d.cmd.Process.Pid, "initial snapshot")
	// Streaming follows the snapshot's copy into the queue.
	waitState(t, e, d, "streaming")
	e.waitApplied(d)
	mem.setPhase("a streamed transaction")
	e.exec(`INSERT INTO wide SELECT g, ` + doc + ` FROM generate_series(6001, 8000) g`)
	e.waitApplied(d)
	mem.setPhase("resync")
	if out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.wide"); code != 0 {
		t.Fatalf("resync exited %d: %s%s", code, out, errOut)
	}
	e.waitApplied(d)
	peaks, _ := mem.stop()
	e.stop(d)

	want := map[int64]string{}
	rows, err := e.conn.Query(context.Background(), `SELECT id, md5(doc) FROM wide`)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	var sum string
	if _, err := pgx.ForEachRow(rows, []any{&id, &sum}, func() error { want[id] = sum; return nil }); err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	if err := e.scanDelta("public.wide", func(r map[string]any) {
		got[r["id"].(int64)] = fmt.Sprintf("%x", md5.Sum([]byte(r["doc"].(string))))
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("the mirror holds %d rows, PostgreSQL %d, or their documents differ", len(got), len(want))
	}
	// Before the byte bounds, the agent took 1.0 to 2.5 GB of anonymous
	// memory here, with the live view off.
	const bound = 768 << 20
	for _, p := range []string{"initial snapshot", "a streamed transaction", "resync"} {
		t.Logf("%s: agent peak anonymous RSS %.0f MB", p, float64(peaks[p])/(1<<20))
		if peaks[p] >= bound {
			t.Errorf("%s: peak anonymous RSS %.0f MB, want under %d MB for a table of 400 MB", p, float64(peaks[p])/(1<<20), bound>>20)
		}
	}
}

// memorySampler samples a process's memory every 20 ms while a test works,
// keeping the peaks of each of the test's phases. Anonymous memory is what
// the process allocates; file-backed pages are the state file mapped by
// bbolt, which the kernel can reclaim at will.
type memorySampler struct {
	mu         sync.Mutex
	phase      string
	anon, file map[string]int64
	done, quit chan struct{}
}

// sampleMemory starts sampling the memory of process pid, in phase.
func sampleMemory(pid int, phase string) *memorySampler {
	m := &memorySampler{phase: phase, anon: map[string]int64{}, file: map[string]int64{}, done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			if anon, file, err := rss(pid); err == nil {
				m.mu.Lock()
				m.anon[m.phase], m.file[m.phase] = max(m.anon[m.phase], anon), max(m.file[m.phase], file)
				m.mu.Unlock()
			}
			select {
			case <-m.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return m
}

// setPhase counts the samples from now on in phase.
func (m *memorySampler) setPhase(phase string) {
	m.mu.Lock()
	m.phase = phase
	m.mu.Unlock()
}

// stop stops sampling and returns the peaks of anonymous and file-backed
// memory, by phase.
func (m *memorySampler) stop() (anon, file map[string]int64) {
	close(m.quit)
	<-m.done
	return m.anon, m.file
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
		// The control socket only: ReadStatus, finding no socket yet
		// while the starting agent holds the state file, waits up to 2 s
		// for the file's lock, long enough to miss a snapshot of 400k
		// rows (0.4 s), as it did about one start in four.
		if st, err := agent.AskStatus(context.Background(), e.stateDir); err == nil && st.Running && st.State == state {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent did not reach state %q; log:\n%s", state, d.stderr)
}

// TestStatusCheckAndRestartErrors drives the command line: status while
// running and after a stop, check, and the errors that stop a start.
func TestStatusCheckAndRestartErrors(t *testing.T) {
	t.Parallel()
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
	// The queue holds what is not applied yet, if anything: the update
	// may already be in the Delta tables.
	queue, _ := st["queue"].(map[string]any)
	entries, _ := queue["entries"].(float64)
	queueBytes, _ := queue["bytes"].(float64)
	if st["running"] != true || st["confirmed_lsn"] == nil || queue == nil || entries < 0 || (entries > 0) != (queueBytes > 0) {
		t.Fatalf("status while running: %s", out)
	}
	if _, ok := st["tables"].([]any); !ok {
		t.Fatalf("status has no tables list: %s", out)
	}
	e.waitApplied(d)
	out, _, code = e.lakeside("status", "--config", e.configPath)
	for _, want := range []string{"running, capture streaming", "slot lag:", "queue:", "TABLE", "public.stock ", "public.stock_changes "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status (text) while running does not say %q: exit %d\n%s", want, code, out)
		}
	}
	t.Logf("lakeside status:\n%s", out)
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
	e.dropSlot()
	_, stderr, code = e.lakeside("run", "--config", e.configPath)
	if code == 0 || !strings.Contains(stderr, `replication slot "`+e.slot+`" no longer exists`) {
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
	t.Parallel()
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
	e.waitApplied(d)
	e.stop(d)
	if !strings.Contains(d.stderr.String(), "starting it over") {
		t.Errorf("the restarted agent did not say it started the snapshot over; log:\n%s", d.stderr)
	}
	ops := map[string]int{}
	for _, r := range e.deltaRows("public.stock_changes") {
		ops[r["_op"].(string)]++
	}
	// The update made while the agent was down predates the new slot: it
	// is in the new snapshot, not a change of its own. The snapshot's rows
	// are told apart from inserts.
	if ops["snapshot"] != 400000 || ops["insert"] != 0 || ops["update"] != 0 || ops["delete"] != 1 {
		t.Fatalf("changelog holds %v, want one snapshot of 400000 rows and 1 delete", ops)
	}
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
}

// TestLiveViewAfterRestart: a restarted agent's live view shows every row
// of a table, not only those changed since its last flush: the queue no
// longer holds what the Delta mirror holds, so the rows come from the
// mirror plus the changes captured since.
func TestLiveViewAfterRestart(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.stock"}, "http:\n  listen: "+addr+"\n")
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO stock SELECT g, g FROM generate_series(1, 200) g`)
	d := e.start()
	e.waitApplied(d)
	e.exec(`UPDATE stock SET qty = -qty WHERE id % 7 = 0`)
	e.waitApplied(d)
	e.stop(d)
	// Changes while the agent is down come from the queue after the start.
	e.exec(`DELETE FROM stock WHERE id % 10 = 0`, `INSERT INTO stock SELECT g, g FROM generate_series(201, 230) g`, `UPDATE stock SET qty = 0 WHERE id % 9 = 0`)
	d = e.start()
	e.waitCaughtUp(d)

	want := map[string]string{}
	rows, _ := e.conn.Query(context.Background(), `SELECT id, qty FROM stock`)
	var id, qty int
	if _, err := pgx.ForEachRow(rows, []any{&id, &qty}, func() error {
		want[fmt.Sprint(id)] = fmt.Sprint(qty)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got = map[string]string{}
		resp, err := http.Get("http://" + addr + "/api/v1/tables/public.stock/rows?limit=1000")
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Rows []struct {
				Values map[string]json.RawMessage
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil {
			for _, r := range page.Rows {
				var id string
				json.Unmarshal(r.Values["id"], &id)
				if id == "" {
					id = string(r.Values["id"])
				}
				got[id] = string(r.Values["qty"])
			}
			if maps.Equal(got, want) {
				e.stop(d)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the live view after a restart has %d rows, PostgreSQL %d (first differences: %s)", len(got), len(want), firstDifferences(got, want))
}

// firstDifferences describes up to five keys whose values differ.
func firstDifferences(got, want map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] && len(out) < 5 {
			out = append(out, fmt.Sprintf("%s: %q, want %q", k, got[k], want[k]))
		}
	}
	return strings.Join(out, "; ")
}
