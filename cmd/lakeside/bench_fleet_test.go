//go:build bench

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
)

// TestBenchFleetLayout runs the same workload on five sites replicating
// to one S3 server, in the site layout and in the fleet layout: random
// single-row updates, 20 a transaction, every 200 ms, on tables of 10k
// rows of about 100 B. It prints bytes uploaded per changed row under
// each layout and, for the fleet, the time from a site's local commit to
// the fleet commit that holds it (p50 and p99), against fleet_interval.
func TestBenchFleetLayout(t *testing.T) {
	const sites, rounds, perRound = 5, 40, 20
	const interval = time.Second
	fmt.Println()
	var perRow [2]float64
	for li, layout := range []string{"site", "fleet"} {
		srv := s3test.Start(t)
		bucket := srv.NewBucket()
		es := make([]*e2e, sites)
		ds := make([]*daemon, sites)
		for i := range sites {
			section := replicaSectionAt(srv, "s3://"+bucket+"/lake", fmt.Sprintf("site-%d", i),
				fmt.Sprintf("  layout: %s\n  fleet_interval: %s\n  poll_interval: 200ms\n", layout, interval))
			es[i] = newE2EWith(t, []string{"public.items"}, "delta:\n  flush_interval: 200ms\n  compaction: false\n"+section)
			es[i].exec(`CREATE TABLE items (id int8 PRIMARY KEY, n int4, pad text)`,
				`INSERT INTO items SELECT g, 0, md5(g::text) || md5((g+1)::text) || md5((g+2)::text) FROM generate_series(1, 10000) g`)
			ds[i] = es[i].start()
		}
		before := make([]int64, sites)
		for i, e := range es {
			e.waitApplied(ds[i])
			e.waitRemote(ds[i], "the initial copy")
			before[i] = e.bytesUploaded()
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var rowBytes int64
		for i, e := range es {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				for range rounds {
					tx, err := e.conn.Begin(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					for range perRound {
						var size int64
						if err := tx.QueryRow(context.Background(), `UPDATE items SET n = n + 1 WHERE id = $1 RETURNING pg_column_size(items.*)`,
							1+rng.Int64N(10000)).Scan(&size); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						rowBytes += size
						mu.Unlock()
					}
					if err := tx.Commit(context.Background()); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		var uploaded int64
		for i, e := range es {
			e.waitApplied(ds[i])
			e.waitRemote(ds[i], "the workload")
			uploaded += e.bytesUploaded() - before[i]
		}
		changed := float64(sites * rounds * perRound)
		perRow[li] = float64(uploaded) / changed
		line := fmt.Sprintf("BENCH fleet layout, %d sites, %s layout: %.0f bytes uploaded per changed row of %.0f B",
			sites, layout, perRow[li], float64(rowBytes)/changed)
		if layout == "fleet" {
			dir := t.TempDir()
			if err := srv.Download(context.Background(), bucket, "lake/", dir); err != nil {
				t.Fatal(err)
			}
			lat := visibleAfter(t, es, filepath.Join(dir, "public.items"))
			slices.Sort(lat)
			line += fmt.Sprintf("; local commit to fleet commit p50 %s, p99 %s (fleet_interval %s, %d commits)",
				lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), interval, len(lat))
		}
		fmt.Println(line)
		for i, e := range es {
			e.stop(ds[i])
		}
	}
	fmt.Printf("  bytes uploaded per changed row, fleet / site layout: %.2f; load %s\n", perRow[1]/perRow[0], loadAvg())
}

// visibleAfter returns, for every local mirror version of each site after
// its first, the time from its local commit to the fleet commit that first
// holds it, from the commit times of both logs (one clock).
func visibleAfter(t *testing.T, es []*e2e, fleetDir string) []time.Duration {
	ctx := context.Background()
	fleetTbl, err := delta.Open(ctx, fleetDir)
	if err != nil {
		t.Fatal(err)
	}
	head, err := fleetTbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type held struct {
		local int64
		at    time.Time
	}
	bySite := map[string][]held{}
	for v := int64(0); v <= head; v++ {
		acts, err := fleetTbl.ReadCommit(ctx, v)
		if err != nil {
			continue // before a checkpoint
		}
		at, err := fleetTbl.CommitTimestamp(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if x, ok := a.(*delta.Txn); ok && strings.HasPrefix(x.AppID, "lakeside-fleet/") && strings.Contains(x.AppID, "/public.items/mirror/") {
				site := strings.Split(x.AppID, "/")[1]
				bySite[site] = append(bySite[site], held{x.Version, at})
			}
		}
	}
	var out []time.Duration
	for i, e := range es {
		local, err := delta.Open(ctx, filepath.Join(e.stateDir, "tables", "public.items"))
		if err != nil {
			t.Fatal(err)
		}
		latest, err := local.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs := bySite[fmt.Sprintf("site-%d", i)]
		for v := int64(1); v <= latest; v++ {
			at, err := local.CommitTimestamp(ctx, v)
			if err != nil {
				continue // expired
			}
			for _, h := range hs {
				if h.local >= v {
					out = append(out, h.at.Sub(at))
					break
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no local version found in the fleet")
	}
	return out
}
