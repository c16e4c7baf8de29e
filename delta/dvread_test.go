package delta

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// dvPartitionedRows returns the rows of golden/dv-partitioned-with-checkpoint
// at version v: x in 0..49 as (x % 10, x, "foo" + x % 5), but for the even x
// below 2v, which versions 1..v deleted one by one.
func dvPartitionedRows(v int) []Row {
	var out []Row
	for x := range 50 {
		if x%2 == 0 && x < 2*v {
			continue
		}
		out = append(out, Row{int32(x % 10), int32(x), fmt.Sprintf("foo%d", x%5)})
	}
	return out
}

// TestConformanceDeletionVectors reads the reference tables with deletion
// vectors at every version and checks the rows against those the upstream
// tests expect, by version and by timestamp (time travel), through a
// checkpoint holding deletion vectors in adds and tombstones, and without
// it.
func TestConformanceDeletionVectors(t *testing.T) {
	ctx := context.Background()
	ts := time.Date(2023, 5, 31, 18, 58, 33, 633_000_000, time.UTC)
	rands := []float64{0.7918174793484931, 0.9281049271981882, 0.27796520310701633, 0.15263801464228832,
		0.1981143710215575, 0.3069439236599195, 0.5175919190815845}
	var shortDV []Row
	for i, r := range rands {
		id := int64(i + 3)
		shortDV = append(shortDV, Row{id, strconv.FormatInt(id, 10), ts, r})
	}
	small := func(from, to int32) []Row {
		var out []Row
		for v := from; v <= to; v++ {
			out = append(out, Row{v})
		}
		return out
	}
	cases := map[string][][]Row{
		"kernel/table-with-dv-small": {small(0, 9), small(1, 8)},
		"kernel/with-short-dv":       {shortDV},
	}
	for v := range 16 {
		cases["golden/dv-partitioned-with-checkpoint"] = append(cases["golden/dv-partitioned-with-checkpoint"], dvPartitionedRows(v))
	}
	for name, versions := range cases {
		tbl, err := Open(ctx, requireRef(t, name))
		if err != nil {
			t.Fatal(err)
		}
		latest, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if latest.Version() != int64(len(versions)-1) {
			t.Errorf("%s: latest version %d", name, latest.Version())
		}
		if p := latest.Protocol(); p.MinReaderVersion != 3 || p.ReaderFeatures[0] != DeletionVectorsFeature {
			t.Errorf("%s: protocol %+v", name, p)
		}
		for v, want := range versions {
			s, err := tbl.SnapshotAt(ctx, int64(v))
			if err != nil {
				t.Fatalf("%s v%d: %v", name, v, err)
			}
			got, err := s.ReadRows(ctx)
			if err != nil {
				t.Fatalf("%s v%d: %v", name, v, err)
			}
			rowstest.AssertSameRows(t, fmt.Sprintf("%s v%d", name, v), got, want)
			at, err := tbl.CommitTimestamp(ctx, int64(v))
			if err != nil {
				t.Fatal(err)
			}
			byTime, err := tbl.SnapshotAsOf(ctx, at)
			if err != nil {
				t.Fatalf("%s as of v%d: %v", name, v, err)
			}
			got, err = byTime.ReadRows(ctx)
			if err != nil {
				t.Fatalf("%s as of v%d: %v", name, v, err)
			}
			rowstest.AssertSameRows(t, fmt.Sprintf("%s as of v%d", name, v), got, want)
		}
	}
}

