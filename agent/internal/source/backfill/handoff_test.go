package backfill

import "testing"

// TestSnapshotVisibility checks which transactions a snapshot sees, across
// the wraparound of 32-bit xids.
func TestSnapshotVisibility(t *testing.T) {
	snap, err := ParseSnapshot("1000:1010:1002,1005")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint32]bool{999: true, 1000: true, 1001: true, 1002: false, 1005: false, 1009: true, 1010: false, 5000: false} {
		if got := snap.Visible(xid); got != want {
			t.Errorf("xid %d: visible %v, want %v", xid, got, want)
		}
	}
	// Past a wraparound, xids are read near xmax: 2^32+5 is xid 5.
	wrapped, err := ParseSnapshot("4294967290:4294967301:")
	if err != nil {
		t.Fatal(err)
	}
	for xid, want := range map[uint32]bool{4294967289: true, 4294967295: true, 4: true, 5: false} {
		if got := wrapped.Visible(xid); got != want {
			t.Errorf("wrapped xid %d: visible %v, want %v", xid, got, want)
		}
	}
	if !wrapped.SeesAllUpTo(4294967289) || wrapped.SeesAllUpTo(3) {
		t.Error("SeesAllUpTo reads xids across the wraparound wrongly")
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:2:x"} {
		if _, err := ParseSnapshot(bad); err == nil {
			t.Errorf("ParseSnapshot(%q) succeeded", bad)
		}
	}
}
