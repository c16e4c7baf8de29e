package applier

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/tuning"
	"github.com/lakeside/lakeside/store"
)

// TestSnapshotRowsAreUpserts applies copied rows (store.OpSnapshot) after
// changes of the same keys, with and without the adder goroutine: the
// changelog says "snapshot", the keyed mirror replaces the row of a key it
// holds and inserts the others, and a multiset mirror gets one more copy.
func TestSnapshotRowsAreUpserts(t *testing.T) {
	for _, noAdder := range []bool{false, true} {
		t.Run(fmt.Sprintf("noAdder=%v", noAdder), func(t *testing.T) {
			orders := ordersRelation()
			bag := &store.Relation{Key: store.RelationKey{OID: 20000, LSN: 0x100}, Schema: "public", Name: "bag",
				ReplicaIdentity: 'f', Columns: []store.Column{
					{Name: "v", TypeOID: pgtype.Int8OID, TypeMod: -1, Key: true},
				}}
			at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			bagRow := []store.Value{{Kind: store.KindInt64, Int: 7}}
			changed := ordersValues(2)
			changed[5] = store.Value{Kind: store.KindInt32, Int: 999}
			txns := []*store.Txn{
				{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: at}, Changes: []store.Change{
					{Op: store.OpInsert, Relation: orders.Key, New: ordersValues(1)},
					{Op: store.OpInsert, Relation: orders.Key, New: ordersValues(2)},
					{Op: store.OpInsert, Relation: bag.Key, New: bagRow},
				}},
				{TxnHeader: store.TxnHeader{Xid: 2, CommitLSN: 0x2000, EndLSN: 0x2001, CommitTime: at}, Changes: []store.Change{
					{Op: store.OpSnapshot, Relation: orders.Key, New: changed},
					{Op: store.OpSnapshot, Relation: orders.Key, New: ordersValues(3)},
					{Op: store.OpSnapshot, Relation: bag.Key, New: bagRow},
				}},
			}
			db, dir := openQueued(t, orders, txns...)
			if err := db.Update(func(w *store.Writer) error { return w.PutRelation(bag) }); err != nil {
				t.Fatal(err)
			}
			tablesDir := filepath.Join(dir, "tables")
			a := New(Config{TablesDir: tablesDir, Off: tuning.Off{Adder: noAdder}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, db)
			ctx := context.Background()
			if err := a.start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.applyAll(ctx); err != nil {
				t.Fatal(err)
			}
			read := func(table string, cols ...string) []string {
				tb, err := delta.Open(ctx, filepath.Join(tablesDir, table))
				if err != nil {
					t.Fatal(err)
				}
				snap, err := tb.Snapshot(ctx)
				if err != nil {
					t.Fatal(err)
				}
				rows, err := snap.ReadRows(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, r := range rows {
					var s string
					for _, c := range cols {
						_, i := snap.Schema().Field(c)
						s += fmt.Sprint(r[i]) + " "
					}
					out = append(out, s)
				}
				slices.Sort(out)
				return out
			}
			if got, want := read("public.orders_changes", colOp, "id"), []string{"insert 1 ", "insert 2 ", "snapshot 2 ", "snapshot 3 "}; !slices.Equal(got, want) {
				t.Errorf("orders changelog holds %q, want %q", got, want)
			}
			if got, want := read("public.orders", "id", "qty"), []string{"1 1 ", "2 999 ", "3 3 "}; !slices.Equal(got, want) {
				t.Errorf("orders mirror holds %q, want %q", got, want)
			}
			if got, want := read("public.bag_changes", colOp, "v"), []string{"insert 7 ", "snapshot 7 "}; !slices.Equal(got, want) {
				t.Errorf("bag changelog holds %q, want %q", got, want)
			}
			if got, want := read("public.bag", "v"), []string{"7 ", "7 "}; !slices.Equal(got, want) {
				t.Errorf("multiset mirror holds %q, want two copies", got)
			}
		})
	}
}