// TestDeletionVectorCheckpoints checks the checkpoint of
// dv-partitioned-with-checkpoint against a replay of its JSON commits
// alone, and a checkpoint this package writes of its latest version: the
// same logical files, deletion vectors, tombstones and rows.
func TestDeletionVectorCheckpoints(t *testing.T) {
	ctx := context.Background()
	src := requireRef(t, "golden/dv-partitioned-with-checkpoint")
	s10, err := New(src).SnapshotAt(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	withDV := 0
	for _, r := range s10.Tombstones() {
		if r.DeletionVector != nil {
			withDV++
		}
	}
	if withDV == 0 {
		t.Error("the checkpoint's tombstones carry no deletion vector")
	}

	plain := t.TempDir()
	copyTree(t, src, plain)
	os.Remove(filepath.Join(plain, LogDirName, CheckpointFileName(10)))
	os.Remove(filepath.Join(plain, LogDirName, LastCheckpointName))
	ours := t.TempDir()
	copyTree(t, src, ours)
	// At the time of the last commit, so that no tombstone has expired.
	last, err := New(src).CommitTimestamp(ctx, 15)
	if err != nil {
		t.Fatal(err)
	}
	if err := New(ours, WithClock(func() time.Time { return last })).Checkpoint(ctx, 15); err != nil {
		t.Fatal(err)
	}
	want, err := New(src).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"json replay": plain, "our checkpoint": ours} {
		got, err := New(dir).Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a, b := logicalFiles(got), logicalFiles(want); a != b {
			t.Errorf("%s: files\n%s\nwant\n%s", name, a, b)
		}
		if a, b := tombstoneKeys(got), tombstoneKeys(want); a != b {
			t.Errorf("%s: tombstones\n%s\nwant\n%s", name, a, b)
		}
		rows, err := got.ReadRows(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rowstest.AssertSameRows(t, name, rows, dvPartitionedRows(15))
	}
}

// logicalFiles lists a snapshot's files with their deletion vectors.
func logicalFiles(s *Snapshot) string {
	var b strings.Builder
	for _, a := range s.Files() {
		var n int64
		if a.DeletionVector != nil {
			n = a.DeletionVector.Cardinality
		}
		fmt.Fprintf(&b, "%s %s %d\n", a.Path, a.DeletionVector.UniqueID(), n)
	}
	return b.String()
}

// tombstoneKeys lists a snapshot's tombstones by logical file.
func tombstoneKeys(s *Snapshot) string {
	var b strings.Builder
	for _, r := range s.Tombstones() {
		fmt.Fprintf(&b, "%s %s\n", r.Path, r.DeletionVector.UniqueID())
	}
	return b.String()
}

// TestDeletionVectorFileDamaged reads table-with-dv-small with its deletion
// vector file gone, then damaged: the read fails naming the file, and
// never returns the rows the deletion vector deletes.
func TestDeletionVectorFileDamaged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, requireRef(t, "kernel/table-with-dv-small"), dir)
	dvFile := filepath.Join(dir, "deletion_vector_61d16c75-6994-46b7-a15b-8b538852e50e.bin")
	good, err := os.ReadFile(dvFile)
	if err != nil {
		t.Fatal(err)
	}
	read := func() error {
		s, err := New(dir).Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.ReadRows(ctx)
		return err
	}
	os.Remove(dvFile)
	if err := read(); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), dvFile) {
		t.Errorf("missing deletion vector file: %v", err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)-6]++ // a byte of the bitmap: the checksum no longer matches
	if err := os.WriteFile(dvFile, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := read(); !errors.Is(err, ErrCorruptDeletionVector) || !strings.Contains(err.Error(), dvFile) {
		t.Errorf("damaged deletion vector file: %v", err)
	}
	// Version 0 has no deletion vector: it reads whatever the file holds.
	s0, err := New(dir).SnapshotAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rows, err := s0.ReadRows(ctx); err != nil || len(rows) != 10 {
		t.Errorf("v0: %d rows, %v", len(rows), err)
	}
}

// dvFiles returns the names of the deletion vector files in dir.
func dvFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "deletion_vector_*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m
}

// TestVacuumKeepsDeletionVectorFiles vacuums a copy of
// dv-partitioned-with-checkpoint: inside the retention every deletion
// vector file stays and every version reads; past it, only the files of
// the latest version's deletion vectors stay, the others go as removed
// data files do, and the latest version still reads.
func TestVacuumKeepsDeletionVectorFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, requireRef(t, "golden/dv-partitioned-with-checkpoint"), dir)
	tbl := New(dir)
	last, err := tbl.CommitTimestamp(ctx, 15)
	if err != nil {
		t.Fatal(err)
	}
	all := dvFiles(t, dir)
	// The copies are new: make them as old as the table.
	for _, name := range all {
		if err := os.Chtimes(filepath.Join(dir, name), last, last); err != nil {
			t.Fatal(err)
		}
	}
	res, err := tbl.Vacuum(ctx, VacuumOptions{Now: last.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) != 0 || len(dvFiles(t, dir)) != len(all) {
		t.Fatalf("inside the retention: deleted %v", res.Files)
	}
	for v := range 16 {
		s, err := tbl.SnapshotAt(ctx, int64(v))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadRows(ctx); err != nil {
			t.Errorf("v%d after vacuum: %v", v, err)
		}
	}

	res, err = tbl.Vacuum(ctx, VacuumOptions{Now: last.Add(30 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	latest, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, a := range latest.Files() {
		if a.DeletionVector != nil {
			p, err := a.DeletionVector.FilePath(dir)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, filepath.Base(p))
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if got := dvFiles(t, dir); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("deletion vector files left %v, want those of the latest version %v", got, want)
	}
	deleted := 0
	for _, f := range res.Files {
		if strings.HasPrefix(f.Path, "deletion_vector_") {
			deleted++
		}
	}
	if deleted != len(all)-len(want) {
		t.Errorf("vacuum reports %d deletion vector files deleted, want %d", deleted, len(all)-len(want))
	}
	rows, err := latest.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "latest after vacuum", rows, dvPartitionedRows(15))
	// A version with a deletion vector the latest does not have no longer
	// reads.
	gone := 0
	for v := range 15 {
		s, err := tbl.SnapshotAt(ctx, int64(v))
		if err != nil {
			t.Fatal(err)
		}
		missing := false
		for _, a := range s.Files() {
			if a.DeletionVector != nil {
				p, _ := a.DeletionVector.FilePath(dir)
				missing = missing || !slices.Contains(want, filepath.Base(p))
			}
		}
		if !missing {
			continue
		}
		gone++
		if _, err := s.ReadRows(ctx); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("v%d after its deletion vector went: %v, want a missing file", v, err)
		}
	}
	if gone == 0 {
		t.Error("no version lost a deletion vector file")
	}
}
