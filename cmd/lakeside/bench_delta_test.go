//go:build bench

package main

import (
	"cmp"
	"context"
	"crypto/md5"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/duckdb/duckdb-go/v2"
	"github.com/jackc/pglogrepl"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/pgtest"
)

// The Delta benchmarks share one realistic mixed table: PostgreSQL creates
// and fills it with the SQL below, and benchOrderRow builds the same rows in
// Go for the Parquet benchmark.
const (
	benchOrdersDDL = `CREATE TABLE orders (id int8 PRIMARY KEY, label text NOT NULL, amount numeric(12,2) NOT NULL,
		placed_at timestamptz NOT NULL, paid bool NOT NULL, qty int4 NOT NULL)`
	benchMarkerDDL = `CREATE TABLE bench_marker (round int PRIMARY KEY)`
	// benchOrdersInsert inserts the rows with ids $1 to $2.
	benchOrdersInsert = `INSERT INTO orders SELECT g, md5(g::text), (g % 1000000) / 100.0,
		timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g % 3 = 0, (g % 1000)::int4
		FROM generate_series($1::int8, $2::int8) g`
	// benchDeltaConfig is the agent's delta section: the defaults, spelled
	// out (newE2EOn would otherwise flush every 200 ms).
	benchDeltaConfig = "delta:\n  flush_interval: 1s\n"
)

// benchOrdersEpoch is the timestamp of id 0 in benchOrdersInsert.
var benchOrdersEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// benchOrdersSchema is the Delta schema the applier gives the orders table
// (every column nullable, as for any source table).
func benchOrdersSchema() *delta.StructType {
	return delta.NewStructType(
		delta.NewField("id", delta.TypeLong, true),
		delta.NewField("label", delta.TypeString, true),
		delta.NewField("amount", delta.DecimalType{Precision: 12, Scale: 2}, true),
		delta.NewField("placed_at", delta.TypeTimestamp, true),
		delta.NewField("paid", delta.TypeBoolean, true),
		delta.NewField("qty", delta.TypeInteger, true),
	)
}

// benchOrderRow returns row g of benchOrdersInsert as the applier hands it
// to the Parquet writer.
func benchOrderRow(g int64) delta.Row {
	sum := md5.Sum([]byte(strconv.FormatInt(g, 10)))
	return delta.Row{g, hex.EncodeToString(sum[:]), delta.NewDecimal(g%1000000, 2),
		benchOrdersEpoch.Add(time.Duration(g) * time.Second), g%3 == 0, int32(g % 1000)}
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// percentile returns the p-th quantile (0..1) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))]
}

