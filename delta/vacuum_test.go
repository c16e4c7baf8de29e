package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// vacuumFixture is a table whose commits and files carry chosen times:
//
//	v0 day 0   create
//	v1 day 0   add A
//	v2 day 1   add B
//	v3 day 2   remove A, add C
//	v4 day 10  remove B, add D
//
// plus an orphan data file from day 1 and one from day 16 (crashed writes),
// and hidden files from day 0.
type vacuumFixture struct {
	tbl        *Table
	day0       time.Time
	a, b, c, d string // relative paths of the data files
	oldOrphan  string
	newOrphan  string
	hidden     []string
}

func (f *vacuumFixture) day(n float64) time.Time {
	return f.day0.Add(time.Duration(n * float64(24*time.Hour)))
}

func newVacuumFixture(t *testing.T) *vacuumFixture {
	t.Helper()
	ctx := context.Background()
	f := &vacuumFixture{day0: time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)}
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("_part", TypeString, true))
	// The table's clock (checkpoints expire tombstones by it) follows the
	// commits.
	clock := f.day0
	tbl, err := Create(ctx, dir, schema, []string{"_part"}, nil,
		&CommitInfo{Operation: "CREATE TABLE", Timestamp: f.day0.UnixMilli()}, WithCheckpointInterval(2),
		WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	f.tbl = tbl
	write := func(id int64, at time.Time) *Add {
		t.Helper()
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		add, err := snap.WriteFile(ctx, map[string]any{"_part": "p"}, []Row{{id, "p"}}, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.touch(t, add.Path, at)
		return add
	}
	commit := func(at time.Time, acts ...Action) {
		t.Helper()
		v, err := tbl.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acts = append(acts, &CommitInfo{Operation: "WRITE", Timestamp: at.UnixMilli()})
		clock = at
		if _, err := tbl.Commit(ctx, v, acts); err != nil {
			t.Fatal(err)
		}
	}
	addA := write(1, f.day(0))
	commit(f.day(0), addA)
	addB := write(2, f.day(1))
	commit(f.day(1), addB)
	addC := write(3, f.day(2))
	commit(f.day(2), RemoveOf(addA, f.day(2).UnixMilli(), true), addC)
	addD := write(4, f.day(10))
	commit(f.day(10), RemoveOf(addB, f.day(10).UnixMilli(), true), addD)
	f.a, f.b, f.c, f.d = addA.Path, addB.Path, addC.Path, addD.Path

	f.oldOrphan = "_part=p/part-orphan-old.parquet"
	f.newOrphan = "part-orphan-new.parquet"
	f.hidden = []string{"_part=p/.part-x.parquet.crc", "_SUCCESS", "_tmp/part-y.parquet"}
	for _, p := range append([]string{f.oldOrphan, f.newOrphan}, f.hidden...) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		f.touch(t, p, f.day(0))
	}
	f.touch(t, f.oldOrphan, f.day(1))
	f.touch(t, f.newOrphan, f.day(16))
	return f
}

func (f *vacuumFixture) touch(t *testing.T, rel string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(f.tbl.Path(), filepath.FromSlash(rel)), at, at); err != nil {
		t.Fatal(err)
	}
}

func (f *vacuumFixture) exists(rel string) bool {
	_, err := os.Stat(filepath.Join(f.tbl.Path(), filepath.FromSlash(rel)))
	return err == nil
}

