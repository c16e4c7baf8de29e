package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// fakeClock returns a clock that advances one second per call.
func fakeClock(start time.Time) func() time.Time {
	var mu sync.Mutex
	now := start
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

func TestTableRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := fakeClock(time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC))
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("name", TypeString, true),
		NewField("day", TypeDate, true),
	)
	tbl, err := Create(ctx, dir, schema, []string{"day"}, nil,
		&CommitInfo{Operation: "CREATE TABLE", EngineInfo: "lakeside/test"}, WithClock(clock), WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(ctx, dir, schema, nil, nil, nil); !errors.Is(err, ErrVersionExists) {
		t.Fatalf("second create: %v, want ErrVersionExists", err)
	}
	day1, day2 := DateFromDays(19800), DateFromDays(19801)
	var want [][]Row // rows expected at each version
	want = append(want, nil)
	var times []time.Time
	snap0, _ := tbl.SnapshotAt(ctx, 0)
	times = append(times, snap0.Timestamp())

	commit := func(readVersion int64, acts ...Action) int64 {
		t.Helper()
		v, err := tbl.Commit(ctx, readVersion, acts)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := tbl.CommitTimestamp(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, ts)
		return v
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// v1: append two files in two partitions, with a txn.
	r1 := []Row{{int64(1), "a", day1}, {int64(2), "b", day1}}
	r2 := []Row{{int64(3), nil, day2}}
	a1, err := snap.WriteFile(ctx, map[string]any{"day": day1}, r1, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := snap.WriteFile(ctx, map[string]any{"day": day2}, r2, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(0, &CommitInfo{Operation: "WRITE", EngineInfo: "lakeside/test", Extra: map[string]any{"lsnStart": "0/1", "lsnEnd": "0/2"}},
		a1, a2, &Txn{AppID: "slot/table", Version: 100})
	want = append(want, append(append([]Row{}, r1...), r2...))

	// v2: remove the first file, add a replacement; txn moves on.
	r3 := []Row{{int64(1), "a2", day1}}
	a3, err := snap.WriteFile(ctx, map[string]any{"day": day1}, r3, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(1, &CommitInfo{Operation: "MERGE"}, RemoveOf(a1, clock().UnixMilli(), true), a3, &Txn{AppID: "slot/table", Version: 200})
	want = append(want, append(append([]Row{}, r2...), r3...))

	// v3: add a column.
	schema2 := NewStructType(append(append([]*StructField{}, schema.Fields...), NewField("extra", TypeDouble, true))...)
	snap2, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md := *snap2.Metadata()
	md.SchemaString, _ = schema2.SchemaString()
	commit(2, &CommitInfo{Operation: "ADD COLUMNS"}, &md)
	var w3 []Row
	for _, r := range want[2] {
		w3 = append(w3, append(append(Row{}, r...), nil))
	}
	want = append(want, w3)

	// v4: append with the new column.
	snap3, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r4 := []Row{{int64(4), "d", day2, 1.5}}
	a4, err := snap3.WriteFile(ctx, map[string]any{"day": day2}, r4, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(3, &CommitInfo{Operation: "WRITE"}, a4)
	want = append(want, append(append([]Row{}, w3...), r4...))

	for v := int64(0); v < int64(len(want)); v++ {
		s, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatalf("snapshot %d: %v", v, err)
		}
		rows, err := s.ReadRows(ctx)
		if err != nil {
			t.Fatalf("read %d: %v", v, err)
		}
		rowstest.AssertSameRows(t, "version", rows, want[v])
		byTS, err := tbl.SnapshotAsOf(ctx, times[v])
		if err != nil || byTS.Version() != v {
			t.Fatalf("as of %s: %v, %v; want version %d", times[v], byTS, err, v)
		}
		between, err := tbl.SnapshotAsOf(ctx, times[v].Add(500*time.Millisecond))
		if err != nil || between.Version() != v {
			t.Fatalf("as of just after v%d: %v", v, err)
		}
	}
	if _, err := tbl.SnapshotAsOf(ctx, times[0].Add(-time.Second)); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("as of before v0: %v", err)
	}
	if _, err := tbl.SnapshotAt(ctx, 99); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("snapshot 99: %v", err)
	}
	s1, _ := tbl.SnapshotAt(ctx, 1)
	if v, ok := s1.AppTransactionVersion("slot/table"); !ok || v != 100 {
		t.Errorf("txn at v1 = %d %v", v, ok)
	}
	latest, _ := tbl.Snapshot(ctx)
	if v, ok := latest.AppTransactionVersion("slot/table"); !ok || v != 200 {
		t.Errorf("txn at latest = %d %v", v, ok)
	}
	if _, ok := latest.AppTransactionVersion("other"); ok {
		t.Error("unknown app has a txn")
	}
	if ci := s1.CommitInfo(); ci == nil || ci.Extra["lsnEnd"] != "0/2" || ci.EngineInfo != "lakeside/test" {
		t.Errorf("commitInfo v1 = %+v", ci)
	}
	if n := len(latest.Tombstones()); n != 1 {
		t.Errorf("%d tombstones", n)
	}
	if latest.Protocol().MinReaderVersion != 1 || latest.Protocol().MinWriterVersion != 2 {
		t.Errorf("protocol %+v", latest.Protocol())
	}
	// A commit on a stale version conflicts; a commit beyond the end is refused.
	if _, err := tbl.Commit(ctx, 2, []Action{&CommitInfo{}}); !errors.Is(err, ErrVersionExists) {
		t.Errorf("stale commit: %v", err)
	}
	if _, err := tbl.Commit(ctx, 10, []Action{&CommitInfo{}}); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("commit past the end: %v", err)
	}
	// No temporary files remain in the log.
	entries, _ := os.ReadDir(tbl.LogPath())
	for _, e := range entries {
		if e.Name()[0] == '.' {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func writeSimpleCommits(t *testing.T, tbl *Table, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		snap, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		add, err := snap.WriteFile(ctx, nil, []Row{{int64(i), "row"}}, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		acts := []Action{&CommitInfo{Operation: "WRITE"}, add, &Txn{AppID: "app", Version: int64(i)}}
		if i%3 == 2 {
			files := snap.Files()
			acts = append(acts, RemoveOf(files[0], time.Now().UnixMilli(), true))
		}
		if _, err := tbl.Commit(ctx, snap.Version(), acts); err != nil {
			t.Fatal(err)
		}
	}
}

func snapshotSignature(t *testing.T, s *Snapshot) []string {
	t.Helper()
	rows, err := s.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sig := rowstest.CanonRows(rows)
	for _, f := range s.Files() {
		sig = append(sig, "file:"+f.Path+":"+f.Stats)
	}
	for _, r := range s.Tombstones() {
		sig = append(sig, "tomb:"+r.Path)
	}
	for _, x := range s.Transactions() {
		sig = append(sig, "txn:"+x.AppID+":"+rowstest.Canon(x.Version))
	}
	sig = append(sig, "schema:"+s.Metadata().SchemaString, "id:"+s.Metadata().ID)
	return sig
}

func TestCheckpointEquivalence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, true), NewField("s", TypeString, true))
	tbl, err := Create(ctx, dir, schema, nil, map[string]string{"x": "y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeSimpleCommits(t, tbl, 13)
	cp := filepath.Join(tbl.LogPath(), CheckpointFileName(10))
	if _, err := os.Stat(cp); err != nil {
		t.Fatalf("no checkpoint at 10: %v", err)
	}
	lc, err := readLastCheckpoint(tbl.LogPath())
	if err != nil || lc == nil || lc.Version != 10 || lc.Size == 0 {
		t.Fatalf("_last_checkpoint = %+v, %v", lc, err)
	}
	withCP, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The same table without checkpoint files must give the same snapshot.
	plain := t.TempDir()
	copyTree(t, dir, plain)
	os.Remove(filepath.Join(plain, LogDirName, CheckpointFileName(10)))
	os.Remove(filepath.Join(plain, LogDirName, LastCheckpointName))
	full, err := New(plain).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := snapshotSignature(t, withCP), snapshotSignature(t, full)
	if len(a) != len(b) {
		t.Fatalf("checkpoint replay differs: %d vs %d entries", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("checkpoint replay differs at %d:\n%s\n%s", i, a[i], b[i])
		}
	}
	// Reading from the checkpoint alone works when earlier commits are gone.
	for v := 0; v < 10; v++ {
		os.Remove(filepath.Join(dir, LogDirName, CommitFileName(int64(v))))
	}
	s10, err := tbl.SnapshotAt(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s10.AppTransactionVersion("app"); !ok || v != 9 {
		t.Errorf("txn from checkpoint = %d %v", v, ok)
	}
	if _, err := tbl.SnapshotAt(ctx, 5); !errors.Is(err, ErrVersionNotFound) {
		t.Errorf("snapshot before checkpoint with commits gone: %v", err)
	}
	// A corrupt _last_checkpoint or checkpoint does not break reading.
	if err := os.WriteFile(filepath.Join(dir, LogDirName, LastCheckpointName), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Snapshot(ctx); err != nil {
		t.Errorf("corrupt _last_checkpoint: %v", err)
	}
	if err := os.WriteFile(filepath.Join(plain, LogDirName, LastCheckpointName), []byte(`{"version":12,"size":3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(plain).Snapshot(ctx); err != nil {
		t.Errorf("_last_checkpoint naming a missing checkpoint: %v", err)
	}
	if err := os.WriteFile(filepath.Join(plain, LogDirName, CheckpointFileName(10)), []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := New(plain).Snapshot(ctx); err != nil || s.NumFiles() != withCP.NumFiles() {
		t.Errorf("corrupt checkpoint with full log: %v", err)
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentCommit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, true))
	tbl, err := Create(ctx, dir, schema, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		v, _ := tbl.LatestVersion(ctx)
		const n = 4
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, errs[i] = New(dir).Commit(ctx, v, []Action{&CommitInfo{Operation: "WRITE"}, &Txn{AppID: "w", Version: int64(i)}})
			}(i)
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, ErrVersionExists):
				t.Fatalf("unexpected error: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d winners", round, wins)
		}
	}
}

func TestTxnRetention(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, true))
	now := time.Date(2025, 1, 10, 0, 0, 0, 0, time.UTC)
	tbl, err := Create(ctx, dir, schema, nil, map[string]string{"delta.setTransactionRetentionDuration": "interval 1 days"}, nil,
		WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	old, recent := now.Add(-48*time.Hour).UnixMilli(), now.Add(-time.Hour).UnixMilli()
	if _, err := tbl.Commit(ctx, 0, []Action{&Txn{AppID: "old", Version: 1, LastUpdated: &old},
		&Txn{AppID: "recent", Version: 2, LastUpdated: &recent}, &Txn{AppID: "never", Version: 3}}); err != nil {
		t.Fatal(err)
	}
	s, _ := tbl.Snapshot(ctx)
	if _, ok := s.AppTransactionVersion("old"); ok {
		t.Error("expired txn visible")
	}
	if v, ok := s.AppTransactionVersion("recent"); !ok || v != 2 {
		t.Error("recent txn missing")
	}
	if v, ok := s.AppTransactionVersion("never"); !ok || v != 3 {
		t.Error("txn without lastUpdated missing")
	}
}

// TestTableDirs lists the table directories of a root: those holding a
// Delta log, sorted, not a hidden one, a plain directory or a file.
func TestTableDirs(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"s.b/" + LogDirName, "s.a/" + LogDirName, ".hidden/" + LogDirName, "plain"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := TableDirs(root)
	if err != nil || len(got) != 2 || got[0] != "s.a" || got[1] != "s.b" {
		t.Fatalf("TableDirs = %v, %v; want [s.a s.b]", got, err)
	}
	if got, err := TableDirs(filepath.Join(root, "missing")); err != nil || got != nil {
		t.Fatalf("TableDirs of a missing root = %v, %v; want none", got, err)
	}
}