// TestBenchDeltaParquet measures our Parquet writer (delta.WriteDataFile,
// as the applier uses it) against DuckDB's COPY … TO … (FORMAT parquet) on
// the same 1M rows, snappy on both sides, row groups of DefaultRowGroupRows
// rows as the applier writes them. The rows are built and loaded into
// DuckDB before the clocks start.
func TestBenchDeltaParquet(t *testing.T) {
	const n = 1_000_000
	const rowGroup = delta.DefaultRowGroupRows
	rows := make([]delta.Row, n)
	for i := range rows {
		rows[i] = benchOrderRow(int64(i + 1))
	}
	dir := t.TempDir()

	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	duck := func(q string) {
		t.Helper()
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	duck(`CREATE TABLE orders (id BIGINT, label VARCHAR, amount DECIMAL(12,2), placed_at TIMESTAMPTZ, paid BOOLEAN, qty INTEGER)`)
	err = conn.Raw(func(dc any) error {
		app, err := duckdb.NewAppenderFromConn(dc.(driver.Conn), "", "orders")
		if err != nil {
			return err
		}
		for _, r := range rows {
			d := r[2].(delta.Decimal)
			if err := app.AppendRow(r[0], r[1], duckdb.Decimal{Width: 12, Scale: 2, Value: d.Unscaled}, r[3], r[4], r[5]); err != nil {
				return err
			}
		}
		return app.Close()
	})
	if err != nil {
		t.Fatalf("load DuckDB: %v", err)
	}
	var defaultThreads string
	if err := conn.QueryRowContext(context.Background(), `SELECT current_setting('threads')::VARCHAR`).Scan(&defaultThreads); err != nil {
		t.Fatal(err)
	}

	// Each side is timed by the wall clock and by the CPU time of this
	// process (DuckDB's threads included), which other work on the machine
	// disturbs less.
	type run struct {
		wall, cpu time.Duration
		size      int64
	}
	timed := func(write func() string) run {
		var before, after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		start := time.Now()
		path := write()
		r := run{wall: time.Since(start)}
		syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		r.cpu = time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		r.size = info.Size()
		os.Remove(path)
		return r
	}
	ours := func() string {
		add, err := delta.WriteDataFile(context.Background(), dir, benchOrdersSchema(), nil, nil, rows,
			delta.WriteOptions{Compression: delta.CompressionSnappy, RowGroupRows: rowGroup})
		if err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, add.Path)
	}
	theirs := func(threads string) func() string {
		return func() string {
			duck("SET threads = " + threads)
			path := filepath.Join(dir, "duckdb.parquet")
			duck(fmt.Sprintf(`COPY orders TO '%s' (FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE %d)`, path, rowGroup))
			return path
		}
	}

	// DuckDB reads our file back with the same contents as its table.
	check := func(from string) string {
		var out string
		q := `SELECT count(*)::VARCHAR || ' ' || sum(id)::VARCHAR || ' ' || sum(length(label))::VARCHAR || ' ' || sum(amount)::VARCHAR || ' ' ||
			max(placed_at)::VARCHAR || ' ' || count(*) FILTER (paid)::VARCHAR || ' ' || sum(qty)::VARCHAR FROM ` + from
		if err := conn.QueryRowContext(context.Background(), q).Scan(&out); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return out
	}
	path := ours()
	if got, want := check(fmt.Sprintf("read_parquet('%s')", path)), check("orders"); got != want {
		t.Fatalf("DuckDB reads our file as %s, its table holds %s", got, want)
	}
	os.Remove(path)

	// Rates per round, in rows per wall-clock second and per CPU second.
	var our, duckN, duck1, ourCPU, duckNCPU, duck1CPU []float64
	var ourSize, duckSize int64
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	for round := 0; round < benchRounds; round++ {
		r := timed(ours)
		our, ourCPU, ourSize = append(our, rate(r.wall)), append(ourCPU, rate(r.cpu)), r.size
		r = timed(theirs(defaultThreads))
		duckN, duckNCPU, duckSize = append(duckN, rate(r.wall)), append(duckNCPU, rate(r.cpu)), r.size
		r = timed(theirs("1"))
		duck1, duck1CPU = append(duck1, rate(r.wall)), append(duck1CPU, rate(r.cpu))
	}
	o, dn, d1 := median(our), median(duckN), median(duck1)
	fmt.Println()
	fmt.Printf("BENCH delta parquet: lakeside %.0fk rows/s, duckdb %.0fk rows/s (%s threads), ratio %.2f (target >= 0.7)\n",
		o/1e3, dn/1e3, defaultThreads, o/dn)
	fmt.Printf("BENCH delta parquet, duckdb at 1 thread: lakeside %.0fk rows/s, duckdb %.0fk rows/s, ratio %.2f\n", o/1e3, d1/1e3, o/d1)
	fmt.Printf("BENCH delta parquet, per CPU second: lakeside %.0fk rows, duckdb %.0fk rows (%s threads), ratio %.2f; duckdb at 1 thread %.0fk rows, ratio %.2f\n",
		median(ourCPU)/1e3, median(duckNCPU)/1e3, defaultThreads, median(ourCPU)/median(duckNCPU), median(duck1CPU)/1e3, median(ourCPU)/median(duck1CPU))
	fmt.Printf("  %d rows (int8, text, numeric(12,2), timestamptz, bool, int4), snappy, row groups of %d rows; median of %d rounds;\n",
		n, rowGroup, benchRounds)
	fmt.Printf("  lakeside fills row groups on the caller's goroutine and encodes up to two at once on others (GOMAXPROCS %d), computes the Delta stats and fsyncs the file;\n",
		runtime.GOMAXPROCS(0))
	fmt.Printf("  files: lakeside %.1f MB, duckdb %.1f MB; load %s\n", float64(ourSize)/1e6, float64(duckSize)/1e6, loadAvg())
}

