package delta

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// archivedExcept returns a PruneOptions.Archived that calls every data
// file the fixture committed archived except those given (files not yet
// uploaded); orphans were never archived.
func (f *vacuumFixture) archivedExcept(not ...string) func(context.Context, string) (bool, error) {
	return func(_ context.Context, p string) (bool, error) {
		return slices.Contains([]string{f.a, f.b, f.c, f.d}, p) && !slices.Contains(not, p), nil
	}
}

// TestPruneKeepsTheLatestVersionAndWhatIsNotArchived prunes a table whose
// writer reads its latest version back: the files of the versions inside
// the retention stay, a file removed before it goes once archived, a file
// not archived stays whatever its age, and the log still names the pruned
// file, whose version then fails to read with fs.ErrNotExist.
func TestPruneKeepsTheLatestVersionAndWhatIsNotArchived(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	res, err := f.tbl.Prune(ctx, PruneOptions{Now: f.day(13), Retention: 2 * 24 * time.Hour,
		KeepLatest: true, Archived: f.archivedExcept(f.b)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), []string{f.a}; !slices.Equal(got, want) {
		t.Fatalf("pruned %v, want %v", got, want)
	}
	if res.KeptFrom != 4 || res.Version != 4 {
		t.Errorf("kept from %d at version %d, want 4 at 4", res.KeptFrom, res.Version)
	}
	for _, p := range append([]string{f.b, f.c, f.d, f.oldOrphan, f.newOrphan}, f.hidden...) {
		if !f.exists(p) {
			t.Errorf("%s pruned", p)
		}
	}
	readable(t, f.tbl, 4, 4)
	old, err := f.tbl.SnapshotAt(ctx, 2)
	if err != nil {
		t.Fatalf("the log no longer reaches version 2: %v", err)
	}
	if _, err := old.ReadRows(ctx); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read of pruned version 2: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Join(f.tbl.LogPath(), CommitFileName(1))); err != nil {
		t.Errorf("log touched: %v", err)
	}

	// Once archived, B goes too.
	res, err = f.tbl.Prune(ctx, PruneOptions{Now: f.day(13), Retention: 2 * 24 * time.Hour,
		KeepLatest: true, Archived: f.archivedExcept()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), []string{f.b}; !slices.Equal(got, want) {
		t.Fatalf("pruned %v once B is archived, want %v", got, want)
	}
}

// TestPruneKeepsTheVersionsInsideTheRetention: v3 was current at the start
// of the window, so its file B stays while A, which only versions before it
// read, goes.
func TestPruneKeepsTheVersionsInsideTheRetention(t *testing.T) {
	f := newVacuumFixture(t)
	res, err := f.tbl.Prune(context.Background(), PruneOptions{Now: f.day(9), Retention: 2 * 24 * time.Hour,
		KeepLatest: true, Archived: f.archivedExcept()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), []string{f.a}; !slices.Equal(got, want) {
		t.Fatalf("pruned %v, want %v", got, want)
	}
	readable(t, f.tbl, 3, 4)
}

// TestPruneAppendOnly prunes without KeepLatest: every archived file written
// before the retention goes, those of the latest version too.
func TestPruneAppendOnly(t *testing.T) {
	f := newVacuumFixture(t)
	res, err := f.tbl.Prune(context.Background(), PruneOptions{Now: f.day(13), Retention: 2 * 24 * time.Hour,
		Archived: f.archivedExcept(f.b)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := paths(res), sorted(f.a, f.c, f.d); !slices.Equal(got, want) {
		t.Fatalf("pruned %v, want %v", got, want)
	}
	if !f.exists(f.b) {
		t.Error("B, not archived, pruned")
	}
	if res.KeptFrom != 5 {
		t.Errorf("kept from %d, want 5 (no version is sure to read)", res.KeptFrom)
	}
}

// TestPruneDryRunAndRefusals: a dry run deletes nothing, and Prune needs a
// retention and an archive.
func TestPruneDryRunAndRefusals(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	res, err := f.tbl.Prune(ctx, PruneOptions{Now: f.day(11), Retention: time.Hour, Archived: f.archivedExcept(), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 4 || !res.DryRun {
		t.Fatalf("dry run listed %v", paths(res))
	}
	for _, p := range []string{f.a, f.b, f.c, f.d} {
		if !f.exists(p) {
			t.Errorf("dry run deleted %s", p)
		}
	}
	if _, err := f.tbl.Prune(ctx, PruneOptions{Archived: f.archivedExcept()}); err == nil {
		t.Error("prune without a retention succeeded")
	}
	if _, err := f.tbl.Prune(ctx, PruneOptions{Retention: time.Hour}); err == nil {
		t.Error("prune without an archive succeeded")
	}
}

// TestFormatInterval checks that a formatted interval parses back, in the
// largest whole unit.
func TestFormatInterval(t *testing.T) {
	for d, want := range map[time.Duration]string{
		7 * 24 * time.Hour:      "interval 7 days",
		30 * time.Hour:          "interval 30 hours",
		90 * time.Second:        "interval 90 seconds",
		1500 * time.Millisecond: "interval 1500 milliseconds",
		0:                       "interval 0 days",
	} {
		got := FormatInterval(d)
		if got != want {
			t.Errorf("FormatInterval(%s) = %q, want %q", d, got, want)
		}
		if back, err := parseInterval(got); err != nil || back != d {
			t.Errorf("%q parses as %s, %v; want %s", got, back, err, d)
		}
	}
}

// TestVacuumListsAbsentFiles: a file pruned before is listed, marked
// Absent, once no version inside the retention needs it and its time is
// before the cutoff; one a kept version reads, or too recent, is not.
func TestVacuumListsAbsentFiles(t *testing.T) {
	ctx := context.Background()
	f := newVacuumFixture(t)
	if _, err := f.tbl.Prune(ctx, PruneOptions{Now: f.day(13), Retention: 2 * 24 * time.Hour,
		KeepLatest: true, Archived: f.archivedExcept()}); err != nil {
		t.Fatal(err)
	}
	absent := func(context.Context) ([]VacuumFile, error) {
		return []VacuumFile{{Path: f.a, Size: 1, ModTime: f.day(2)}, {Path: f.b, Size: 2, ModTime: f.day(16)},
			{Path: f.c, Size: 3, ModTime: f.day(2)}}, nil
	}
	res, err := f.tbl.Vacuum(ctx, VacuumOptions{Now: f.day(17), Retention: 7 * 24 * time.Hour, Absent: absent})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, vf := range res.Files {
		if vf.Absent {
			got = append(got, vf.Path)
		}
	}
	if want := []string{f.a}; !slices.Equal(got, want) {
		t.Errorf("absent files listed %v, want %v", got, want)
	}
	readable(t, f.tbl, 4, 4)
}
