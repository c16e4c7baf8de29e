package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/internal/faultnet"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/internal/s3test"
)

// chaosPlan is a run of the chaos harness: faults faults of the kinds
// kinds, one every about every, at moments drawn from seed.
type chaosPlan struct {
	name   string
	seed   uint64
	faults int
	every  time.Duration
	// pause is the wait between a writer's transactions: zero writes as
	// fast as PostgreSQL takes them.
	pause time.Duration
	kinds []string
}

// chaosKinds are the faults the harness injects.
var chaosKinds = []string{
	"sigkill",        // the agent, SIGKILLed and started again
	"pg-crash",       // PostgreSQL stopped with -m immediate and started again
	"s3-restart",     // the S3 server stopped for a second and started again
	"pg-cut",         // every connection to PostgreSQL cut by the proxy
	"pg-blackhole",   // PostgreSQL's connections stall for 3 s
	"s3-cut",         // every connection to S3 cut
	"s3-blackhole",   // S3's connections stall for 3 s
	"s3-slow",        // S3's connections slowed to about 10 KiB/s for 3 s
	"sigkill-at-log", // the agent SIGKILLed as it logs a flush or a compaction
}

// chaosResult is a row of the harness's table.
type chaosResult struct {
	name     string
	seed     uint64
	injected map[string]int
	changes  int64
	lost     int64
	dup      int64
	drain    time.Duration
}

