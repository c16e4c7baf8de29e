package applier

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestStressCrashesWhileAppending appends transactions of mixed sizes to
// two tables while appliers crash at random points, read ahead and flush
// in small full batches, and checks that the mirrors end with every row
// and the changelogs with every change once.
func TestStressCrashesWhileAppending(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ctx := context.Background()
	rels := []*store.Relation{ordersRelation(), returnsRelation()}
	db, dir := openRelations(t, rels...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var lsn store.LSN = 0x1000
	want := [2]int64{}
	appendTxns := func(n int) {
		err := db.Update(func(w *store.Writer) error {
			for range n {
				lsn += 0x100
				txn := &store.Txn{TxnHeader: store.TxnHeader{Xid: uint32(lsn), CommitLSN: lsn, EndLSN: lsn + 1, CommitTime: at.Add(time.Duration(lsn))}}
				size := 1 + rng.IntN(10)
				if rng.IntN(20) == 0 {
					size = 3000
				}
				for range size {
					ti := rng.IntN(2)
					want[ti]++
					txn.Changes = append(txn.Changes, store.Change{Op: store.OpInsert, Relation: rels[ti].Key, New: ordersValues(want[ti])})
				}
				if err := w.AppendTxn(txn, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	tablesDir := filepath.Join(dir, "tables")
	points := []string{"data-written", "before-commit", "after-commit", "before-checkpoint", "before-applied"}
	for round := 0; round < 25; round++ {
		appendTxns(20 + rng.IntN(200))
		a := New(Config{TablesDir: tablesDir, FlushChanges: 500 + rng.IntN(3000), TargetFileRows: 700, MergeMemoryKeys: 300,
			CheckpointInterval: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
		if err := a.start(ctx); err != nil {
			t.Fatal(err)
		}
		crashAt := rng.IntN(12)
		calls := 0
		a.failpoint = func(point, table string) error {
			for _, p := range points {
				if p == point {
					calls++
					if calls == crashAt {
						return errCrash
					}
				}
			}
			return nil
		}
		// Read ahead what is queued, then apply all of it.
		if upTo, _, _, err := a.nextBatch(); err == nil && upTo != 0 && rng.IntN(2) == 0 {
			a.readAhead(ctx, upTo)
			appendTxns(rng.IntN(20))
		}
		if err := a.applyAll(ctx); err != nil && !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
	}
	a := New(Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"public.orders", "public.returns"} {
		rows := readTable(t, filepath.Join(tablesDir, name), "id")
		if int64(len(rows)) != want[i] {
			t.Errorf("mirror %s holds %d rows, want %d", name, len(rows), want[i])
		}
		for j, r := range rows {
			if r.get("id") != int64(j+1) {
				t.Errorf("mirror %s row %d has id %v", name, j, r.get("id"))
				break
			}
		}
		if n := len(readTable(t, filepath.Join(tablesDir, name+"_changes"), "_lsn", "_seq")); int64(n) != want[i] {
			t.Errorf("changelog %s holds %d changes, want %d", name, n, want[i])
		}
	}
}
