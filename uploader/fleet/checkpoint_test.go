package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// table is the fleet table the checkpoint tests commit into.
const table = "public.items"

// TestCheckpointsOfConcurrentSites has five sites commit ranges into one
// fleet table at once, with a checkpoint every 5 versions, one of them
// adding a column midway, each removing some of its files. Afterwards a
// checkpoint is at every multiple of 5, _last_checkpoint names the newest,
// each checkpoint with only the commits after it reads as the same
// snapshot as the whole log without checkpoints (files, tombstones, txns,
// schema), and a Writer opened afterwards knows every site's progress.
// Nothing is logged: no checkpoint failed.
func TestCheckpointsOfConcurrentSites(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) fleet.Store) {
		ctx := context.Background()
		store := newStore(t)
		scratch := t.TempDir()
		const sites, ranges, interval = 5, 8, 5
		proto, md := fleetSchema(t)

		last := make([]int64, sites) // the version of each site's last range
		errs := make([]error, sites)
		var wg sync.WaitGroup
		for s := range sites {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last[s], errs[s] = commitSite(ctx, store, siteOptions(t, s, interval, scratch), s, 1, ranges, proto, md)
			}()
		}
		wg.Wait()
		for s, err := range errs {
			if err != nil {
				t.Fatalf("site %d: %v", s, err)
			}
		}

		log := fleet.NewLog(store, table)
		head, err := log.Latest(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		newest := head - head%interval
		if newest < 2*interval {
			t.Fatalf("head %d: too few versions for two checkpoints", head)
		}
		if v := lastCheckpoint(ctx, t, store); v != newest {
			t.Fatalf("_last_checkpoint names %d, want %d (head %d)", v, newest, head)
		}

		plain := copyLog(ctx, t, store, 0, head, -1)
		for cp := int64(interval); cp <= head; cp += interval {
			if _, err := store.Get(ctx, table+"/_delta_log/"+delta.CheckpointFileName(cp), fleet.MaxCheckpointBytes); err != nil {
				t.Fatalf("checkpoint %d of head %d: %v", cp, head, err)
			}
			// The checkpoint and the commits after it only: delta must
			// read the checkpoint.
			only := copyLog(ctx, t, store, cp+1, head, cp)
			sameSnapshot(t, fmt.Sprintf("at %d from checkpoint %d", cp, cp), snapshotAt(t, only, cp), snapshotAt(t, plain, cp))
			sameSnapshot(t, fmt.Sprintf("at %d from checkpoint %d", head, cp), snapshotAt(t, only, head), snapshotAt(t, plain, head))
		}
		if len(snapshotAt(t, plain, head).Tombstones()) == 0 {
			t.Errorf("no tombstones at %d: the test removes no files", head)
		}

		for s := range sites {
			w, err := fleet.Open(ctx, store, table, siteOptions(t, s, interval, scratch))
			if err != nil {
				t.Fatalf("site %d: %v", s, err)
			}
			local, at, ok := w.Progress(w.AppID("mirror", fmt.Sprintf("local-site-%d", s)))
			if !ok || local != ranges || (at != last[s] && (last[s] > newest || at != newest)) {
				t.Errorf("site %d: progress %d at %d (%v); want %d at %d, or at %d when a checkpoint says it",
					s, local, at, ok, ranges, last[s], newest)
			}
			if w.Version() != head {
				t.Errorf("site %d: version %d, want %d", s, w.Version(), head)
			}
			if f, _ := must(w.Metadata().Schema()).Field("added"); f == nil {
				t.Errorf("site %d: the column added midway is missing", s)
			}
		}
		if left, _ := os.ReadDir(scratch); len(left) > 0 {
			t.Errorf("the scratch directory holds %d entries, not removed: %s", len(left), left[0].Name())
		}
		t.Logf("%d versions, checkpoints up to %d", head+1, newest)
	})
}