// runWriters runs clients connections that each execute perClient
// statements, paced to perSecond statements a second in all (0: as fast as
// they go), and returns how many succeeded and how long they took.
// stmt gives the statement and arguments of the i-th statement of a client.
func runWriters(t *testing.T, dsn string, clients, perClient int, perSecond float64, stmt func(client, i int) (string, []any)) (int, time.Duration) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := 0
	start := time.Now()
	for c := 0; c < clients; c++ {
		conn := pgtest.Conn(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A paced client keeps a schedule: after a slow statement
			// it catches up instead of dropping the missed ones.
			var every time.Duration
			if perSecond > 0 {
				every = time.Duration(float64(time.Second) * float64(clients) / perSecond)
			}
			n := 0
			for i := 0; i < perClient; i++ {
				time.Sleep(time.Until(start.Add(time.Duration(i) * every)))
				q, args := stmt(c, i)
				if _, err := conn.Exec(context.Background(), q, args...); err != nil {
					t.Error(err)
					break
				}
				n++
			}
			mu.Lock()
			done += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return done, time.Since(start)
}

// insertOrders inserts the orders with ids from+1 to from+n in one
// transaction.
func (e *e2e) insertOrders(from, n int64) {
	e.t.Helper()
	if _, err := e.conn.Exec(context.Background(), benchOrdersInsert, from+1, from+n); err != nil {
		e.t.Fatal(err)
	}
}

// recvLogical times pg_recvlogical draining slot up to endpos into
// /dev/null with the options the agent uses, and in a session with the
// agent's logical_decoding_work_mem (baselineDecodingWorkMem).
func (e *e2e) recvLogical(slot, endpos string) time.Duration {
	e.t.Helper()
	args := []string{"--dbname", e.dsn, "--slot", slot, "--start", "--endpos", endpos, "--no-loop", "--file", "/dev/null",
		"--option", "proto_version=2", "--option", "publication_names=e2e", "--option", "streaming=on"}
	cmd := exec.Command(filepath.Join(e.cluster.BinDir(), "pg_recvlogical"), args...)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c logical_decoding_work_mem="+baselineDecodingWorkMem)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("pg_recvlogical: %v\n%s", err, out)
	}
	return time.Since(start)
}

// baselineDecodingWorkMem is the agent's default logical_decoding_work_mem,
// which pg_recvlogical gets too: both sessions decode with the same memory
// (at 1MiB, both drained the 1M-row transaction a few per cent faster than
// at the server's 64MB).
var baselineDecodingWorkMem = fmt.Sprintf("%dkB", config.DefaultLogicalDecodingWorkMem>>10)

// walLSN returns the server's current WAL position.
func (e *e2e) walLSN() string {
	e.t.Helper()
	var text string
	if err := e.conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&text); err != nil {
		e.t.Fatal(err)
	}
	return text
}

// deltaDrain is how the agent drained a backlog: the time from its start
// until the queue held the whole backlog, and until the Delta tables did.
type deltaDrain struct {
	captured, applied time.Duration
	// cpu is the CPU time (user and system) the agent used, start to stop.
	cpu time.Duration
	// marker is the end LSN of the backlog's last transaction.
	marker pglogrepl.LSN
}

// benchDeltaTables are the Delta tables an end-to-end backlog lands in.
var benchDeltaTables = []string{"public.orders", "public.orders_changes", "public.bench_marker", "public.bench_marker_changes"}