func (r chaosResult) String() string {
	var kinds []string
	for k, n := range r.injected {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("CHAOS %-10s seed %-20d faults: %s | changes checked %d, lost %d, duplicated %d, drain %s",
		r.name, r.seed, strings.Join(kinds, ", "), r.changes, r.lost, r.dup, r.drain.Round(100*time.Millisecond))
}

// TestChaos is the CI-sized run of the chaos harness (make chaos runs the
// long form): every kind of fault, a few times each, under the crash
// workload, then the invariant checks.
func TestChaos(t *testing.T) {
	// Faults on a loaded machine become other faults: not beside the
	// parallel tests.
	seed := uint64(time.Now().UnixNano())
	r := runChaos(t, chaosPlan{name: "ci", seed: seed, faults: 12, every: 1500 * time.Millisecond, pause: 30 * time.Millisecond, kinds: chaosKinds})
	fmt.Println(r)
}

// runChaos runs the real agent against its own PostgreSQL and an S3
// server, each behind a proxy of the harness, under the crash workload
// (crashWorkload: a counter that orders every transaction, events of 1 to
// 20,000 rows, balances updated, one transaction in eight rolled back)
// with compaction on, and injects plan's faults. When they stop it waits
// for the agent to drain, then checks: the changelogs hold every committed
// change once and nothing rolled back, the mirrors equal PostgreSQL, the
// replica equals the local tables and both pass the conformance checks.
// The seed is logged first, so a failing run can be replayed.
func runChaos(t *testing.T, plan chaosPlan) chaosResult {
	t.Logf("chaos %s: seed %d (replay with that seed in the plan)", plan.name, plan.seed)
	rng := rand.New(rand.NewPCG(plan.seed, 1))
	cluster := pgtest.Start(t)
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	pgProxy := faultnet.Start(t, hostPort(cluster.TCPDSN("postgres")))
	s3Proxy := faultnet.Start(t, strings.TrimPrefix(srv.Endpoint(), "http://"))
	section := fmt.Sprintf("log:\n  level: debug\n"+"delta:\n  flush_interval: 200ms\n  compact_interval: 1s\n  compact_min_files: 2\n  compact_bytes_per_second: 0\n"+
		"replica:\n  url: s3://%s/lake\n  site: branch1\n  endpoint: http://%s\n  region: %s\n  access_key_id: %s\n  secret_access_key: %s\n"+
		"  poll_interval: 200ms\n  max_backoff: 1s\n  stall_timeout: 2s\n",
		bucket, s3Proxy.Addr(), s3test.Region, s3test.AccessKey, s3test.SecretKey)
	e := newE2EOn(t, cluster, []string{"public.counter", "public.events", "public.balances"}, section)
	e.exec(crashSchema)
	e.setSourceKey("dsn", fmt.Sprintf(`"host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable"`, pgProxy.Port(), e.slot))
	e.setSourceKey("logical_decoding_work_mem", "256KiB")
	d := e.start()
	waitState(t, e, d, "streaming")

	var mu sync.Mutex
	stop := make(chan struct{})
	wait := gatedCrashWorkload(t, e.dsn, 2, plan.pause, stop, nil)
	pauseWorkload := func(fn func()) {
		close(stop)
		if err := wait(); err != nil {
			t.Fatalf("workload: %v", err)
		}
		fn()
		stop = make(chan struct{})
		wait = gatedCrashWorkload(t, e.dsn, 2, plan.pause, stop, nil)
	}
	injected := map[string]int{}
	kills := 0
	for i := range plan.faults {
		time.Sleep(plan.every/2 + time.Duration(rng.Int64N(int64(plan.every))))
		kind := plan.kinds[rng.IntN(len(plan.kinds))]
		if i < len(plan.kinds) {
			kind = plan.kinds[i] // every kind at least once
		}
		t.Logf("fault %d: %s", i+1, kind)
		switch kind {
		case "sigkill":
			kills++
			e.sigkill(d, kills)
			d = e.start()
		case "sigkill-at-log":
			kills++
			d = killAtLog(t, e, d, kills, []string{"msg=applied", "msg=compacting", "msg=\"replica back online\""})
		case "pg-crash":
			pauseWorkload(func() {
				if err := cluster.Crash(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := cluster.Restart(context.Background()); err != nil {
					t.Fatal(err)
				}
				e.conn = pgtest.Conn(t, e.dsn) // the crash broke the test's own
			})
		case "s3-restart":
			srv.Stop()
			time.Sleep(time.Second)
			srv.Restart()
		case "pg-cut":
			pgProxy.Cut()
		case "s3-cut":
			s3Proxy.Cut()
		case "pg-blackhole", "s3-blackhole", "s3-slow":
			p, mode := s3Proxy, faultnet.Blackhole
			if kind == "pg-blackhole" {
				p = pgProxy
			}
			if kind == "s3-slow" {
				mode = faultnet.Slow
			}
			p.SetMode(mode)
			time.Sleep(3 * time.Second)
			p.SetMode(faultnet.Pass)
		}
		mu.Lock()
		injected[kind]++
		mu.Unlock()
	}
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	began := time.Now()
	e.waitApplied(d)
	e.waitRemote(d, "the drain after the faults")
	drain := time.Since(began)

	changes, lost, dup := e.countChanges(t)
	e.checkCrashTables(t, kills)
	e.stop(d)
	remote := &e2e{t: t, conn: e.conn, stateDir: t.TempDir()}
	if err := srv.Download(context.Background(), bucket, "lake/branch1/", filepath.Join(remote.stateDir, "tables")); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"public.counter", "public.events", "public.balances"} {
		for _, dir := range []string{filepath.Join(e.stateDir, "tables", tb), filepath.Join(remote.stateDir, "tables", tb),
			filepath.Join(e.stateDir, "tables", tb+"_changes"), filepath.Join(remote.stateDir, "tables", tb+"_changes")} {
			if err := deltatest.Check(context.Background(), dir); err != nil {
				t.Errorf("%s: %v", dir, err)
			}
		}
	}
	remote.compareMirror(t, "public.events", `SELECT id, n, payload FROM events`, "id", "n", "payload")
	remote.compareMirror(t, "public.balances", `SELECT id, n, amount FROM balances`, "id", "n", "amount")
	return chaosResult{name: plan.name, seed: plan.seed, injected: injected, changes: changes, lost: lost, dup: dup, drain: drain}
}

// hostPort returns "host:port" of a keyword/value DSN.
func hostPort(dsn string) string {
	var host, port string
	for _, f := range strings.Fields(dsn) {
		if v, ok := strings.CutPrefix(f, "host="); ok {
			host = v
		}
		if v, ok := strings.CutPrefix(f, "port="); ok {
			port = v
		}
	}
	return host + ":" + port
}

// killAtLog waits for the agent to log one of the messages (up to 10 s)
// and SIGKILLs it at once, then starts it again.
func killAtLog(t *testing.T, e *e2e, d *daemon, run int, messages []string) *daemon {
	t.Helper()
	start := len(d.log())
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		tail := d.log()[start:]
		if slicesContainsAny(tail, messages) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.sigkill(d, run)
	return e.start()
}

func slicesContainsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// countChanges counts the committed changes the crash workload's events
// changelog should hold (PostgreSQL's events per transaction), and how
// many it lacks and holds more than once.
func (e *e2e) countChanges(t *testing.T) (changes, lost, dup int64) {
	want, got, _ := e.eventsPerTxn(t)
	for n, w := range want {
		changes += w
		if g := got[n]; g < w {
			lost += w - g
		} else {
			dup += g - w
		}
	}
	for n, g := range got {
		if _, ok := want[n]; !ok {
			dup += g
		}
	}
	return changes, lost, dup
}