// TestOpenFromCheckpoint commits with a checkpoint every 5 versions, then
// deletes every commit before the newest checkpoint, and the checkpoints
// before it, as log expiry would. Open then still reads the table, from
// the checkpoint: the head, the schema, the progress of a site whose last
// range is only in the checkpoint and of one whose last range came after
// it; the sites commit on, and Log.Latest finds the head.
func TestOpenFromCheckpoint(t *testing.T) {
	eachClient(t, func(t *testing.T, newClient func(t *testing.T) uploader.ReplicaClient) {
		ctx := context.Background()
		client := newClient(t)
		store := uploader.FleetStore(client)
		scratch := t.TempDir()
		proto, md := fleetSchema(t)
		// Site 0's ranges are versions 1 to 5 and 7, its column 6, site
		// 1's ranges 8 to 13: checkpoints at 5 and 10.
		if _, err := commitSite(ctx, store, siteOptions(t, 0, 5, scratch), 0, 1, 6, proto, md); err != nil {
			t.Fatal(err)
		}
		if _, err := commitSite(ctx, store, siteOptions(t, 1, 5, scratch), 1, 1, 6, proto, md); err != nil {
			t.Fatal(err)
		}
		const head, cp = 13, 10
		for v := range int64(cp) {
			if err := client.DeleteObject(ctx, table+"/_delta_log/"+delta.CommitFileName(v)); err != nil {
				t.Fatal(err)
			}
		}
		if err := client.DeleteObject(ctx, table+"/_delta_log/"+delta.CheckpointFileName(5)); err != nil {
			t.Fatal(err)
		}
		if v, err := fleet.NewLog(store, table).Latest(ctx, -1); err != nil || v != head {
			t.Fatalf("Latest: %d, %v; want %d", v, err, head)
		}
		for s, want := range []struct{ local, fleet int64 }{{6, cp}, {6, head}} {
			w, err := fleet.Open(ctx, store, table, siteOptions(t, s, 5, scratch))
			if err != nil {
				t.Fatalf("site %d: %v", s, err)
			}
			appID := w.AppID("mirror", fmt.Sprintf("local-site-%d", s))
			if local, at, ok := w.Progress(appID); !ok || local != want.local || at != want.fleet {
				t.Errorf("site %d: progress %d at %d (%v), want %d at %d", s, local, at, ok, want.local, want.fleet)
			}
			if w.Version() != head+int64(s) { // site 0 commits one more below
				t.Errorf("site %d: version %d, want %d", s, w.Version(), head+int64(s))
			}
			if f, _ := must(w.Metadata().Schema()).Field("added"); f == nil {
				t.Errorf("site %d: the column site 0 added is missing", s)
			}
			v, err := w.Commit(ctx, fleet.Range{AppID: appID, Version: 7, Operation: "WRITE", Actions: []delta.Action{
				&delta.Add{Path: w.SiteDir() + "part-7.parquet", PartitionValues: w.SitePartition(), Size: 100, DataChange: true}}})
			if err != nil || v != head+1+int64(s) {
				t.Errorf("site %d: commit after open: version %d, %v", s, v, err)
			}
		}
	})
}

// TestOpenPassesOverBadCheckpoint corrupts the checkpoint _last_checkpoint
// names. Open then reads the log from version 0 and knows the site's
// progress; the next checkpoint is written all the same, replayed from
// version 0, and reads. Once version 0 is gone too, Open fails and says
// why.
func TestOpenPassesOverBadCheckpoint(t *testing.T) {
	eachClient(t, func(t *testing.T, newClient func(t *testing.T) uploader.ReplicaClient) {
		ctx := context.Background()
		client := newClient(t)
		store := uploader.FleetStore(client)
		scratch := t.TempDir()
		proto, md := fleetSchema(t)
		opts := siteOptions(t, 0, 5, scratch)
		opts.Logger = slog.New(slog.DiscardHandler) // the bad checkpoint is logged
		if _, err := commitSite(ctx, store, opts, 0, 1, 6, proto, md); err != nil {
			t.Fatal(err)
		}
		cpKey := table + "/_delta_log/" + delta.CheckpointFileName(5)
		if err := store.Put(ctx, cpKey, []byte("not a checkpoint")); err != nil {
			t.Fatal(err)
		}
		w, err := fleet.Open(ctx, store, table, opts)
		if err != nil {
			t.Fatal(err)
		}
		appID := w.AppID("mirror", "local-site-0")
		if local, at, ok := w.Progress(appID); !ok || local != 6 || at != 7 {
			t.Errorf("progress %d at %d (%v), want 6 at 7", local, at, ok)
		}
		// Versions 8 to 10: a checkpoint at 10.
		if _, err := commitSite(ctx, store, opts, 0, 7, 9, proto, md); err != nil {
			t.Fatal(err)
		}
		if v := lastCheckpoint(ctx, t, store); v != 10 {
			t.Fatalf("_last_checkpoint names %d, want 10", v)
		}
		only := copyLog(ctx, t, store, 11, 10, 10)
		plain := copyLog(ctx, t, store, 0, 10, -1)
		sameSnapshot(t, "at 10", snapshotAt(t, only, 10), snapshotAt(t, plain, 10))

		if err := store.Put(ctx, table+"/_delta_log/"+delta.CheckpointFileName(10), []byte("not a checkpoint either")); err != nil {
			t.Fatal(err)
		}
		if err := client.DeleteObject(ctx, table+"/_delta_log/"+delta.CommitFileName(0)); err != nil {
			t.Fatal(err)
		}
		_, err = fleet.Open(ctx, store, table, opts)
		if err == nil || !strings.Contains(err.Error(), "checkpoint 10") || !strings.Contains(err.Error(), "version 0") {
			t.Errorf("Open without a readable checkpoint nor version 0: %v", err)
		}
	})
}

