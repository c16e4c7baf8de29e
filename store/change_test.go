package store

import "testing"

// TestParseLSN parses what String writes, and refuses what PostgreSQL
// would not write.
func TestParseLSN(t *testing.T) {
	for _, l := range []LSN{0, 0x16B3748, 0x16_B374D848, 1<<64 - 1} {
		got, err := ParseLSN(l.String())
		if err != nil || got != l {
			t.Errorf("ParseLSN(%q) = %v, %v; want %v", l.String(), got, err, l)
		}
	}
	if got, err := ParseLSN("0/16b3748"); err != nil || got != 0x16B3748 {
		t.Errorf("lower case: %v, %v", got, err)
	}
	for _, bad := range []string{"", "16B3748", "0/", "/1", "1/2/3", "x/1", "100000000/0", "0/100000000", "-1/0", "0/+1"} {
		if got, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q) = %v, want an error", bad, got)
		}
	}
}
