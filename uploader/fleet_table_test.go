package uploader_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
	"github.com/lakeside/lakeside/uploader/s3"
)

// TestFleetTablesFromSites has three sites change local tables of one
// name (appends, deletion vectors, whole files removed, compactions, and at
// one site a column added) and publish them into one fleet table at once,
// now and then, on a directory and on S3. The fleet table then reads, per
// site partition, exactly the rows of that site's local table, the column
// only one site has reads as null at the others, and the table,
// checkpointed every 5 versions, passes deltatest.Check.
func TestFleetTablesFromSites(t *testing.T) {
	for _, backend := range []string{"file", "s3"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var client uploader.ReplicaClient
			var download func(t *testing.T) string
			switch backend {
			case "file":
				root := t.TempDir()
				c, err := file.New(root)
				if err != nil {
					t.Fatal(err)
				}
				client, download = c, func(*testing.T) string { return filepath.Join(root, "public.items") }
			case "s3":
				srv := s3test.Start(t)
				bucket := srv.NewBucket()
				c, err := s3.New(s3.Config{Endpoint: srv.Endpoint(), Region: s3test.Region, AccessKeyID: s3test.AccessKey,
					SecretAccessKey: s3test.SecretKey, Bucket: bucket, Prefix: "fleet",
					Retry: s3.RetryPolicy{MaxRetries: 2, MinWait: 10e6, MaxWait: 50e6}})
				if err != nil {
					t.Fatal(err)
				}
				client = c
				download = func(t *testing.T) string {
					dir := t.TempDir()
					if err := srv.Download(ctx, bucket, "fleet/", dir); err != nil {
						t.Fatal(err)
					}
					return filepath.Join(dir, "public.items")
				}
			}
			const sites = 3
			locals := make([]*siteTable, sites)
			errs := make([]error, sites)
			var wg sync.WaitGroup
			for s := range sites {
				locals[s] = newSiteTable(t, s)
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[s] = locals[s].run(ctx, client, 24)
				}()
			}
			wg.Wait()
			for s, err := range errs {
				if err != nil {
					t.Fatalf("site %d: %v", s, err)
				}
			}
			tbl, err := delta.Open(ctx, download(t))
			if err != nil {
				t.Fatal(err)
			}
			snap, err := tbl.Snapshot(ctx)
			if err != nil {
				t.Fatalf("the fleet table does not read: %v", err)
			}
			rows, err := snap.ReadRows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st := snap.Schema()
			if st.Fields[0].Name != fleet.SiteColumn {
				t.Fatalf("fleet schema %s does not start with %s", st, fleet.SiteColumn)
			}
			_, idCol := st.Field("id")
			_, vCol := st.Field("v")
			_, extraCol := st.Field("extra")
			if extraCol < 0 {
				t.Fatalf("the column site 2 added is not in the fleet: %s", st)
			}
			got := make([][]string, sites)
			for _, r := range rows {
				var s int
				fmt.Sscanf(r[0].(string), "site-%d", &s)
				extra := "null"
				if r[extraCol] != nil {
					extra = fmt.Sprint(r[extraCol])
					if s != 2 {
						t.Errorf("site %d reads %s in the column only site 2 has", s, extra)
					}
				}
				got[s] = append(got[s], fmt.Sprintf("%v/%v/%s", r[idCol], r[vCol], extra))
			}
			for s, l := range locals {
				want := l.rows(t)
				sort.Strings(got[s])
				if !slices.Equal(got[s], want) {
					t.Errorf("site %d: the fleet holds %d rows, the site %d; first %v, want %v", s, len(got[s]), len(want), head(got[s]), head(want))
				}
			}
			t.Logf("fleet version %d, %d files, %d rows", snap.Version(), snap.NumFiles(), len(rows))
			if err := deltatest.Check(ctx, download(t)); err != nil {
				t.Errorf("the fleet table: %v", err)
			}
			if lc, err := fleet.NewLog(uploader.FleetStore(client), "public.items").LastCheckpoint(ctx); err != nil || lc == nil || lc.Version < 5 {
				t.Errorf("no checkpoint of the fleet table: %v, %v", lc, err)
			}
			if backend == "file" {
				// Every object under the fleet was counted as put (some
				// twice: _last_checkpoint is overwritten).
				var stored, counted int64
				filepath.WalkDir(filepath.Dir(download(t)), func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && filepath.Base(p) != uploader.LayoutMarker {
						info, _ := d.Info()
						stored += info.Size()
					}
					return err
				})
				for _, l := range locals {
					counted += l.uploaded
				}
				if counted < stored || stored == 0 {
					t.Errorf("the sites counted %d bytes put, the fleet holds %d", counted, stored)
				}
			}
		})
	}
}

