//go:build bench

package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestBenchBackfill measures the online backfill (`lakeside resync`) of a
// table of 1M rows against COPY … TO STDOUT of the same table into
// /dev/null (the ratio is COPY's time over the backfill's: 1 is as fast as
// PostgreSQL can hand the rows out), then the freshness of another table's
// commits (p99 at about 2k single-row transactions a second) while the
// same table is copied again.
func TestBenchBackfill(t *testing.T) {
	const rows = 1_000_000
	e := newE2EWith(t, []string{"public.orders", "public.ticks"}, benchDeltaConfig)
	e.exec(benchOrdersDDL, `CREATE TABLE ticks (id int8 PRIMARY KEY, n int8)`)
	e.insertOrders(0, rows)
	e.exec(`VACUUM ANALYZE orders`)
	d := e.start()
	e.waitApplied(d)

	// Baseline: COPY of the same table, three times, the fastest kept.
	var baseline time.Duration
	for range 3 {
		start := time.Now()
		if _, err := e.conn.PgConn().CopyTo(context.Background(), io.Discard, `COPY orders TO STDOUT`); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); baseline == 0 || took < baseline {
			baseline = took
		}
	}

	resync := func() time.Duration {
		start := time.Now()
		if out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.orders"); code != 0 {
			t.Fatalf("resync exited %d: %s%s", code, out, errOut)
		}
		return time.Since(start)
	}
	began := time.Now()
	alone := resync()
	e.waitApplied(d)
	applied := time.Since(began)
	if got := len(e.deltaRows("public.orders")); got != rows {
		t.Fatalf("the mirror holds %d rows after the resync, want %d", got, rows)
	}
	fmt.Println()
	fmt.Printf("BENCH backfill, %d rows: %.2f s, COPY TO STDOUT %.2f s: ratio %.2f (target >= 0.5); %.0f rows/s, in the mirror after %.2f s\n",
		rows, alone.Seconds(), baseline.Seconds(), baseline.Seconds()/alone.Seconds(), rows/alone.Seconds(), applied.Seconds())

	// Freshness of ticks while orders is copied again.
	const perSecond, clients = 2000, 8
	seconds := max(10, int(alone.Seconds()))
	perClient := perSecond * seconds / clients
	var wg sync.WaitGroup
	var during time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		during = resync()
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
