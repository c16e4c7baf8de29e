//go:build bench

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
)

// TestBenchChangeDataFeed measures what the mirror's change data feed
// costs: the bytes of the files the mirror's commits add (data files, and
// change data files with the feed) and the bytes uploaded to a file://
// replica (every table), per changed row, for one workload of updates,
// inserts, deletes and key changes on a 200k-row table, run with and
// without delta.change_data_feed.
func TestBenchChangeDataFeed(t *testing.T) {
	const rows = 200_000
	fmt.Println()
	for _, cdf := range []bool{false, true} {
		replicaDir := t.TempDir()
		cfg := fmt.Sprintf("%s  change_data_feed: %v\nreplica:\n  url: file://%s\n  site: bench\n  poll_interval: 200ms\n",
			benchDeltaConfig, cdf, replicaDir)
		e := newE2EAlone(t, []string{"public.orders"}, cfg)
		d, uploadedBefore := e.startOrdersUploaded(rows)
		from := e.latestVersion("public.orders")

		rng := rand.New(rand.NewPCG(3, 4))
		pick := func(n int) []int64 {
			ids := make([]int64, n)
			for i, p := range rng.Perm(rows)[:n] {
				ids[i] = int64(p) + 1
			}
			return ids
		}
		var changed int64
		next := int64(rows + 1)
		for round := 0; round < 5; round++ {
			steps := []struct {
				sql  string
				args []any
			}{
				{`UPDATE orders SET qty = qty + 1, amount = amount + 0.01 WHERE id = ANY($1)`, []any{pick(rows / 100)}},
				{benchOrdersInsert, []any{next, next + 999}},
				{`DELETE FROM orders WHERE id = ANY($1)`, []any{pick(rows / 400)}},
				{`UPDATE orders SET id = -id WHERE id = ANY($1) AND id > 0`, []any{pick(rows / 1000)}},
			}
			next += 1000
			for _, s := range steps {
				v := e.latestVersion("public.orders")
				tag, err := e.conn.Exec(context.Background(), s.sql, s.args...)
				if err != nil {
					t.Fatal(err)
				}
				changed += tag.RowsAffected()
				for deadline := time.Now().Add(5 * time.Minute); e.latestVersion("public.orders") == v && tag.RowsAffected() > 0; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the mirror did not commit in 5 minutes; log:\n%s", d.stderr)
					}
				}
			}
		}
		e.waitApplied(d)
		e.waitRemote(d, "workload upload")
		var dataBytes, cdcBytes int64
		for _, c := range e.deltaCommits("public.orders", from) {
			for _, a := range c.actions {
				switch a := a.(type) {
				case *delta.Add:
					dataBytes += a.Size
				case *delta.AddCDC:
					cdcBytes += a.Size
				}
			}
		}
		uploaded := e.bytesUploaded() - uploadedBefore
		e.stop(d)
		fmt.Printf("BENCH change data feed %-3v: %.0f bytes written per changed row by the mirror (%.0f data, %.0f change data), %.0f bytes uploaded per changed row (%d changed rows)\n",
			map[bool]string{false: "off", true: "on"}[cdf], float64(dataBytes+cdcBytes)/float64(changed),
			float64(dataBytes)/float64(changed), float64(cdcBytes)/float64(changed), float64(uploaded)/float64(changed), changed)
	}
	fmt.Printf("  load %s\n", loadAvg())
}

// bytesUploaded returns the bytes the agent has uploaded to its replica.
func (e *e2e) bytesUploaded() int64 {
	e.t.Helper()
	cfg, err := config.Load(e.configPath)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := agent.ReadStatus(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if st.Upload == nil {
		e.t.Fatal("no upload status")
	}
	return st.Upload.BytesUploaded
}

// startOrdersUploaded creates the orders table with rows rows, starts the
// agent, and waits until they are in the Delta tables and on the replica;
// it returns the agent and the bytes uploaded so far.
func (e *e2e) startOrdersUploaded(rows int64) (*daemon, int64) {
	e.t.Helper()
	e.exec(benchOrdersDDL)
	e.insertOrders(0, rows)
	d := e.start()
	waitState(e.t, e, d, "streaming")
	e.waitApplied(d)
	e.waitRemote(d, "initial upload")
	return d, e.bytesUploaded()
}