func head(s []string) []string { return s[:min(3, len(s))] }

// siteTable is a site's local table, changed by hand with the delta API as
// the applier would: appends, deletion vectors, removes, compactions.
type siteTable struct {
	site  int
	root  string
	tbl   *delta.Table
	rng   *rand.Rand
	next  int64
	extra bool
	// uploaded counts what the site's FleetTable says it put.
	uploaded int64
}

func newSiteTable(t *testing.T, s int) *siteTable {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "public.items")
	// Physical names of the table's own, as the applier gives them.
	st, maxID, err := delta.AssignColumnIDs(delta.NewStructType(delta.NewField("id", delta.TypeLong, true), delta.NewField("v", delta.TypeString, true)), 0)
	if err != nil {
		t.Fatal(err)
	}
	md, err := delta.NewMetadata(st, nil, map[string]string{delta.ColumnMappingModeKey: delta.ColumnMappingName,
		delta.ColumnMappingMaxIDKey: fmt.Sprint(maxID)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	proto, err := delta.ColumnMappingProtocol(delta.DefaultProtocol())
	if err != nil {
		t.Fatal(err)
	}
	proto, md, err = delta.EnableDeletionVectors(proto, md)
	if err != nil {
		t.Fatal(err)
	}
	tbl := delta.New(root, delta.WithCheckpointInterval(5))
	if _, err := tbl.Commit(ctx, -1, []delta.Action{proto, md, &delta.CommitInfo{Operation: "CREATE TABLE"}}); err != nil {
		t.Fatal(err)
	}
	return &siteTable{site: s, root: root, tbl: tbl, rng: rand.New(rand.NewPCG(uint64(s), 3)), next: int64(s) * 1_000_000}
}

// run changes the table rounds times and publishes it every few rounds.
func (l *siteTable) run(ctx context.Context, client uploader.ReplicaClient, rounds int) error {
	site := fmt.Sprintf("site-%d", l.site)
	ft := uploader.NewFleetTable(client, l.root, "mirror", filepath.Join(filepath.Dir(l.root), ".fleet"),
		fleet.Options{Site: site, RunID: "run-" + site, MaxAttempts: 50, CheckpointInterval: 5})
	ft.Uploaded = func(n int64) { l.uploaded += n }
	for r := range rounds {
		if err := l.change(ctx, r); err != nil {
			return err
		}
		if r%3 == 2 || r == rounds-1 {
			held, err := ft.Sync(ctx)
			if err != nil {
				return err
			}
			if v, _ := l.tbl.LatestVersion(ctx); held != v {
				return fmt.Errorf("sync reached local version %d of %d", held, v)
			}
		}
	}
	return nil
}

// change makes one local commit: an append mostly; else rows deleted with
// a deletion vector, a file removed, two files compacted, or (site 2,
// round 10) a column added.
func (l *siteTable) change(ctx context.Context, round int) error {
	snap, err := l.tbl.Snapshot(ctx)
	if err != nil {
		return err
	}
	files := snap.Files()
	now := time.Now().UnixMilli()
	var acts []delta.Action
	op := "WRITE"
	switch p := l.rng.IntN(10); {
	case l.site == 2 && round == 10:
		st := delta.NewStructType(append(slices.Clone(snap.Schema().Fields), delta.NewField("extra", delta.TypeLong, true))...)
		st, _, err := delta.AssignColumnIDs(st, snap.Metadata().MaxColumnID())
		if err != nil {
			return err
		}
		md, err := snap.Metadata().WithSchema(st)
		if err != nil {
			return err
		}
		acts, op, l.extra = []delta.Action{md}, "ADD COLUMNS", true
	case p < 2 && len(files) > 0:
		f := files[l.rng.IntN(len(files))]
		old := delta.NewDeletionVector()
		if f.DeletionVector != nil {
			if old, err = delta.ReadDeletionVector(l.root, f.DeletionVector); err != nil {
				return err
			}
		}
		st, _ := delta.ParseStats(f.Stats)
		dv := old.Clone()
		dv.Add(uint64(l.rng.Int64N(st.NumRecords)))
		ds, err := delta.WriteDeletionVectorFile(l.root, []*delta.DeletionVector{dv})
		if err != nil {
			return err
		}
		rm, add, err := delta.DeletionVectorActions(f, ds[0], now)
		if err != nil {
			return err
		}
		acts, op = []delta.Action{rm}, "DELETE"
		if add != nil {
			acts = append(acts, add)
		}
	case p < 3 && len(files) > 0:
		acts, op = []delta.Action{delta.RemoveOf(files[l.rng.IntN(len(files))], now, true)}, "DELETE"
	case p < 4 && len(files) > 1:
		// Compact two files into one: no data changes.
		var rows []delta.Row
		for _, f := range files[:2] {
			rs, err := delta.ReadDataFile(ctx, l.root, f, snap.Schema())
			if err != nil {
				return err
			}
			rows = append(rows, rs...)
			acts = append(acts, delta.RemoveOf(f, now, false))
		}
		add, err := snap.WriteFile(ctx, nil, rows, delta.WriteOptions{})
		if err != nil {
			return err
		}
		add.DataChange = false
		acts, op = append(acts, add), "OPTIMIZE"
	default:
		var rows []delta.Row
		for range 1 + l.rng.IntN(20) {
			row := delta.Row{l.next, fmt.Sprintf("v%d", l.next)}
			if l.extra {
				row = append(row, l.next*10)
			}
			rows, l.next = append(rows, row), l.next+1
		}
		add, err := snap.WriteFile(ctx, nil, rows, delta.WriteOptions{})
		if err != nil {
			return err
		}
		acts = []delta.Action{add}
	}
	_, err = l.tbl.Commit(ctx, snap.Version(), append(acts, &delta.CommitInfo{Operation: op}))
	return err
}

// rows returns the table's rows as "id/v/extra", sorted.
func (l *siteTable) rows(t *testing.T) []string {
	snap, err := l.tbl.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		extra := "null"
		if len(r) > 2 && r[2] != nil {
			extra = fmt.Sprint(r[2])
		}
		out = append(out, fmt.Sprintf("%v/%v/%s", r[0], r[1], extra))
	}
	sort.Strings(out)
	return out
}