func paths(r *VacuumResult) []string {
	var out []string
	for _, f := range r.Files {
		out = append(out, f.Path)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// readable checks that every version from..to still reads.
func readable(t *testing.T, tbl *Table, from, to int64) {
	t.Helper()
	for v := from; v <= to; v++ {
		s, err := tbl.SnapshotAt(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadRows(context.Background()); err != nil {
			t.Errorf("version %d no longer reads after vacuum: %v", v, err)
		}
	}
}

// TestVacuumRetentionBoundary checks the edge of the retention window: one
// millisecond before v4 (the commit that removed B) falls out of the window,
// v3 is still reachable and keeps B; at the boundary B goes.
func TestVacuumRetentionBoundary(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	retention := 7 * 24 * time.Hour

	res, err := f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(17).Add(-time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), sorted(f.a, f.oldOrphan); !slices.Equal(got, want) {
		t.Fatalf("just inside the window: deleted %v, want %v", got, want)
	}
	if res.KeptFrom != 3 || res.Version != 4 {
		t.Errorf("kept from %d at version %d, want 3 at 4", res.KeptFrom, res.Version)
	}
	if !f.exists(f.b) {
		t.Fatal("B deleted while version 3, which reads it, is inside the retention window")
	}
	readable(t, f.tbl, 3, 4)

	res, err = f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(17), Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), []string{f.b}; !slices.Equal(got, want) {
		t.Fatalf("at the boundary: deleted %v, want %v", got, want)
	}
	if res.Bytes != res.Files[0].Size || res.Bytes <= 0 {
		t.Errorf("bytes %d, want the size of B", res.Bytes)
	}
	readable(t, f.tbl, 4, 4)
	for _, p := range []string{f.c, f.d, f.newOrphan} {
		if !f.exists(p) {
			t.Errorf("%s deleted", p)
		}
	}
	for _, p := range f.hidden {
		if !f.exists(p) {
			t.Errorf("hidden file %s deleted", p)
		}
	}
	if _, err := os.Stat(filepath.Join(f.tbl.LogPath(), CommitFileName(0))); err != nil {
		t.Errorf("log touched: %v", err)
	}
}

// TestVacuumOrphans checks that a file no version references goes only once
// it is older than the retention, and that a longer retention keeps
// everything time travel can still reach.
func TestVacuumOrphans(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	res, err := f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(17), Retention: 30 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 0 {
		t.Fatalf("30-day retention deleted %v", paths(res))
	}
	readable(t, f.tbl, 0, 4)

	// One hour of retention at day 16.5: only versions from v4 on are
	// kept; the day-16 orphan is still younger than the window.
	res, err = f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(16.5), Retention: 12 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), sorted(f.a, f.b, f.oldOrphan); !slices.Equal(got, want) {
		t.Fatalf("deleted %v, want %v", got, want)
	}
	if !f.exists(f.newOrphan) {
		t.Error("an orphan younger than the retention was deleted (it may be a write in progress)")
	}
}

// TestVacuumDryRun checks that a dry run reports the same files as the real
// vacuum and deletes none.
func TestVacuumDryRun(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	opts := VacuumOptions{Now: f.day(17), DryRun: true,
		BeforeDelete: func(context.Context, *VacuumResult) error { return errors.New("called in a dry run") }}
	dry, err := f.tbl.Vacuum(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || len(dry.Files) != 3 {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, p := range paths(dry) {
		if !f.exists(p) {
			t.Errorf("dry run deleted %s", p)
		}
	}
	readable(t, f.tbl, 0, 4)
	var planned []string
	opts.DryRun = false
	opts.BeforeDelete = func(_ context.Context, r *VacuumResult) error {
		planned = paths(r)
		return nil
	}
	real, err := f.tbl.Vacuum(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(paths(real), paths(dry)) || !slices.Equal(planned, paths(dry)) {
		t.Errorf("vacuum deleted %v (announced %v), dry run said %v", paths(real), planned, paths(dry))
	}
}

// TestVacuumKeepFrom checks that the files of every version from KeepFrom
// on survive whatever their age (a replica still needs them), and that a
// failing BeforeDelete deletes nothing.
func TestVacuumKeepFrom(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	keep := func(context.Context) (int64, error) { return 2, nil }
	res, err := f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(40), KeepFrom: keep})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), sorted(f.oldOrphan, f.newOrphan); !slices.Equal(got, want) {
		t.Fatalf("deleted %v, want only the orphans %v", got, want)
	}
	if res.KeptFrom != 2 {
		t.Errorf("kept from %d, want 2", res.KeptFrom)
	}
	readable(t, f.tbl, 2, 4)

	boom := errors.New("boom")
	_, err = f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(40),
		BeforeDelete: func(context.Context, *VacuumResult) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if !f.exists(f.a) || !f.exists(f.b) {
		t.Error("files deleted although BeforeDelete failed")
	}
	if _, err := f.tbl.Vacuum(ctx, VacuumOptions{Retention: -time.Hour}); err == nil {
		t.Error("negative retention accepted")
	}
}

// TestVacuumTombstonesMatchReplay checks that the files found through the
// latest snapshot's tombstones (what Vacuum reads when the retention is
// within the table's) are those found by reading every commit of the window,
// at every point in time after the last checkpoint and for every version a
// replica may still need.
func TestVacuumTombstonesMatchReplay(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	l, err := listLog(ctx, f.tbl.logDir)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := f.tbl.loadSnapshot(ctx, l, l.maxVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(latest.tombstones) == 0 {
		t.Fatal("the fixture's latest snapshot has no tombstone")
	}
	for d := 10.0; d <= 25; d += 0.25 {
		cutoff := f.day(d).Add(-DefaultDeletedFileRetention)
		from, err := firstRetainedVersion(l, cutoff)
		if err != nil {
			t.Fatal(err)
		}
		for keep := int64(0); keep <= from; keep++ {
			fast, err1 := f.tbl.referenced(ctx, l, latest, keep, from, cutoff, true)
			full, err2 := f.tbl.referenced(ctx, l, latest, keep, from, cutoff, false)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for p := range full {
				if !fast[p] {
					t.Errorf("day %.2f, keep %d: tombstones miss %s", d, keep, p)
				}
			}
			for p := range fast {
				if !full[p] {
					t.Errorf("day %.2f, keep %d: tombstones keep %s, which no retained version references", d, keep, p)
				}
			}
		}
	}
}

// TestExpireLog checks the log cleanup: commits and checkpoints older than
// the newest checkpoint before the log retention go, every later version
// still reads, a replica's pending versions keep their commits, and a dry run
// deletes nothing.
func TestExpireLog(t *testing.T) {
	ctx := context.Background()
	logFiles := func(vs ...int64) []string {
		var out []string
		for _, v := range vs {
			out = append(out, LogDirName+"/"+CommitFileName(v))
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		day      float64
		keepFrom int64 // -1: none
		dryRun   bool
		want     []string
		kept     int64
	}{
		{"nothing older than the retention", 9.5, -1, false, nil, 0},
		{"checkpoint 2 before the cutoff", 39, -1, false, logFiles(0, 1), 2},
		{"checkpoint 4 at the cutoff", 40, -1, false, append(logFiles(0, 1, 2, 3), LogDirName+"/"+CheckpointFileName(2)), 4},
		{"a replica needs version 1", 40, 1, false, nil, 0},
		{"a replica needs version 3", 40, 3, false, logFiles(0, 1), 2},
		{"dry run", 40, -1, true, append(logFiles(0, 1, 2, 3), LogDirName+"/"+CheckpointFileName(2)), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newVacuumFixture(t)
			opts := VacuumOptions{Now: f.day(tc.day), Retention: 30 * 24 * time.Hour, DryRun: tc.dryRun}
			if tc.keepFrom >= 0 {
				opts.KeepFrom = func(context.Context) (int64, error) { return tc.keepFrom, nil }
			}
			res, err := f.tbl.ExpireLog(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := paths(res), sorted(tc.want...); !slices.Equal(got, want) {
				t.Fatalf("deleted %v, want %v", got, want)
			}
			if len(tc.want) > 0 && res.KeptFrom != tc.kept {
				t.Errorf("kept from %d, want %d", res.KeptFrom, tc.kept)
			}
			first := int64(0)
			if !tc.dryRun {
				first = res.KeptFrom
			}
			readable(t, f.tbl, first, 4)
			if first > 0 {
				if _, err := f.tbl.SnapshotAt(ctx, first-1); !errors.Is(err, ErrVersionNotFound) {
					t.Errorf("version %d after the cleanup: %v, want ErrVersionNotFound", first-1, err)
				}
			}
			if s, err := f.tbl.SnapshotAsOf(ctx, f.day(10)); err != nil || s.Version() != 4 {
				t.Errorf("time travel to day 10: %v", err)
			}
		})
	}
}