// timeToDelta starts the agent on a backlog that ends at the WAL position
// end with an insert into bench_marker, and times it until the Delta
// tables hold the whole backlog. The agent is done when the marker's
// mirror has applied a transaction after prevMarker and the applier's
// applied position (recorded once every table of a flush has committed)
// has reached it; the time taken is until the last Delta commit of the
// run became visible (see commitVisibleAt), not until that bookkeeping or
// the next look at the status.
func (e *e2e) timeToDelta(end string, prevMarker pglogrepl.LSN) (r deltaDrain) {
	e.t.Helper()
	endLSN, _ := pglogrepl.ParseLSN(end)
	before := map[string]int64{}
	for _, tbl := range benchDeltaTables {
		before[tbl] = e.versionIfAny(tbl)
	}
	start := time.Now()
	d := e.start()
	defer func() {
		e.stop(d)
		r.cpu = d.cmd.ProcessState.UserTime() + d.cmd.ProcessState.SystemTime()
	}()
	for deadline := start.Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		st, err := agent.AskStatus(context.Background(), e.stateDir)
		if err != nil {
			continue
		}
		if cp, _ := pglogrepl.ParseLSN(st.CheckpointLSN); r.captured == 0 && cp >= endLSN {
			r.captured = time.Since(start)
		}
		applied, _ := pglogrepl.ParseLSN(st.AppliedLSN)
		for _, ts := range st.Tables {
			if ts.Name != "public.bench_marker" || ts.Kind != "mirror" {
				continue
			}
			if m, _ := pglogrepl.ParseLSN(ts.AppliedLSN); m > prevMarker && applied >= m {
				seen := time.Since(start)
				var last time.Time
				for _, tbl := range benchDeltaTables {
					if at := e.commitVisibleAt(tbl, before[tbl]); at.After(last) {
						last = at
					}
				}
				r.applied, r.marker = last.Sub(start), m
				if r.applied <= 0 || r.applied > seen {
					e.t.Fatalf("the last commit of the run became visible %v after the start, but the agent was seen done after %v", r.applied, seen)
				}
				r.captured = min(cmp.Or(r.captured, r.applied), r.applied)
				return r
			}
		}
	}
	e.t.Fatalf("the backlog did not reach the Delta tables in 10 minutes; log:\n%s", d.stderr)
	return r
}

// TestBenchDeltaEndToEnd measures the agent turning a backlog into
// committed Delta tables (capture, queue, changelog and mirror, with the
// default flush settings) against pg_recvlogical draining the same backlog
// from its own slot, created at the same point, to /dev/null. The live view
// runs, with no client, as in the default configuration: it reads each
// transaction too.
func TestBenchDeltaEndToEnd(t *testing.T) {
	e := newE2EAlone(t, []string{"public.orders", "public.bench_marker"}, benchDeltaConfig+"http:\n  listen: "+freeAddr(t)+"\n")
	// As in the capture bench, autovacuum stays off the bench table: it
	// would start after a workload, while one of the two drains runs.
	e.exec(benchOrdersDDL, benchMarkerDDL, `ALTER TABLE orders SET (autovacuum_enabled = off)`)
	e.createSlots()

	var nextID int64
	workloads := []struct {
		name string
		rows int64
		run  func()
	}{
		{"1M rows in one transaction", 1_000_000, func() {
			e.insertOrders(nextID, 1_000_000)
			nextID += 1_000_000
		}},
		{"100k single-row transactions from 4 clients", 100_000, func() {
			base := nextID
			runWriters(t, e.dsn, 4, 25_000, 0, func(c, i int) (string, []any) {
				id := base + 1 + int64(c*25_000+i)
				return benchOrdersInsert, []any{id, id}
			})
			nextID += 100_000
		}},
	}
	var marker pglogrepl.LSN
	round := 0
	fmt.Println()
	for _, w := range workloads {
		var baselines, ours, ratios, captures, applies, cpus []float64
		for r := 0; r < benchRounds; r++ {
			w.run()
			round++
			e.exec(fmt.Sprintf(`INSERT INTO bench_marker VALUES (%d)`, round))
			// As in the capture bench: the work the writes leave behind
			// (dirty buffers, a checkpoint due) is done before either
			// clock starts, and the checkpoint's record of running
			// transactions, inside the backlog, lets the next round's
			// settleSlots move each slot's restart point past it.
			// Without it, the first round of small transactions after
			// the 1M-row rounds found pg_recvlogical's slot still
			// restarting before the last 1M-row transaction, and its
			// drain took 2.6 times as long (ratios of 2.4 to 2.7).
			e.exec(`CHECKPOINT`)
			end := e.walLSN()
			e.settleSlots()
			b := e.recvLogical("baseline", end)
			o := e.timeToDelta(end, marker)
			marker = o.marker
			baselines = append(baselines, float64(w.rows)/b.Seconds())
			ours = append(ours, float64(w.rows)/o.applied.Seconds())
			ratios = append(ratios, b.Seconds()/o.applied.Seconds())
			captures, applies = append(captures, o.captured.Seconds()), append(applies, (o.applied-o.captured).Seconds())
			cpus = append(cpus, o.cpu.Seconds())
		}
		fmt.Printf("BENCH delta end to end, %s: lakeside %.0fk rows/s, pg_recvlogical %.0fk rows/s, ratio %.2f (rounds %s; target >= 0.8)\n",
			w.name, median(ours)/1e3, median(baselines)/1e3, median(ratios), spread(ratios))
		fmt.Printf("  lakeside: capture into the queue %.1f s, then Delta commits %.1f s more; the agent used %.1f s of CPU (medians)\n",
			median(captures), median(applies), median(cpus))
	}
	fmt.Printf("  median of %d rounds; lakeside: from its start until changelog and mirror committed the backlog (flush_interval 1s, live view on);\n", benchRounds)
	fmt.Printf("  pg_recvlogical: the same backlog from its own slot to /dev/null, logical_decoding_work_mem=%s as the agent; load %s; %d cores\n",
		baselineDecodingWorkMem, loadAvg(), runtime.NumCPU())
}

