//go:build bench

package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// benchBackfillRounds is how many times TestBenchBackfill copies each
// table.
const benchBackfillRounds = 3

// TestBenchBackfill measures the online backfill (`lakeside resync`) of a
// table of 1M rows and of one of 4M against COPY … TO STDOUT of the same
// table into /dev/null (the ratio is COPY's time over the backfill's: 1 is
// as fast as PostgreSQL can hand the rows out; each table is copied
// benchBackfillRounds times, each right after its own baseline, and the
// median ratio is the figure), then the freshness of
// another table's commits (p99 at about 2k single-row transactions a
// second) while the larger table is copied again. The 4M rows are four
// times PostgreSQL's cache of the test cluster (shared_buffers 64MB) and
// the 1M rows fit in the machine's page cache: COPY reads the first one
// faster per row.
func TestBenchBackfill(t *testing.T) {
	sizes := []struct {
		table string
		rows  int
	}{{"orders", 1_000_000}, {"big", 4_000_000}}
	e := newE2EAlone(t, []string{"public.orders", "public.big", "public.ticks"}, benchDeltaConfig)
	e.exec(benchOrdersDDL, `CREATE TABLE big (LIKE orders INCLUDING ALL)`, `CREATE TABLE ticks (id int8 PRIMARY KEY, n int8)`)
	e.insertOrders(0, int64(sizes[0].rows))
	for from := 0; from < sizes[1].rows; from += sizes[0].rows {
		if _, err := e.conn.Exec(context.Background(), strings.Replace(benchOrdersInsert, "INTO orders", "INTO big", 1), from+1, from+sizes[0].rows); err != nil {
			t.Fatal(err)
		}
	}
	e.exec(`VACUUM ANALYZE orders`, `VACUUM ANALYZE big`)
	// The runtime traces each garbage collection to the agent's log
	// (gcCycles).
	d := e.start("GODEBUG=gctrace=1")
	// The initial snapshot's rows reach the queue once copied: until
	// then the queue is empty.
	for _, size := range sizes {
		for deadline := time.Now().Add(5 * time.Minute); e.versionIfAny("public."+size.table) < 0 || e.deltaRowCount("public."+size.table) < int64(size.rows); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the initial snapshot of %s is not in its mirror after 5 minutes", size.table)
			}
		}
	}

	resync := func(table string) time.Duration {
		start := time.Now()
		if out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public."+table); code != 0 {
			t.Fatalf("resync exited %d: %s%s", code, out, errOut)
		}
		return time.Since(start)
	}
	// round measures one copy of table, of rows rows: its baseline and
	// then the backfill, one right after the other so that both see the
	// machine alike (its speed drifts, and with it both, by up to a third
	// between runs of the bench). It prints what the copy cost and
	// returns the ratio and the copy's time.
	round := func(table string, rows, n int) (float64, time.Duration) {
		// A quiet agent: the copies before are applied and their files
		// compacted, so that no background pass runs meanwhile.
		e.waitApplied(d)
		if out, errOut, code := e.lakeside("compact", "--config", e.configPath); code != 0 {
			t.Fatalf("compact exited %d: %s%s", code, out, errOut)
		}
		// Baseline: COPY of the same table, three times, the fastest kept
		// with the CPU time PostgreSQL spent on it.
		var baseline, baselineCPU time.Duration
		for range 3 {
			start, cpu := time.Now(), commandCPU(t, "postgres")
			if _, err := e.conn.PgConn().CopyTo(context.Background(), io.Discard, `COPY `+table+` TO STDOUT`); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); baseline == 0 || took < baseline {
				baseline, baselineCPU = took, commandCPU(t, "postgres")-cpu
			}
		}
		began := time.Now()
		agentBefore, pgBefore := processCPU(t, d.cmd.Process.Pid), commandCPU(t, "postgres")
		wroteBefore := processWritten(t, d.cmd.Process.Pid)
		logBefore := len(d.log())
		took := resync(table)
		agentCPU, pgCPU := processCPU(t, d.cmd.Process.Pid)-agentBefore, commandCPU(t, "postgres")-pgBefore
		cycles, live := gcCycles(d.log()[logBefore:])
		e.waitApplied(d)
		applied := time.Since(began)
		wrote := processWritten(t, d.cmd.Process.Pid) - wroteBefore
		if got := e.deltaRowCount("public." + table); got != int64(rows) {
			t.Fatalf("the mirror holds %d rows after the resync, want %d", got, rows)
		}
		ratio := baseline.Seconds() / took.Seconds()
		fmt.Printf("BENCH backfill, %d rows, round %d: %.2f s, COPY TO STDOUT %.2f s: ratio %.2f; %.0f rows/s, in the mirror after %.2f s\n",
			rows, n, took.Seconds(), baseline.Seconds(), ratio, float64(rows)/took.Seconds(), applied.Seconds())
		// What the copy cost, and the ratio the cores allow: the copy
		// takes at least its CPU time over the machine's cores.
		floor := (agentCPU + pgCPU).Seconds() / float64(runtime.NumCPU())
		fmt.Printf("  during the copy: agent %.2f CPU-s, PostgreSQL %.2f CPU-s (%.2f for COPY TO STDOUT); on %d cores at least %.2f s, a ratio of %.2f at most\n",
			agentCPU.Seconds(), pgCPU.Seconds(), baselineCPU.Seconds(), runtime.NumCPU(), floor, baseline.Seconds()/floor)
		fmt.Printf("  the agent wrote %.0f MB until the copy was in the mirror (queue, Delta tables), %.0f bytes a row; %d garbage collections during the copy, the live heap %d MB on average\n",
			float64(wrote)/1e6, float64(wrote)/float64(rows), cycles, live)
		return ratio, took
	}
	fmt.Println()
	var alone time.Duration
	for _, size := range sizes {
		var ratios []float64
		for n := 1; n <= benchBackfillRounds; n++ {
			var ratio float64
			ratio, alone = round(size.table, size.rows, n)
			ratios = append(ratios, ratio)
		}
		slices.Sort(ratios)
		fmt.Printf("BENCH backfill, %d rows: ratio %.2f against COPY TO STDOUT (target >= 0.5), the median of %d rounds (%.2f to %.2f)\n",
			size.rows, ratios[len(ratios)/2], len(ratios), ratios[0], ratios[len(ratios)-1])
	}

	// Freshness of ticks while big is copied again.
	const perSecond, clients = 2000, 8
	seconds := max(10, int(alone.Seconds()))
	perClient := perSecond * seconds / clients
	var wg sync.WaitGroup
	var during time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		during = resync(sizes[1].table)
	}()
	sent, took := runWriters(t, e.dsn, clients, perClient, perSecond, func(c, i int) (string, []any) {
		id := int64(c*perClient + i + 1)
		return `INSERT INTO ticks VALUES ($1, $1)`, []any{id}
	})
	wg.Wait()
	e.waitApplied(d)
	e.stop(d)
	ticks := e.deltaRows("public.ticks_changes")
	if len(ticks) != sent {
		t.Fatalf("the changelog of ticks holds %d rows, %d were committed", len(ticks), sent)
	}
	commits := e.deltaCommits("public.ticks_changes", -1)
	lat := make([]time.Duration, 0, len(ticks))
	for _, r := range ticks {
		lsn, ts := r["_lsn"].(int64), r["_commit_ts"].(time.Time)
		i, _ := slices.BinarySearchFunc(commits, lsn, func(c deltaCommit, l int64) int { return cmp.Compare(c.lsn, l) })
		if i == len(commits) {
			t.Fatalf("no commit of ticks_changes holds LSN %d", lsn)
		}
		lat = append(lat, commits[i].at.Sub(ts))
	}
	slices.Sort(lat)
	fmt.Printf("BENCH delta freshness at 2k txn/s during a backfill: p50 %v, p99 %v, max %v (target p99 <= 1.5s); achieved %.0f txn/s for %.1f s, the backfill took %.2f s of it\n",
		percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		float64(sent)/took.Seconds(), took.Seconds(), during.Seconds())
	fmt.Printf("  flush_interval 1s, backfill_chunk_rows 16384 (default), no rate limit; load %s\n", loadAvg())
}