// TestFleetFilesGoUpAsTheyAre publishes two sites' tables into one fleet:
// the site that created the fleet table names its columns as the fleet
// does, so its files go up byte for byte; the other site's files differ
// only in their footers.
func TestFleetFilesGoUpAsTheyAre(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	client, err := file.New(root)
	if err != nil {
		t.Fatal(err)
	}
	for s := range 2 {
		l := newSiteTable(t, s)
		snap, err := l.tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		add, err := snap.WriteFile(ctx, nil, []delta.Row{{int64(s), "x"}}, delta.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.tbl.Commit(ctx, snap.Version(), []delta.Action{add}); err != nil {
			t.Fatal(err)
		}
		site := fmt.Sprintf("site-%d", s)
		ft := uploader.NewFleetTable(client, l.root, "mirror", t.TempDir(), fleet.Options{Site: site, RunID: "run"})
		if _, err := ft.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		local, err := os.ReadFile(filepath.Join(l.root, add.Path))
		if err != nil {
			t.Fatal(err)
		}
		remote, err := os.ReadFile(filepath.Join(root, "public.items", "site="+site, add.Path))
		if err != nil {
			t.Fatal(err)
		}
		footer := int(binary.LittleEndian.Uint32(local[len(local)-8:])) + 8
		switch {
		case s == 0 && !bytes.Equal(local, remote):
			t.Error("the creating site's file was rewritten")
		case s == 1 && bytes.Equal(local, remote):
			t.Error("the second site's file went up untranslated")
		case s == 1 && !bytes.Equal(local[:len(local)-footer], remote[:len(local)-footer]):
			t.Error("the second site's data pages were not copied as they are")
		}
	}
}

// TestFleetVacuumDeletesTheSitesOldFiles vacuums a site's local table in
// the fleet layout: the fleet copy of a file the site removed goes once
// the fleet holds the removal and the local vacuum deleted the file, the
// files the fleet table still holds stay, and it still reads.
func TestFleetVacuumDeletesTheSitesOldFiles(t *testing.T) {
	ctx := context.Background()
	url := t.TempDir()
	root, err := file.New(url)
	if err != nil {
		t.Fatal(err)
	}
	tables := t.TempDir()
	local := newLocalTable(t, tables, "public.items")
	for range 3 {
		local.commit(5, 10)
	}
	up := newUploader(t, openDB(t, t.TempDir()), &backend{client: root, target: "fleet:file://" + url + "#b1"}, tables,
		func(o *uploader.Options) {
			o.Root, o.Layout = root, uploader.LayoutFleet
			o.Fleet = &uploader.FleetOptions{Site: "b1", RunID: "run", ScratchDir: t.TempDir()}
		})
	if err := up.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := local.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone := snap.Files()[0]
	v, err := local.tbl.Commit(ctx, snap.Version(), []delta.Action{delta.RemoveOf(gone, time.Now().Add(-time.Hour).UnixMilli(), true)})
	if err != nil {
		t.Fatal(err)
	}
	local.version = v
	fleetCopy := filepath.Join(url, "public.items", "site=b1", gone.Path)
	if _, err := os.Stat(fleetCopy); err != nil {
		t.Fatalf("the fleet copy of %s: %v", gone.Path, err)
	}
	// The local vacuum, past the retention, deletes the local file; its
	// fleet copy goes only with the pass that brings the removal there.
	keepFrom, beforeDelete := up.VacuumOptions("public.items")
	if _, err := local.tbl.Vacuum(ctx, delta.VacuumOptions{Retention: time.Minute, Now: time.Now().Add(10 * time.Minute),
		KeepFrom: keepFrom, BeforeDelete: beforeDelete}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tables, "public.items", gone.Path)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the local vacuum kept %s: %v", gone.Path, err)
	}
	if _, err := up.DeleteRemote(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fleetCopy); err != nil {
		t.Fatalf("the fleet copy went before the fleet held the removal: %v", err)
	}
	if err := up.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fleetCopy); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the fleet copy of the vacuumed file is still there: %v", err)
	}
	if err := deltatest.Check(ctx, filepath.Join(url, "public.items")); err != nil {
		t.Errorf("the fleet table after the vacuum: %v", err)
	}
}