// deltaCommit is one commit of a table written by the agent: the end LSN of
// its last source transaction (its txn version) and when it became visible
// (the modification time of its log file, written just before it is linked
// into place).
type deltaCommit struct {
	version int64
	lsn     int64
	at      time.Time
	actions []delta.Action
}

// deltaCommits returns the commits of a local Delta table after version
// from that carry a txn action, in version order.
func (e *e2e) deltaCommits(table string, from int64) []deltaCommit {
	e.t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, filepath.Join(e.stateDir, "tables", table))
	if err != nil {
		e.t.Fatal(err)
	}
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []deltaCommit
	for v := from + 1; v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join(tbl.LogPath(), delta.CommitFileName(v)))
		if err != nil {
			e.t.Fatal(err)
		}
		c := deltaCommit{version: v, lsn: -1, at: info.ModTime(), actions: acts}
		for _, a := range acts {
			if txn, ok := a.(*delta.Txn); ok {
				c.lsn = txn.Version
			}
		}
		if c.lsn >= 0 {
			out = append(out, c)
		}
	}
	return out
}

// versionIfAny returns the newest version of a local Delta table, or -1
// when the table does not exist yet: no log, or a log the agent has made
// but not yet committed to.
func (e *e2e) versionIfAny(table string) int64 {
	e.t.Helper()
	v, err := e.version(table)
	if notATableYet(err) {
		return -1
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// commitVisibleAt returns when the newest commit of a local Delta table
// became visible, if it is later than version after (otherwise the zero
// time): the change time of its log file, which the hard link into place
// and the removal of the temporary name set (delta's putIfAbsent).
func (e *e2e) commitVisibleAt(table string, after int64) time.Time {
	e.t.Helper()
	v := e.versionIfAny(table)
	if v <= after {
		return time.Time{}
	}
	info, err := os.Stat(filepath.Join(e.stateDir, "tables", table, "_delta_log", delta.CommitFileName(v)))
	if err != nil {
		e.t.Fatal(err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		e.t.Fatalf("no change time for %s", info.Name())
	}
	return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
}

// latestVersion returns the newest version of a local Delta table.
func (e *e2e) latestVersion(table string) int64 {
	e.t.Helper()
	v, err := e.version(table)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// version returns the newest version of a local Delta table.
func (e *e2e) version(table string) (int64, error) {
	tbl, err := delta.Open(context.Background(), filepath.Join(e.stateDir, "tables", table))
	if err != nil {
		return 0, err
	}
	return tbl.LatestVersion(context.Background())
}

// TestBenchDeltaMirrorMerge measures the copy-on-write merge of the mirror
// of a 1M-row table when each flush updates 1% of its rows: the bytes of
// the data files a merge adds per changed row, and how many files it
// rewrites. Random keys are the worst case for files clustered by key
// range; updates of one key range are the case the clustering is for.
func TestBenchDeltaMirrorMerge(t *testing.T) {
	const rows = 1_000_000
	const changed = rows / 100
	const flushes = 5
	e := newE2EAlone(t, []string{"public.orders"}, benchDeltaConfig)
	e.exec(benchOrdersDDL)
	e.insertOrders(0, rows)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)
	defer e.stop(d)
	snap := func() *delta.Snapshot {
		tbl, err := delta.Open(context.Background(), filepath.Join(e.stateDir, "tables", "public.orders"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := tbl.Snapshot(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var tableBytes int64
	s := snap()
	for _, f := range s.Files() {
		tableBytes += f.Size
	}

	rng := rand.New(rand.NewPCG(1, 2))
	patterns := []struct {
		name string
		ids  func() []int64
	}{
		{"1% random updates", func() []int64 {
			ids := make([]int64, changed)
			for i, p := range rng.Perm(rows)[:changed] {
				ids[i] = int64(p) + 1
			}
			return ids
		}},
		{"1% updates of one key range", func() []int64 {
			ids := make([]int64, changed)
			first := rng.Int64N(rows - changed)
			for i := range ids {
				ids[i] = first + int64(i) + 1
			}
			return ids
		}},
	}
	fmt.Println()
	for _, p := range patterns {
		var perRow, rewritten []float64
		for f := 0; f < flushes; f++ {
			mirrorFrom := e.latestVersion("public.orders")
			if _, err := e.conn.Exec(context.Background(), `UPDATE orders SET qty = qty + 1, amount = amount + 0.01 WHERE id = ANY($1)`, p.ids()); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Minute); e.latestVersion("public.orders") == mirrorFrom; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the mirror did not commit the update in 5 minutes; log:\n%s", d.stderr)
				}
			}
			merge := e.deltaCommits("public.orders", mirrorFrom)[0]
			var added int64
			var removes int
			for _, a := range merge.actions {
				switch a := a.(type) {
				case *delta.Add:
					added += a.Size
				case *delta.Remove:
					removes++
				}
			}
			perRow = append(perRow, float64(added)/changed)
			rewritten = append(rewritten, float64(removes))
		}
		fmt.Printf("BENCH delta mirror merge, %s: %.0f bytes rewritten per changed row, %.0f files rewritten per merge (median of %d flushes of %d changed rows)\n",
			p.name, median(perRow), median(rewritten), flushes, changed)
	}
	fmt.Printf("  mirror: %d rows in %d files, %.1f MB; load %s\n",
		rows, s.NumFiles(), float64(tableBytes)/1e6, loadAvg())
}

// TestBenchDeltaFreshness measures how long a row committed in PostgreSQL
// takes to be visible in the Delta tables while paced writers commit about
// 2k single-row transactions a second for 30 s (8 clients), with the default flush
// interval of 1s. A row's freshness is the time its table's first commit
// holding it appeared minus its PostgreSQL commit time (_commit_ts in the
// changelog).
func TestBenchDeltaFreshness(t *testing.T) {
	const perSecond = 2000
	const seconds = 30
	const clients = 8
	const perClient = perSecond * seconds / clients
	e := newE2EAlone(t, []string{"public.orders"}, benchDeltaConfig)
	e.exec(benchOrdersDDL)
	d := e.start()
	waitState(t, e, d, "streaming")
	sent, took := runWriters(t, e.dsn, clients, perClient, perSecond, func(c, i int) (string, []any) {
		id := int64(c*perClient + i + 1)
		return benchOrdersInsert, []any{id, id}
	})
	e.waitApplied(d)
	e.stop(d)

	rows := e.deltaRows("public.orders_changes")
	if len(rows) != sent {
		t.Fatalf("the changelog holds %d rows, %d were committed", len(rows), sent)
	}
	fmt.Println()
	for _, table := range []string{"public.orders_changes", "public.orders"} {
		commits := e.deltaCommits(table, -1)
		lat := make([]time.Duration, 0, len(rows))
		for _, r := range rows {
			lsn, ts := r["_lsn"].(int64), r["_commit_ts"].(time.Time)
			i, _ := slices.BinarySearchFunc(commits, lsn, func(c deltaCommit, l int64) int { return cmp.Compare(c.lsn, l) })
			if i == len(commits) {
				t.Fatalf("%s: no commit holds LSN %d", table, lsn)
			}
			lat = append(lat, commits[i].at.Sub(ts))
		}
		slices.Sort(lat)
		fmt.Printf("BENCH delta freshness at 2k txn/s, %s: p50 %v, p99 %v, max %v (target p99 <= 1.5s); achieved %.0f txn/s, %d commits\n",
			table, percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 0.99).Round(time.Millisecond),
			lat[len(lat)-1].Round(time.Millisecond), float64(sent)/took.Seconds(), len(commits))
	}
	fmt.Printf("  %d writers, %d single-row transactions in %.1f s; freshness = first commit file of the table holding the row − PostgreSQL commit time;\n",
		clients, sent, took.Seconds())
	fmt.Printf("  flush_interval 1s (target = flush_interval + 500 ms); load %s\n", loadAvg())
}
