package applier

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// deleteWithDV deletes the rows of ids from the mirror at path as another
// writer would, with a deletion vector on the file that holds them (the
// mirror has one file, whose rows are in id order from 1): it enables
// deletion vectors and commits the file's add with the vector.
func deleteWithDV(t *testing.T, path string, ids ...int64) {
	t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files := snap.Files()
	if len(files) != 1 {
		t.Fatalf("mirror has %d files, want 1", len(files))
	}
	proto, md, err := delta.EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	dv := delta.NewDeletionVector()
	for _, id := range ids {
		dv.Add(uint64(id - 1))
	}
	descs, err := delta.StoreDeletionVectors(path, []*delta.DeletionVector{dv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rm, add, err := delta.DeletionVectorActions(files[0], descs[0], time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	actions := []delta.Action{&delta.CommitInfo{Operation: "DELETE"}, proto, md, rm, add}
	if _, err := tbl.Commit(ctx, snap.Version(), actions); err != nil {
		t.Fatal(err)
	}
}

// TestMergeHonoursDeletionVectors checks that a merge that rewrites a
// mirror file with a deletion vector keeps the rows the vector deletes
// deleted, and that a file's rows are checked against its stats less
// those rows.
func TestMergeHonoursDeletionVectors(t *testing.T) {
	ctx := context.Background()
	txns := readAheadQueue()
	db, dir := openQueued(t, ordersRelation(), txns[0])
	tablesDir := filepath.Join(dir, "tables")
	cfg := Config{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	a := New(cfg, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	deleteWithDV(t, filepath.Join(tablesDir, "public.orders"), 10, 20)
	if err := db.Update(func(w *store.Writer) error { return w.AppendTxn(txns[1], 0) }); err != nil {
		t.Fatal(err)
	}
	a = New(cfg, db)
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range readTable(t, filepath.Join(tablesDir, "public.orders"), "id") {
		ids = append(ids, r.get("id").(int64))
	}
	var want []int64
	for id := int64(1); id <= 51; id++ {
		if id != 3 && id != 10 && id != 20 {
			want = append(want, id)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("mirror ids %v, want %v", ids, want)
	}
}