// TestLastCheckpointOnlyMovesForward has site 0 commit versions 1 to 5
// and checkpoint 5 while site 1 commits on and checkpoints a newer
// version. Site 0 then leaves _last_checkpoint naming site 1's checkpoint:
//
//   - "named": site 1, with a checkpoint every 7 versions, commits 6 and 7
//     and checkpoints 7 while site 0 puts its checkpoint; site 0 reads
//     _last_checkpoint naming 7.
//   - "due": site 1 commits 6 to 10 and checkpoints 10 just after site 0
//     read _last_checkpoint, still absent; site 0 finds version 10, whose
//     committer checkpoints it, committed.
func TestLastCheckpointOnlyMovesForward(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval int64 // site 1's
		ranges   int64 // site 1's
		afterGet bool  // site 1 commits after site 0's next read of _last_checkpoint
	}{{"named", 7, 2, false}, {"due", 5, 5, true}} {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, newStore func(t *testing.T) fleet.Store) {
				ctx := context.Background()
				store := newStore(t)
				scratch := t.TempDir()
				proto, md := fleetSchema(t)
				newest := 5 + c.ranges
				site1 := func() {
					if _, err := commitSite(ctx, store, siteOptions(t, 1, c.interval, scratch), 1, 1, c.ranges, proto, md); err != nil {
						t.Errorf("site 1: %v", err)
					}
					if v := lastCheckpoint(ctx, t, store); v != newest {
						t.Errorf("site 1 left _last_checkpoint naming %d, want %d", v, newest)
					}
				}
				put5, fired := false, false
				slow := &hookStore{Store: store,
					beforePut: func(key string) {
						if strings.HasSuffix(key, "/"+delta.CheckpointFileName(5)) {
							put5 = true
							if !c.afterGet && !fired {
								fired = true
								site1()
							}
						}
					},
					afterGet: func(key string) {
						if put5 && c.afterGet && !fired && strings.HasSuffix(key, "/"+delta.LastCheckpointName) {
							fired = true
							site1()
						}
					}}
				if _, err := commitSite(ctx, slow, siteOptions(t, 0, 5, scratch), 0, 1, 5, proto, md); err != nil {
					t.Fatal(err)
				}
				if !fired {
					t.Fatal("site 0 wrote no checkpoint of version 5")
				}
				for _, v := range []int64{5, newest} {
					if _, err := store.Get(ctx, table+"/_delta_log/"+delta.CheckpointFileName(v), fleet.MaxCheckpointBytes); err != nil {
						t.Errorf("checkpoint %d: %v", v, err)
					}
				}
				if v := lastCheckpoint(ctx, t, store); v != newest {
					t.Errorf("_last_checkpoint names %d, want %d", v, newest)
				}
			})
		})
	}
}

// hookStore calls beforePut before each conditional put and afterGet after
// each read, with the key.
type hookStore struct {
	fleet.Store
	beforePut func(key string)
	afterGet  func(key string)
}

func (s *hookStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	s.beforePut(key)
	return s.Store.PutIfAbsent(ctx, key, data)
}

func (s *hookStore) Get(ctx context.Context, key string, limit int64) ([]byte, error) {
	data, err := s.Store.Get(ctx, key, limit)
	s.afterGet(key)
	return data, err
}

// siteOptions returns the options of site s with a checkpoint every
// interval versions, its scratch directory under scratch, and a logger
// that fails the test: nothing may fail unseen.
func siteOptions(t *testing.T, s int, interval int64, scratch string) fleet.Options {
	site := fmt.Sprintf("site-%d", s)
	return fleet.Options{Site: site, RunID: "run-" + site, MaxAttempts: 100, CheckpointInterval: interval,
		ScratchDir: scratch, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil))}
}

// testLog fails its test with every line written to it.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Errorf("logged: %s", p)
	return len(p), nil
}

