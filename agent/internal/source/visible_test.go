package source

import (
	"slices"
	"testing"

	"github.com/lakeside/lakeside/store"
)

func TestVisibleIn(t *testing.T) {
	for _, c := range []struct {
		snapshot string
		xid      uint32
		want     bool
	}{
		{"100:105:", 99, true},
		{"100:105:", 104, true},
		{"100:105:", 105, false},
		{"100:105:", 200, false},
		{"100:105:100,103", 103, false},
		{"100:105:100,103", 101, true},
		// Across an epoch: xmax is 2^32+5.
		{"4294967290:4294967301:4294967295", 4294967295, false},
		{"4294967290:4294967301:4294967295", 4294967294, true},
		{"4294967290:4294967301:4294967295", 3, true},
		{"4294967290:4294967301:4294967295", 5, false},
	} {
		got, err := visibleIn(c.snapshot, c.xid)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("visibleIn(%q, %d) = %v, want %v", c.snapshot, c.xid, got, c.want)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:"} {
		if _, err := visibleIn(bad, 1); err == nil {
			t.Errorf("visibleIn(%q) gave no error", bad)
		}
	}
}

func TestColumnFactsApply(t *testing.T) {
	// The catalog: id (1), a dropped column (2), v (3), note (4).
	facts := columnFacts{byName: map[string]int{"id": 0, "v": 1, "note": 2}, natts: 4,
		cols: []catalogColumn{{attnum: 1}, {attnum: 3}, {attnum: 4}}}
	for _, c := range []struct {
		name       string
		cols       []string
		inProgress bool
		want       []int
	}{
		{"the catalog's columns", []string{"id", "v", "note"}, false, []int{1, 3, 4}},
		{"renamed since, as many columns", []string{"id", "v", "label"}, false, []int{1, 3, 4}},
		{"a column the catalog does not show, committed", []string{"id", "v", "note", "c5"}, false, []int{1, 3, 4, 0}},
		{"columns added by a transaction in progress", []string{"id", "v", "note", "c5", "c6"}, true, []int{1, 3, 4, 5, 6}},
		{"as many columns in progress: by position (a rename, or a drop and an add, look the same)", []string{"id", "v", "c5"}, true, []int{1, 3, 4}},
		{"a catalog column left over after the last found", []string{"id", "c5", "c6", "c7"}, true, []int{1, 0, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cols := make([]store.Column, len(c.cols))
			for i, n := range c.cols {
				cols[i].Name = n
			}
			facts.apply(cols, c.inProgress)
			got := make([]int, len(cols))
			for i := range cols {
				got[i] = cols[i].AttNum
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("attnums = %v, want %v", got, c.want)
			}
		})
	}
}