// TestFleetRefusesAnotherKey publishes three sites' tables into one fleet
// mirror: the first sets the key (id), the second has the same key under
// its own physical name and joins, the third keys on another column and
// stops with ErrConflict before it commits anything.
func TestFleetRefusesAnotherKey(t *testing.T) {
	ctx := context.Background()
	client, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for s, key := range []string{"id", "id", "v"} {
		l := newSiteTable(t, s)
		snap, err := l.tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := snap.Schema().Field(key)
		md := *snap.Metadata()
		md.Configuration = maps.Clone(md.Configuration)
		md.Configuration["lakeside.key"] = `["` + f.PhysicalName() + `"]`
		if _, err := l.tbl.Commit(ctx, snap.Version(), []delta.Action{&md}); err != nil {
			t.Fatal(err)
		}
		ft := uploader.NewFleetTable(client, l.root, "mirror", t.TempDir(), fleet.Options{Site: fmt.Sprintf("site-%d", s), RunID: "run"})
		_, err = ft.Sync(ctx)
		switch {
		case s < 2 && err != nil:
			t.Fatalf("site %d, key %s: %v", s, key, err)
		case s == 2 && !errors.Is(err, fleet.ErrConflict):
			t.Fatalf("site with another key: %v, want ErrConflict", err)
		}
		if err != nil {
			t.Log(err)
		}
	}
}
