//go:build bench

package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestBenchLiveViewUnderAttack measures the live view and the Delta tables
// with 200 stream clients on a 100k-row table (over the in-memory limit, so
// served from its mirror) while PostgreSQL commits about 2k transactions/s,
// once calm and once with 3000 idle connections, 3000 silent ones and 500
// sending half a request header, plus a loop of every
// hostile request of the security review. It reports the agent's peak
// memory and descriptors, the commit → client latency and the Delta
// freshness of both runs side by side.
func TestBenchLiveViewUnderAttack(t *testing.T) {
	type result struct {
		rssMiB, fds      int64
		p50, p99         time.Duration
		fresh99, freshMx time.Duration
		hostile          int64
		txnPerSec        float64
	}
	run := func(hostile bool) result {
		addr := freeAddr(t)
		e := newE2EAlone(t, []string{"public.big"}, "http:\n  listen: "+addr+"\n  max_clients: 256\n"+benchDeltaConfig)
		e.exec(`CREATE TABLE big (id int PRIMARY KEY, v int8 NOT NULL, at_us int8 NOT NULL, pad text)`,
			`INSERT INTO big SELECT g, 0, 0, md5(g::text) FROM generate_series(1, 100000) g`)
		d := e.start()
		e.waitApplied(d)
		pid := d.cmd.Process.Pid
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + "/api/v1/tables/public.big/rows?limit=1")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the live view did not serve public.big; log:\n%s", d.log())
			}
		}

		// Peak resident memory and descriptors, sampled.
		var peakRSS, peakFDs atomic.Int64
		stopSampling := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Go(func() {
			for {
				if anon, file, err := rss(pid); err == nil && anon+file > peakRSS.Load() {
					peakRSS.Store(anon + file)
				}
				if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && int64(len(fds)) > peakFDs.Load() {
					peakFDs.Store(int64(len(fds)))
				}
				select {
				case <-stopSampling:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})

		// 200 clients read the snapshot, then the changes; one in 20
		// times each change from its commit.
		const clients, sampleEvery = 200, 20
		var mu sync.Mutex
		var latencies []time.Duration
		var wg sync.WaitGroup
		snapshotted := make(chan struct{}, clients)
		snapshotErrs := make(chan error, clients)
		conns := make([]*websocket.Conn, clients)
		for i := range conns {
			ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/v1/stream?tables=public.big", nil)
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			conns[i] = ws
			sampling := i%sampleEvery == 0
			wg.Go(func() {
				var local []time.Duration
				inSnapshot := true
				for {
					_, data, err := ws.ReadMessage()
					if err != nil {
						if inSnapshot {
							snapshotErrs <- err
						}
						break
					}
					now := time.Now()
					var m streamMessage
					if inSnapshot || sampling {
						if json.Unmarshal(data, &m) != nil {
							continue
						}
					}
					if inSnapshot && m.Type == "snapshot" && m.Last {
						inSnapshot = false
						snapshotted <- struct{}{}
					}
					local = append(local, m.latencies(now)...)
				}
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			})
		}
		for range clients {
			select {
			case <-snapshotted:
			case err := <-snapshotErrs:
				t.Fatalf("a client lost its stream during the snapshot: %v; log:\n%s", err, d.log())
			case <-time.After(10 * time.Minute):
				t.Fatal("the clients did not receive their snapshots in 10 minutes")
			}
		}

		var hostileDone atomic.Int64
		stopHostile := make(chan struct{})
		var attackers sync.WaitGroup
		var idle []net.Conn
		if hostile {
			for range 3000 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				idle = append(idle, c)
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				bufio.NewReader(c).ReadString('\n')
			}
			// Then 3000 connections that send nothing and 500 that
			// send half a request header.
			for i := range 3500 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				idle = append(idle, c)
				if i >= 3000 {
					fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.")
				}
			}
			requests := []struct {
				path string
				host string
			}{
				{"/api/v1/tables/public.big/rows?after=1e999999", ""},
				{"/api/v1/tables/public.big/rows/1e999999", ""},
				{"/api/v1/tables/public.big/rows?limit=10000", "attacker.example"},
				{"/api/v1/tables/public.big/rows?as_of=0001-01-01T00:00:00Z", ""},
				{"/api/v1/tables/public.big/history?limit=1000", ""},
				{"/api/v1/tables/public.big/rows?limit=10000", ""},
				{"/api/v1/stream?tables=" + strings.TrimSuffix(strings.Repeat("public.big,", 3000), ","), ""},
			}
			for w := range 4 {
				attackers.Go(func() {
					client := &http.Client{Timeout: time.Minute}
					for i := w; ; i++ {
						select {
						case <-stopHostile:
							return
						default:
						}
						r := requests[i%len(requests)]
						req, _ := http.NewRequest(http.MethodGet, "http://"+addr+r.path, nil)
						if r.host != "" {
							req.Host = r.host
						}
						if resp, err := client.Do(req); err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						hostileDone.Add(1)
					}
				})
			}
		}

		const perSecond, seconds, writers = 2000, 10, 8
		perWriter := perSecond * seconds / writers
		sent, took := runWriters(t, e.dsn, writers, perWriter, perSecond, func(w, i int) (string, []any) {
			return `UPDATE big SET v = v + 1, at_us = (extract(epoch from clock_timestamp()) * 1000000)::int8 WHERE id = $1`,
				[]any{1 + (w*perWriter+i)%100000}
		})
		time.Sleep(2 * time.Second)
		close(stopHostile)
		attackers.Wait()
		for _, c := range idle {
			c.Close()
		}
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
		e.waitApplied(d)
		close(stopSampling)
		sampler.Wait()
		e.stop(d)

		if len(latencies) == 0 {
			t.Fatal("no change reached a client")
		}
		slices.Sort(latencies)
		rows := e.deltaRows("public.big_changes")
		commits := e.deltaCommits("public.big_changes", -1)
		var fresh []time.Duration
		for _, r := range rows {
			if r["_op"] != "update" {
				continue
			}
			lsn, ts := r["_lsn"].(int64), r["_commit_ts"].(time.Time)
			i, _ := slices.BinarySearchFunc(commits, lsn, func(c deltaCommit, l int64) int { return cmp.Compare(c.lsn, l) })
			if i < len(commits) {
				fresh = append(fresh, commits[i].at.Sub(ts))
			}
		}
		if len(fresh) == 0 {
			t.Fatal("no update reached the changelog")
		}
		slices.Sort(fresh)
		return result{rssMiB: peakRSS.Load() >> 20, fds: peakFDs.Load(), p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99),
			fresh99: percentile(fresh, 0.99), freshMx: fresh[len(fresh)-1], hostile: hostileDone.Load(), txnPerSec: float64(sent) / took.Seconds()}
	}
	calm := run(false)
	attacked := run(true)
	fmt.Println()
	for _, r := range []struct {
		name string
		r    result
	}{{"calm", calm}, {"under attack", attacked}} {
		fmt.Printf("BENCH live view %s: peak RSS %d MiB, peak descriptors %d, commit → client p50 %v p99 %v, Delta freshness p99 %v (max %v), %.0f txn/s, %d hostile requests\n",
			r.name, r.r.rssMiB, r.r.fds, r.r.p50.Round(time.Millisecond), r.r.p99.Round(time.Millisecond),
			r.r.fresh99.Round(time.Millisecond), r.r.freshMx.Round(time.Millisecond), r.r.txnPerSec, r.r.hostile)
	}
	fmt.Printf("  200 stream clients on a 100000-row table served from its mirror, 2k txn/s for 10 s; under attack also 3000 idle,\n")
	fmt.Printf("  3000 silent and 500 half-header connections and 4 loops of hostile requests; p99 ratio under attack/calm %.2f; load %s\n",
		float64(attacked.p99)/float64(calm.p99), loadAvg())
}