// commitSite creates or opens the table as site s and commits its ranges
// from to to, each adding a file or two to its partition and every third
// removing one of its files, with a deletion time of now, so that the
// checkpoints keep it as a tombstone. Site 0 adds the column "added"
// before its range 6. It returns the version of its last range.
func commitSite(ctx context.Context, store fleet.Store, opts fleet.Options, s int, from, to int64,
	proto *delta.Protocol, md *delta.Metadata) (int64, error) {
	w, err := fleet.Create(ctx, store, table, proto, md, opts)
	if err != nil {
		return -1, err
	}
	appID := w.AppID("mirror", fmt.Sprintf("local-site-%d", s))
	rng := rand.New(rand.NewPCG(uint64(s), 11))
	v := int64(-1)
	for r := from; r <= to; r++ {
		if s == 0 && r == 6 {
			if _, err := w.CommitSchema(ctx, addColumn("added")); err != nil {
				return -1, err
			}
		}
		var acts []delta.Action
		for i := range 1 + rng.IntN(2) {
			acts = append(acts, &delta.Add{Path: fmt.Sprintf("%spart-%d-%d.parquet", w.SiteDir(), r, i),
				PartitionValues: w.SitePartition(), Size: 100 + r, DataChange: true})
		}
		if r%3 == 0 {
			acts = append(acts, &delta.Remove{Path: fmt.Sprintf("%spart-%d-0.parquet", w.SiteDir(), r-1),
				PartitionValues: w.SitePartition(), DataChange: true, DeletionTimestamp: ptr(time.Now().UnixMilli())})
		}
		for {
			v, err = w.Commit(ctx, fleet.Range{AppID: appID, Version: r, Actions: acts, Operation: "MERGE"})
			if !errors.Is(err, fleet.ErrContention) {
				break
			}
		}
		if err != nil {
			return -1, err
		}
	}
	return v, nil
}

// lastCheckpoint returns the version _last_checkpoint names, -1 when
// there is none.
func lastCheckpoint(ctx context.Context, t *testing.T, store fleet.Store) int64 {
	t.Helper()
	lc, err := fleet.NewLog(store, table).LastCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lc == nil {
		return -1
	}
	return lc.Version
}

// copyLog copies the fleet table's commits from..to, as they are, into the
// log of a new local directory, with the checkpoint of version cp and a
// _last_checkpoint naming it when cp is not negative, and returns the
// directory.
func copyLog(ctx context.Context, t *testing.T, store fleet.Store, from, to, cp int64) string {
	t.Helper()
	dir := t.TempDir()
	logDir := filepath.Join(dir, delta.LogDirName)
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	get := func(name string, limit int64) {
		data, err := store.Get(ctx, table+"/"+delta.LogDirName+"/"+name, limit)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(logDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for v := from; v <= to; v++ {
		get(delta.CommitFileName(v), fleet.MaxCommitBytes)
	}
	if cp >= 0 {
		get(delta.CheckpointFileName(cp), fleet.MaxCheckpointBytes)
		data := fmt.Appendf(nil, `{"version":%d,"size":1}`, cp)
		if err := os.WriteFile(filepath.Join(logDir, delta.LastCheckpointName), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// snapshotAt reads the local table at dir at version v.
func snapshotAt(t *testing.T, dir string, v int64) *delta.Snapshot {
	t.Helper()
	tbl, err := delta.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.SnapshotAt(context.Background(), v)
	if err != nil {
		t.Fatalf("%s at %d: %v", dir, v, err)
	}
	return snap
}

// sameSnapshot fails unless got and want hold the same protocol, schema,
// files, tombstones and txns.
func sameSnapshot(t *testing.T, what string, got, want *delta.Snapshot) {
	t.Helper()
	files := func(s *delta.Snapshot) []string {
		var out []string
		for _, a := range s.Files() {
			out = append(out, fmt.Sprintf("%s %d %s", a.Path, a.Size, *a.PartitionValues[s.Schema().Fields[0].PhysicalName()]))
		}
		return out
	}
	tombstones := func(s *delta.Snapshot) []string {
		var out []string
		for _, r := range s.Tombstones() {
			out = append(out, fmt.Sprintf("%s %d", r.Path, *r.DeletionTimestamp))
		}
		return out
	}
	txns := func(s *delta.Snapshot) []string {
		var out []string
		for _, x := range s.Transactions() {
			out = append(out, fmt.Sprintf("%s@%d", x.AppID, x.Version))
		}
		return out
	}
	switch {
	case got.Version() != want.Version():
		t.Errorf("%s: version %d, want %d", what, got.Version(), want.Version())
	case !reflect.DeepEqual(got.Protocol(), want.Protocol()):
		t.Errorf("%s: protocol %+v, want %+v", what, got.Protocol(), want.Protocol())
	case got.Metadata().ID != want.Metadata().ID || got.Metadata().SchemaString != want.Metadata().SchemaString:
		t.Errorf("%s: metaData %+v, want %+v", what, got.Metadata(), want.Metadata())
	case !slices.Equal(files(got), files(want)):
		t.Errorf("%s: files\n%v\nwant\n%v", what, files(got), files(want))
	case !slices.Equal(tombstones(got), tombstones(want)):
		t.Errorf("%s: tombstones\n%v\nwant\n%v", what, tombstones(got), tombstones(want))
	case !slices.Equal(txns(got), txns(want)):
		t.Errorf("%s: txns %v, want %v", what, txns(got), txns(want))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
