package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// TestSitesCommitConcurrently has eight sites commit ranges into one fleet
// table at once, each in its own partition, one of them adding a column
// midway, two of them through puts that fail before landing or land
// unheard, while a reader polls the log. Afterwards the log is contiguous
// and valid, every range is in it exactly once, each site's partition holds
// exactly the files it left there, and the reader never saw a version go
// backwards.
func TestSitesCommitConcurrently(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) fleet.Store) {
		ctx := context.Background()
		store := newStore(t)
		const sites, ranges = 8, 20
		proto, md := fleetSchema(t)

		stop := make(chan struct{})
		var polled []int64
		var readerErr error
		var readerWG sync.WaitGroup
		readerWG.Add(1)
		go func() {
			defer readerWG.Done()
			log, known := fleet.NewLog(store, "public.items"), int64(-1)
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := log.Latest(ctx, known)
				if err != nil {
					readerErr = err
					return
				}
				if v < known {
					readerErr = fmt.Errorf("version went back from %d to %d", known, v)
					return
				}
				if v >= 0 {
					if _, err := log.Read(ctx, v); err != nil {
						readerErr = err
						return
					}
				}
				known = v
				polled = append(polled, v)
				time.Sleep(5 * time.Millisecond)
			}
		}()

		live := make([]map[string]bool, sites) // each site's files, as it left them
		errs := make([]error, sites)
		var wg sync.WaitGroup
		for s := range sites {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[s] = runSite(ctx, t, store, s, ranges, proto, md, live)
			}()
		}
		wg.Wait()
		close(stop)
		readerWG.Wait()
		for s, err := range errs {
			if err != nil {
				t.Fatalf("site %d: %v", s, err)
			}
		}
		if readerErr != nil {
			t.Fatalf("reader: %v", readerErr)
		}

		// Every version reads, and every range is there once.
		log := fleet.NewLog(store, "public.items")
		head, err := log.Latest(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		logDir := filepath.Join(dir, delta.LogDirName)
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for v := int64(0); v <= head; v++ {
			acts, err := log.Read(ctx, v)
			if err != nil {
				t.Fatalf("version %d of %d: %v", v, head, err)
			}
			data, err := delta.EncodeCommit(acts, time0)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(logDir, delta.CommitFileName(v)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, a := range acts {
				if x, ok := a.(*delta.Txn); ok {
					seen[fmt.Sprintf("%s@%d", x.AppID, x.Version)]++
				}
			}
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("range %s is in the log %d times", k, n)
			}
		}
		if len(seen) != sites*ranges {
			t.Errorf("%d ranges in the log, want %d", len(seen), sites*ranges)
		}
		tbl, err := delta.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatalf("the fleet table does not read: %v", err)
		}
		got := make([]map[string]bool, sites)
		for i := range got {
			got[i] = map[string]bool{}
		}
		for _, f := range snap.Files() {
			var s int
			if _, err := fmt.Sscanf(*f.PartitionValues[snap.Schema().Fields[0].PhysicalName()], "site-%d", &s); err != nil {
				t.Fatalf("file %s: partition %v", f.Path, f.PartitionValues)
			}
			got[s][f.Path] = true
		}
		for s := range sites {
			if !mapsEqual(got[s], live[s]) {
				t.Errorf("site %d: the fleet holds %d files, the site left %d", s, len(got[s]), len(live[s]))
			}
		}
		if f, _ := snap.Schema().Field("added"); f == nil {
			t.Errorf("the column added midway is missing: %s", snap.Schema())
		}
		t.Logf("%d versions for %d ranges and a schema change; the reader polled %d times", head+1, sites*ranges, len(polled))
	})
}

// runSite commits ranges ranges of site s: each adds a file or two and
// sometimes removes one of its own; site 0 adds a column at range 5; site
// 1's every fourth put fails before it lands, site 2's every fifth lands
// unheard.
func runSite(ctx context.Context, t *testing.T, store fleet.Store, s, ranges int, proto *delta.Protocol, md *delta.Metadata, live []map[string]bool) error {
	site := fmt.Sprintf("site-%d", s)
	switch s {
	case 1:
		store = &faultyStore{Store: store, before: func(n int) bool { return n%4 == 0 }}
	case 2:
		store = &faultyStore{Store: store, after: func(n int) bool { return n%5 == 0 }}
	}
	w, err := fleet.Create(ctx, store, "public.items", proto, md, fleet.Options{Site: site, RunID: "run-" + site, MaxAttempts: 100})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(s), 7))
	files := map[string]bool{}
	appID := w.AppID("mirror", "local-"+site)
	for r := 1; r <= ranges; r++ {
		if s == 0 && r == 5 {
			if _, err := w.CommitSchema(ctx, addColumn("added")); err != nil {
				return err
			}
		}
		var acts []delta.Action
		for i := range 1 + rng.IntN(2) {
			p := fmt.Sprintf("%spart-%d-%d.parquet", w.SiteDir(), r, i)
			acts = append(acts, &delta.Add{Path: p, PartitionValues: w.SitePartition(), Size: 100, DataChange: true})
			files[p] = true
		}
		if len(files) > 3 && rng.IntN(2) == 0 {
			var old []string
			for p := range files {
				if !slices.ContainsFunc(acts, func(a delta.Action) bool { return a.(*delta.Add).Path == p }) {
					old = append(old, p)
				}
			}
			slices.Sort(old)
			p := old[rng.IntN(len(old))]
			acts = append(acts, &delta.Remove{Path: p, PartitionValues: w.SitePartition(), DataChange: true, DeletionTimestamp: ptr(int64(1))})
			delete(files, p)
		}
		for {
			_, err := w.Commit(ctx, fleet.Range{AppID: appID, Version: int64(r), Actions: acts, Operation: "MERGE"})
			if err == nil {
				break
			}
			if !errors.Is(err, fleet.ErrContention) && !errors.Is(err, errInjected) {
				return err
			}
		}
	}
	live[s] = files
	return nil
}
