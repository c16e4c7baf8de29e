//go:build bench

package fleet_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/fleet"
	"github.com/lakeside/lakeside/uploader/s3"
)

// TestBenchFleetCommits has 1, 5 and 20 sites commit into one fleet table
// on versitygw as fast as they can for a few seconds each, and prints the
// fleet's commits per second, lost races and other commits read per
// commit, and the time from a
// site's call to its commit being in the log (p50, p99), against the same
// number of clients putting objects of the same size with no condition
// (the server's own ceiling for these requests).
func TestBenchFleetCommits(t *testing.T) {
	srv := s3test.Start(t)
	newClient := func(bucket string) uploader.ReplicaClient {
		c, err := s3.New(s3.Config{Endpoint: srv.Endpoint(), Region: s3test.Region, AccessKeyID: s3test.AccessKey,
			SecretAccessKey: s3test.SecretKey, Bucket: bucket, Prefix: "fleet",
			Retry: s3.RetryPolicy{MaxRetries: 2, MinWait: 10e6, MaxWait: 50e6}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const window = 4 * time.Second
	proto, md := fleetSchema(t)
	fmt.Println()
	type run struct {
		sites int
		every time.Duration // 0: as fast as they can
	}
	for _, c := range []run{{1, 0}, {5, 0}, {20, 0}, {5, 250 * time.Millisecond}, {20, 250 * time.Millisecond}} {
		sites := c.sites
		ctx := context.Background()
		store := uploader.FleetStore(newClient(srv.NewBucket()))
		var mu sync.Mutex
		var latencies []time.Duration
		var lost, read, commits int64
		perSite := make([]int, sites)
		var commitBytes int
		var wg sync.WaitGroup
		errs := make([]error, sites)
		deadline := time.Now().Add(window)
		for s := range sites {
			wg.Add(1)
			go func() {
				defer wg.Done()
				site := fmt.Sprintf("site-%02d", s)
				w, err := fleet.Create(ctx, store, "public.items", proto, md, fleet.Options{Site: site, RunID: "run-" + site})
				if err != nil {
					errs[s] = err
					return
				}
				appID := w.AppID("changelog", "local")
				next := time.Now()
				for r := int64(1); time.Now().Before(deadline); r++ {
					if c.every > 0 {
						time.Sleep(time.Until(next))
						next = next.Add(c.every)
					}
					acts := []delta.Action{benchAdd(w, r, 0), benchAdd(w, r, 1)}
					start := time.Now()
					if _, err := w.Commit(ctx, fleet.Range{AppID: appID, Version: r, Actions: acts, Operation: "WRITE"}); err != nil {
						if errors.Is(err, fleet.ErrContention) {
							r--
							continue
						}
						errs[s] = err
						return
					}
					took := time.Since(start)
					mu.Lock()
					latencies, commits = append(latencies, took), commits+1
					perSite[s]++
					if commitBytes == 0 {
						data, _ := delta.EncodeCommit(acts, time0)
						commitBytes = len(data) + 300
					}
					mu.Unlock()
				}
				l, o := w.Contention()
				mu.Lock()
				lost, read = lost+l, read+o
				mu.Unlock()
			}()
		}
		wg.Wait()
		for s, err := range errs {
			if err != nil {
				t.Fatalf("%d sites: site %d: %v", sites, s, err)
			}
		}
		slices.Sort(latencies)
		rate := float64(commits) / window.Seconds()
		stats := fmt.Sprintf("a commit lost %.2f races and read %.2f other commits; commit in the log p50 %s, p99 %s; the slowest site made %d commits, the fastest %d",
			float64(lost)/float64(commits), float64(read)/float64(commits),
			latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)*99/100].Round(time.Millisecond),
			slices.Min(perSite), slices.Max(perSite))
		if c.every > 0 {
			fmt.Printf("BENCH fleet commits, %2d sites, each every %s: %6.1f commits/s; %s\n", sites, c.every, rate, stats)
			continue
		}
		base := rawPuts(t, newClient(srv.NewBucket()), sites, commitBytes, window)
		fmt.Printf("BENCH fleet commits, %2d sites, flat out: %6.1f commits/s (raw puts of the same size by as many clients: %6.1f/s, ratio %.2f); %s\n",
			sites, rate, base, rate/base, stats)
	}
	fmt.Printf("  %s a run, one table, commits of two adds each; load %s\n", window, loadAvg())
}

// benchAdd returns an add of the bench's site w, with stats like a
// changelog file's.
func benchAdd(w *fleet.Writer, r int64, i int) *delta.Add {
	return &delta.Add{Path: fmt.Sprintf("%scommit_date=2026-12-07/part-%05d-%d.snappy.parquet", w.SiteDir(), r, i),
		PartitionValues: w.SitePartition(), Size: 5000, ModificationTime: 1, DataChange: true,
		Stats: `{"numRecords":20,"minValues":{"col-1":1},"maxValues":{"col-1":9999},"nullCount":{"col-1":0}}`}
}

// rawPuts has clients clients put objects of size bytes under fresh keys,
// with no condition, for window, and returns puts per second.
func rawPuts(t *testing.T, c uploader.ReplicaClient, clients, size int, window time.Duration) float64 {
	t.Helper()
	data := bytes.Repeat([]byte("x"), size)
	sum := sha256.Sum256(data)
	var mu sync.Mutex
	var n int
	var wg sync.WaitGroup
	deadline := time.Now().Add(window)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(deadline); j++ {
				body := uploader.Body{R: bytes.NewReader(data), Size: int64(size), SHA256: sum[:]}
				if err := c.PutObject(context.Background(), fmt.Sprintf("raw/%d/%d", i, j), body, uploader.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return float64(n) / window.Seconds()
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
