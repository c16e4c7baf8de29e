package applier

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// countWarner counts the warnings of a conversion.
type countWarner struct{ n int }

func (w *countWarner) Warn(string, string) { w.n++ }

// TestChangesConvertedOnceForBothTables applies inserts, updates with an
// unchanged TOAST value (one of them changing the key), deletes and a value
// that does not fit its column, and checks what the changelog and the
// mirror got from the one conversion of each change: the same values, each
// table's own treatment of unchanged values, and one warning per value.
func TestChangesConvertedOnceForBothTables(t *testing.T) {
	for _, flushChanges := range []int{1, 0} {
		t.Run(fmt.Sprintf("flush_changes=%d", flushChanges), func(t *testing.T) {
			rel := ordersRelation()
			at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			insert := func(id int64) store.Change {
				return store.Change{Op: store.OpInsert, Relation: rel.Key, New: ordersValues(id)}
			}
			keyOnly := func(id int64) []store.Value {
				v := make([]store.Value, len(rel.Columns))
				v[0] = store.Value{Kind: store.KindInt64, Int: id}
				return v
			}
			// update gives row id the values of row from, with its label
			// unchanged (not sent).
			update := func(id, from int64) store.Change {
				v := ordersValues(from)
				v[1] = store.Value{Kind: store.KindUnchanged}
				return store.Change{Op: store.OpUpdate, Relation: rel.Key, New: v, Old: keyOnly(id), OldIsKey: true}
			}
			nan := insert(6)
			nan.New[2] = store.Value{Kind: store.KindNumeric, Bytes: []byte("NaN")}
			txns := []*store.Txn{
				{TxnHeader: store.TxnHeader{Xid: 1, CommitLSN: 0x1000, EndLSN: 0x1001, CommitTime: at},
					Changes: []store.Change{insert(1), insert(2), insert(3), insert(4), insert(5), nan}},
				{TxnHeader: store.TxnHeader{Xid: 2, CommitLSN: 0x2000, EndLSN: 0x2001, CommitTime: at.Add(time.Second)},
					Changes: []store.Change{update(2, 22), {Op: store.OpDelete, Relation: rel.Key, Old: keyOnly(3), OldIsKey: true}, update(4, 40)}},
			}
			db, dir := openQueued(t, rel, txns...)
			var logged strings.Builder
			a := New(Config{TablesDir: filepath.Join(dir, "tables"), FlushChanges: flushChanges,
				Logger: slog.New(slog.NewTextHandler(&logged, nil))}, db)
			if err := a.start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := a.applyAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logged.String(), `does not fit decimal(12,2); written as null" count=1`) {
				t.Errorf("want one warning for the NaN amount, log:\n%s", logged.String())
			}

			// expected returns the converted values of row g with id id.
			expected := func(id, g int64) []string {
				out := make([]string, len(rel.Columns))
				for i, f := range benchOrdersFields() {
					out[i] = canon(typemap.ConverterFor(f.Type, "", &countWarner{})(&ordersValues(g)[i]), f.Type)
				}
				out[0] = fmt.Sprint(id)
				return out
			}
			changes := readTable(t, filepath.Join(dir, "tables", "public.orders_changes"), "_lsn", "_seq")
			nanRow := expected(6, 6)
			nanRow[2] = "NULL"
			nullsBut := func(id int64) []string {
				return []string{fmt.Sprint(id), "NULL", "NULL", "NULL", "NULL", "NULL"}
			}
			upd := func(id, from int64) []string {
				out := expected(id, from)
				out[1] = "NULL"
				return out
			}
			want := [][]string{
				append(expected(1, 1), "insert", "NULL", "NULL"),
				append(expected(2, 2), "insert", "NULL", "NULL"),
				append(expected(3, 3), "insert", "NULL", "NULL"),
				append(expected(4, 4), "insert", "NULL", "NULL"),
				append(expected(5, 5), "insert", "NULL", "NULL"),
				append(nanRow, "insert", "NULL", "NULL"),
				append(upd(22, 22), "update", strings.Join(nullsBut(2), "|"), "label"),
				append(nullsBut(3), "delete", strings.Join(nullsBut(3), "|"), "NULL"),
				append(upd(40, 40), "update", strings.Join(nullsBut(4), "|"), "label"),
			}
			// The update of row 2 gives it id 22: a key change, like the
			// update of row 4 to 40.
			checkRows(t, "changelog", changes, []string{"id", "label", "amount", "placed_at", "paid", "qty", "_op", "_before", "_unchanged"}, want)

			mirrorRows := readTable(t, filepath.Join(dir, "tables", "public.orders"), "id")
			withLabel := func(id, from, label int64) []string {
				out := expected(id, from)
				out[1] = expected(label, label)[1]
				return out
			}
			checkRows(t, "mirror", mirrorRows, []string{"id", "label", "amount", "placed_at", "paid", "qty"}, [][]string{
				expected(1, 1), expected(5, 5), nanRow, withLabel(22, 22, 2), withLabel(40, 40, 4),
			})
		})
	}
}

// benchOrdersFields returns the Delta fields of ordersRelation's columns.
func benchOrdersFields() []*delta.StructField {
	c := newColumns(typemap.New(), slog.Default(), &countWarner{})
	c.evolve(ordersRelation())
	return c.fields()
}

// tableRow is a row read back from a Delta table, with its schema.
type tableRow struct {
	schema *delta.StructType
	row    delta.Row
}

// readTable reads the latest snapshot of the table at path, sorted by the
// given long columns.
func readTable(t *testing.T, path string, sortBy ...string) []tableRow {
	t.Helper()
	s := latestSnapshot(t, path)
	rows, err := s.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]tableRow, len(rows))
	for i, r := range rows {
		out[i] = tableRow{schema: s.Schema(), row: r}
	}
	slices.SortFunc(out, func(a, b tableRow) int {
		for _, c := range sortBy {
			if d := cmp.Compare(a.get(c).(int64), b.get(c).(int64)); d != 0 {
				return d
			}
		}
		return 0
	})
	return out
}

func (r tableRow) get(col string) any {
	_, i := r.schema.Field(col)
	return r.row[i]
}

// checkRows compares the canonical values of the given columns of rows.
func checkRows(t *testing.T, what string, rows []tableRow, cols []string, want [][]string) {
	t.Helper()
	var got [][]string
	for _, r := range rows {
		vals := make([]string, len(cols))
		for i, c := range cols {
			f, _ := r.schema.Field(c)
			vals[i] = canon(r.get(c), f.Type)
			if st, ok := r.get(c).(delta.Row); ok {
				parts := make([]string, len(st))
				for j, v := range st {
					parts[j] = canon(v, f.Type.(*delta.StructType).Fields[j].Type)
				}
				vals[i] = strings.Join(parts, "|")
			}
		}
		got = append(got, vals)
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}

// latestSnapshot returns the latest snapshot of the table at path.
func latestSnapshot(t *testing.T, path string) *delta.Snapshot {
	t.Helper()
	ctx := context.Background()
	tb, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tb.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
