package source

import "testing"

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