// gcTrace matches a line of GODEBUG=gctrace=1, whose last of the three
// heap sizes is the live heap the collection marked.
var gcTrace = regexp.MustCompile(`(?m)^gc \d+ @.* \d+->\d+->(\d+) MB`)

// gcCycles returns the garbage collections a log traces, and the mean of
// their live heaps in MB.
func gcCycles(log string) (cycles, liveMB int) {
	sum := 0
	for _, m := range gcTrace.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		sum += n
		cycles++
	}
	if cycles == 0 {
		return 0, 0
	}
	return cycles, sum / cycles
}

// processCPU returns the CPU time the process pid has spent, from /proc
// (in clock ticks of 10 ms).
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	return statCPU(stat)
}

// processWritten returns the bytes the process pid has handed to write
// calls so far (wchar in /proc/pid/io), whether or not they reached the
// disk yet.
func processWritten(t *testing.T, pid int) int64 {
	t.Helper()
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(io)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no wchar in /proc/%d/io", pid)
	return 0
}

// commandCPU returns the CPU time spent so far by the running processes
// whose command is name.
func commandCPU(t *testing.T, name string) time.Duration {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err != nil || strings.TrimSpace(string(comm)) != name {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			sum += statCPU(stat)
		}
	}
	return sum
}

// statCPU returns utime plus stime of a /proc stat file (fields 14 and 15,
// counted from the state, field 3, after the command's parenthesis).
func statCPU(stat []byte) time.Duration {
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	u, _ := strconv.ParseInt(f[14-3], 10, 64)
	s, _ := strconv.ParseInt(f[15-3], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// deltaRowCount returns the rows of a local Delta table's latest version,
// by its files' stats.
func (e *e2e) deltaRowCount(table string) int64 {
	e.t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, filepath.Join(e.stateDir, "tables", table))
	if err != nil {
		e.t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	for _, f := range snap.Files() {
		st, err := delta.ParseStats(f.Stats)
		if err != nil {
			e.t.Fatal(err)
		}
		n += st.NumRecords
	}
	return n
}
