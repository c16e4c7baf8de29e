package applier

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
)

// TestPendingFoldsLikeAMap feeds random changes to pending sets with memory
// budgets from "everything spilled" to "nothing spilled", and checks that
// each returns, in key order, what folding every key's changes in order of
// arrival gives. The keys come in random order (the runs overlap), in
// ascending or descending order (they do not), and ascending in threes (a
// key's changes may end one run and begin the next).
func TestPendingFoldsLikeAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	value := func() any {
		switch rng.IntN(9) {
		case 0:
			return nil
		case 1:
			return typemap.Unchanged
		case 2:
			return rng.Int64N(1000) - 500
		case 3:
			return fmt.Sprint("s", rng.IntN(100))
		case 4:
			return delta.NewDecimal(rng.Int64N(1e6)-5e5, 2)
		case 5:
			d, _ := delta.ParseDecimal("123456789012345678901234567.5")
			return d
		case 6:
			return delta.TimeFromMicros(rng.Int64N(1e15))
		case 7:
			return []any{int32(rng.IntN(9)), nil}
		}
		return rng.IntN(2) == 0
	}
	orders := []struct {
		name string
		key  func(i int) int64
	}{
		{"random", func(int) int64 { return int64(rng.IntN(400)) }},
		{"ascending", func(i int) int64 { return int64(i) }},
		{"descending", func(i int) int64 { return int64(3000 - i) }},
		{"ascending in threes", func(i int) int64 { return int64(i / 3) }},
	}
	for _, order := range orders {
		for _, multiset := range []bool{false, true} {
			var keys [][]byte
			var entries []*entry
			for i := range 3000 {
				e := &entry{deleted: !multiset && rng.IntN(4) == 0, count: rng.IntN(5) - 2}
				if !e.deleted || rng.IntN(2) == 0 {
					e.row = []any{value(), value(), value()}
				}
				keys = append(keys, typemap.AppendKeyValue(nil, order.key(i)))
				entries = append(entries, e)
			}
			want := map[string]*entry{}
			for i, e := range entries {
				if old := want[string(keys[i])]; old != nil {
					e = combine(old, e, multiset)
				}
				want[string(keys[i])] = e
			}
			wantKeys := slices.Sorted(maps.Keys(want))
			for _, budget := range []struct{ keys, bytes int }{{7, 16 << 10}, {500, math.MaxInt},
				{math.MaxInt, 16 << 10}, {math.MaxInt, math.MaxInt}} {
				t.Run(fmt.Sprintf("%s/multiset=%v/keys=%d/bytes=%d", order.name, multiset, budget.keys, budget.bytes), func(t *testing.T) {
					p := newPending(t.TempDir(), budget.keys, budget.bytes, multiset)
					defer p.close()
					for i, e := range entries {
						if err := p.add(keys[i], e); err != nil {
							t.Fatal(err)
						}
					}
					if budget.keys == math.MaxInt && budget.bytes == math.MaxInt {
						if len(p.runs) != 0 {
							t.Fatalf("%d runs spilled within the budget", len(p.runs))
						}
						for _, k := range wantKeys {
							got, err := p.get([]byte(k))
							if err != nil {
								t.Fatal(err)
							}
							if !sameEntry(got, want[k]) {
								t.Fatalf("get %x: %+v, want %+v", k, got, want[k])
							}
						}
					} else if len(p.runs) < 2 {
						t.Fatalf("%d runs spilled, want several", len(p.runs))
					}
					var got []string
					err := p.iterate(func(k []byte, e *entry) error {
						got = append(got, string(k))
						if !sameEntry(e, want[string(k)]) {
							return fmt.Errorf("key %x: %+v, want %+v", k, e, want[string(k)])
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, wantKeys) {
						t.Fatalf("iterate gave %d keys, want %d in order", len(got), len(wantKeys))
					}
				})
			}
		}
	}
}

// sameEntry compares entries, their values as the codec gives them back.
func sameEntry(a, b *entry) bool {
	if a.deleted != b.deleted || a.count != b.count || len(a.row) != len(b.row) || (a.row == nil) != (b.row == nil) {
		return false
	}
	for i := range a.row {
		x, y := a.row[i], b.row[i]
		switch xv := x.(type) {
		case delta.Decimal:
			yv, ok := y.(delta.Decimal)
			if !ok || xv.Scale != yv.Scale || xv.Unscaled.Cmp(yv.Unscaled) != 0 {
				return false
			}
		case time.Time:
			yv, ok := y.(time.Time)
			if !ok || !xv.Equal(yv) {
				return false
			}
		default:
			if !reflect.DeepEqual(x, y) {
				return false
			}
		}
	}
	return true
}

// TestPendingKeepsItsGreatestKeyAcrossSpills: the mirror's appender starts
// only above every key of the flush's changes, spilled ones included (an
// earlier delete of a key the appender then writes would otherwise be
// folded over the appended row).
func TestPendingKeepsItsGreatestKeyAcrossSpills(t *testing.T) {
	p := newPending(t.TempDir(), 2, 1<<20, false)
	defer p.close()
	for _, k := range []string{"m", "z", "a", "b", "c"} {
		if err := p.add([]byte(k), &entry{deleted: true}); err != nil {
			t.Fatal(err)
		}
	}
	if len(p.runs) == 0 {
		t.Fatal("nothing spilled: the test needs the greatest key in a run")
	}
	if string(p.maxKey) != "z" {
		t.Fatalf("greatest key %q after spills, want %q", p.maxKey, "z")
	}
}

// TestPendingFailsOnAValueItCannotSpill adds a row holding a value of a Go
// type the spill codec has no encoding for: add returns an error wrapping
// typemap.ErrSpillType, which fails the table's flush (addChange), where
// the codec once panicked and stopped the agent.
func TestPendingFailsOnAValueItCannotSpill(t *testing.T) {
	p := newPending(t.TempDir(), 100, 1<<20, false)
	defer p.close()
	err := p.add([]byte("k"), &entry{row: []any{int64(1), uint64(2)}})
	if !errors.Is(err, typemap.ErrSpillType) || !strings.HasPrefix(err.Error(), "pending changes: spill: column 1: ") {
		t.Fatalf("add = %v, want a pending changes error wrapping typemap.ErrSpillType", err)
	}
}
