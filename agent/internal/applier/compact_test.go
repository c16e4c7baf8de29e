package applier

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// lockedBuffer is a log sink safe for the applier's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// optimizeVersions returns the versions of the table at path whose
// commitInfo says OPTIMIZE.
func optimizeVersions(t *testing.T, path string) []int64 {
	t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for v := int64(1); v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			if ci, ok := a.(*delta.CommitInfo); ok && ci.Operation == delta.OperationOptimize {
				out = append(out, v)
				for _, b := range acts {
					switch b := b.(type) {
					case *delta.Add:
						if b.DataChange {
							t.Errorf("%s version %d: add %s with dataChange true", path, v, b.Path)
						}
					case *delta.Remove:
						if b.DataChange {
							t.Errorf("%s version %d: remove %s with dataChange true", path, v, b.Path)
						}
					case *delta.AddCDC:
						t.Errorf("%s version %d: OPTIMIZE with a cdc action", path, v)
					}
				}
			}
		}
	}
	return out
}

// checkSameRowsAround checks that each version of vs reads the same rows
// as the version before it, and returns how many it compared.
func checkSameRowsAround(t *testing.T, path string, vs []int64) {
	t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	read := func(v int64) []string {
		s, err := tbl.SnapshotAt(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := s.ReadRows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = fmt.Sprint(r)
		}
		return sortedStrings(out)
	}
	for _, v := range vs {
		before, after := read(v-1), read(v)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("%s: version %d (OPTIMIZE) reads %d rows, version %d %d, or other rows", path, v, len(after), v-1, len(before))
		}
	}
}

// sortedStrings sorts s in place and returns it.
func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// checkKeyRanges checks that the mirror's files cover disjoint key
// ranges, each file's within its tags, as the applier's index needs.
func checkKeyRanges(t *testing.T, path string) {
	t.Helper()
	s := latestSnapshot(t, path)
	type rng struct{ min, max []byte }
	var rs []rng
	for _, f := range s.Files() {
		minKey, err1 := hex.DecodeString(f.Tags[tagMinKey])
		maxKey, err2 := hex.DecodeString(f.Tags[tagMaxKey])
		if err1 != nil || err2 != nil || len(minKey) == 0 || bytes.Compare(minKey, maxKey) > 0 {
			t.Errorf("%s: file %s has key range tags %v", path, f.Path, f.Tags)
		}
		rs = append(rs, rng{minKey, maxKey})
	}
	for i := range rs {
		for j := range rs {
			if i != j && bytes.Compare(rs[i].min, rs[j].max) <= 0 && bytes.Compare(rs[j].min, rs[i].max) <= 0 {
				t.Errorf("%s: key ranges of two files overlap", path)
				return
			}
		}
	}
}

// TestCompactionRacesTheApplier runs the applier on a short flush
// interval while transactions of inserts, updates and deletes keep
// arriving and compactions of both tables run back to back on their own
// goroutine, for many rounds: the applier never fails a commit (the
// compactions' commits are made between its flushes and its view of the
// tables follows them), every OPTIMIZE version reads the rows of the
// version before it, the mirrors' files keep disjoint key ranges, and the
// tables end with exactly the live rows and every change once.
func TestCompactionRacesTheApplier(t *testing.T) {
	rels, q, tablesDir := newStress(t, 40)
	rng := q.rng
	models := [2]*stressModel{newStressModel(rels[0], rng, 1), newStressModel(rels[1], rng, 1)}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a := New(Config{TablesDir: tablesDir, FlushInterval: 10 * time.Millisecond, PollInterval: 2 * time.Millisecond,
		TargetFileRows: 400, CheckpointInterval: 7, Logger: log}, q.db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan error, 1)
	go func() { applied <- a.Run(ctx) }()

	stop := make(chan struct{})
	var committed, dropped int
	compacted := make(chan error, 1)
	go func() {
		opts := CompactOptions{TablesDir: tablesDir, TargetFileSize: 4 << 20, TargetFileRows: 400, MinFiles: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		for {
			select {
			case <-stop:
				compacted <- nil
				return
			default:
			}
			rep, err := Compact(ctx, opts, a)
			if err != nil {
				compacted <- err
				return
			}
			for _, tc := range rep.Tables {
				committed += len(tc.Versions)
				dropped += tc.Dropped
			}
		}
	}()
	rounds := 150
	if testing.Short() {
		rounds = 40
	}
	for range rounds {
		q.append(1+rng.IntN(4), func() store.Change {
			m := models[rng.IntN(2)]
			if p := rng.IntN(10); p < 3 {
				return m.changeOld(p < 2)
			}
			return m.insert()
		})
		a.Notify()
		time.Sleep(time.Duration(2+rng.IntN(10)) * time.Millisecond)
	}
	for deadline := time.Now().Add(time.Minute); a.Applied() <= q.lsn; {
		if time.Now().After(deadline) {
			t.Fatalf("applied %s, queued up to %s", a.Applied(), q.lsn+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); s != "" {
		t.Errorf("the applier warned or failed while compactions ran:\n%s", s)
	}
	t.Logf("%d compaction commits, %d bins dropped for a concurrent flush", committed, dropped)
	if committed == 0 {
		t.Fatal("no compaction committed")
	}
	for i, name := range []string{"public.orders", "public.returns"} {
		models[i].check(t, tablesDir, name)
		checkKeyRanges(t, filepath.Join(tablesDir, name))
		for _, table := range []string{name, name + store.ChangelogSuffix} {
			path := filepath.Join(tablesDir, table)
			checkSameRowsAround(t, path, optimizeVersions(t, path))
		}
	}
}
