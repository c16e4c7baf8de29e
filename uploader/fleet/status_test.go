package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// TestReadStatus has three sites commit ranges with source positions into
// one fleet table at once, each by a clock of its own; site 2 stops after
// its third range, and site 1's last range carries no position (as a
// local compaction would). ReadStatus then reports each site's last
// commit time, local version, fleet version and position, site 1's
// being its previous range's, and site 2 first, behind by the time
// between its last commit and the newest. It does so from the log alone
// and from the newest checkpoint and the commits after it. Afterwards
// each site opens the table again under a new run, its old one among its
// past runs: its positions count neither as its progress nor as a clone.
func TestReadStatus(t *testing.T) {
	for _, interval := range []int64{-1, 4} {
		t.Run(fmt.Sprintf("checkpoint interval %d", interval), func(t *testing.T) {
			eachStore(t, func(t *testing.T, newStore func(t *testing.T) fleet.Store) {
				testReadStatus(t, newStore(t), interval)
			})
		})
	}
}

func testReadStatus(t *testing.T, store fleet.Store, interval int64) {
	ctx := context.Background()
	scratch := t.TempDir()
	proto, md := fleetSchema(t)
	ranges := []int64{8, 8, 3} // the last range of each site
	// at is site s's clock at range r; lsn its position after range r.
	at := func(s int, r int64) time.Time {
		return time0.Add(time.Duration(r)*time.Second + time.Duration(s)*time.Millisecond)
	}
	lsn := func(s int, r int64) int64 { return int64(s+1)<<32 | r*100 }
	positioned := func(s int, r int64) bool { return s != 1 || r != ranges[1] }

	last := make([]int64, len(ranges)) // the fleet version of each site's last range
	errs := make([]error, len(ranges))
	var wg sync.WaitGroup
	for s := range ranges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var clock time.Time
			opts := siteOptions(t, s, interval, scratch)
			opts.Now = func() time.Time { return clock }
			clock = at(s, 0)
			w, err := fleet.Create(ctx, store, table, proto, md, opts)
			if err != nil {
				errs[s] = err
				return
			}
			appID := w.AppID("mirror", fmt.Sprintf("local-site-%d", s))
			for r := int64(1); r <= ranges[s]; r++ {
				clock = at(s, r)
				rg := fleet.Range{AppID: appID, Version: r, Operation: "WRITE", Actions: []delta.Action{
					&delta.Add{Path: fmt.Sprintf("%spart-%d.parquet", w.SiteDir(), r), PartitionValues: w.SitePartition(), Size: 100, DataChange: true}}}
				if positioned(s, r) {
					rg.Position = &fleet.Position{AppID: w.PositionAppID("mirror"), Version: lsn(s, r)}
				}
				for {
					last[s], err = w.Commit(ctx, rg)
					if !errors.Is(err, fleet.ErrContention) {
						break
					}
				}
				if err != nil {
					errs[s] = fmt.Errorf("range %d: %w", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for s, err := range errs {
		if err != nil {
			t.Fatalf("site %d: %v", s, err)
		}
	}

	st, err := fleet.ReadStatus(ctx, store, table)
	if err != nil {
		t.Fatal(err)
	}
	head, err := fleet.NewLog(store, table).Latest(ctx, -1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Table != table || st.Version != head {
		t.Errorf("table %s at %d, want %s at %d", st.Table, st.Version, table, head)
	}
	if cp := lastCheckpoint(ctx, t, store); st.Checkpoint != cp || (interval > 0 && cp < interval) {
		t.Errorf("read from checkpoint %d, _last_checkpoint names %d", st.Checkpoint, cp)
	}
	if len(st.Sites) != len(ranges) {
		t.Fatalf("%d sites, want %d: %+v", len(st.Sites), len(ranges), st.Sites)
	}
	newest := at(1, ranges[1])
	for i, s := range []int{2, 0, 1} { // laggard first
		got := st.Sites[i]
		r := ranges[s]
		want := fleet.SiteStatus{Site: fmt.Sprintf("site-%d", s), Kind: "mirror", LocalID: fmt.Sprintf("local-site-%d", s),
			LastCommit: at(s, r).UTC(), LocalVersion: r, LSN: lsn(s, r), FleetVersion: last[s], Behind: newest.Sub(at(s, r))}
		if !positioned(s, r) {
			want.LSN = lsn(s, r-1)
		}
		if last[s] <= st.Checkpoint {
			want.FleetVersion = -1
		}
		if got != want {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got, want)
		}
	}

	for s := range ranges {
		opts := siteOptions(t, s, interval, scratch)
		opts.RunID, opts.PastRuns = "later-run", []string{opts.RunID}
		w, err := fleet.Open(ctx, store, table, opts)
		if err != nil {
			t.Fatalf("site %d opens again: %v", s, err)
		}
		if local, _, ok := w.Progress(w.AppID("mirror", fmt.Sprintf("local-site-%d", s))); !ok || local != ranges[s] {
			t.Errorf("site %d: progress %d (%v), want %d", s, local, ok, ranges[s])
		}
		if _, _, ok := w.Progress(w.PositionAppID("mirror")); ok {
			t.Errorf("site %d: its position counts as progress", s)
		}
	}
}

// TestReadStatusOfMissingTable reads a table no site created: no error,
// version -1, no sites.
func TestReadStatusOfMissingTable(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) fleet.Store) {
		st, err := fleet.ReadStatus(context.Background(), newStore(t), "public.none")
		if err != nil || st.Version != -1 || st.Checkpoint != -1 || len(st.Sites) != 0 {
			t.Errorf("got %+v, %v; want version -1 and no sites", st, err)
		}
	})
}

// TestPositionOfAnotherSite refuses a range whose position is another
// site's: a site writes only its own txn actions.
func TestPositionOfAnotherSite(t *testing.T) {
	ctx := context.Background()
	store := uploader.FleetStore(must(file.New(filepath.Join(t.TempDir(), "fleet"))))
	proto, md := fleetSchema(t)
	w0 := must(fleet.Create(ctx, store, table, proto, md, siteOptions(t, 0, -1, t.TempDir())))
	w1 := must(fleet.Open(ctx, store, table, siteOptions(t, 1, -1, t.TempDir())))
	_, err := w0.Commit(ctx, fleet.Range{AppID: w0.AppID("mirror", "local"), Version: 1, Operation: "WRITE",
		Position: &fleet.Position{AppID: w1.PositionAppID("mirror"), Version: 42}})
	if err == nil || !strings.Contains(err.Error(), "position") {
		t.Errorf("commit with site 1's position as site 0: %v, want an error", err)
	}
	if v := w0.Version(); v != 0 {
		t.Errorf("version %d after the refused commit, want 0", v)
	}
}
