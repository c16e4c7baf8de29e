package pgcluster

import (
	"strings"
	"testing"
)

func TestQuoteDSNValue(t *testing.T) {
	for in, want := range map[string]string{
		"postgres":  "postgres",
		"/tmp/x/s":  "/tmp/x/s",
		"":          "''",
		"my db":     "'my db'",
		`it's`:      `'it\'s'`,
		`back\lash`: `'back\\lash'`,
	} {
		if got := quoteDSNValue(in); got != want {
			t.Errorf("quoteDSNValue(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestQuoteConfValue(t *testing.T) {
	for in, want := range map[string]string{
		"logical":     "'logical'",
		"'127.0.0.1'": "'127.0.0.1'",
		`it's`:        `'it''s'`,
		`a\b`:         `'a\\b'`,
		"'":           `''''`,
	} {
		if got := quoteConfValue(in); got != want {
			t.Errorf("quoteConfValue(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRenderConf(t *testing.T) {
	got := string(renderConf([]byte("# initdb\n"), map[string]string{"b": "2", "a": "1"}))
	want := "# initdb\n\n# Added by lakeside pgcluster.\na = '1'\nb = '2'\n"
	if got != want {
		t.Errorf("renderConf = %q, want %q", got, want)
	}
}

func TestIsPortClash(t *testing.T) {
	log := `LOG:  could not bind IPv4 address "127.0.0.1": Address already in use
HINT:  Is another postmaster already running on port 5432? If not, wait a few seconds and retry.
WARNING:  could not create listen socket for "127.0.0.1"
FATAL:  could not create any TCP/IP sockets`
	if !isPortClash(log) {
		t.Error("port clash not detected")
	}
	if isPortClash(`FATAL:  invalid value for parameter "shared_buffers": "lots"`) {
		t.Error("invalid setting taken for a port clash")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		sign int
	}{
		{"15", "9.6", 1},
		{"9.6", "15", -1},
		{"16", "16", 0},
		{"10", "9", 1},
		{"15", "15.1", -1},
	} {
		got := compareVersions(tc.a, tc.b)
		if (got > 0) != (tc.sign > 0) || (got < 0) != (tc.sign < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.sign)
		}
	}
}

func TestTailLines(t *testing.T) {
	if got := tailLines("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("tailLines = %q", got)
	}
	if got := tailLines("", 3); got != "" {
		t.Errorf("tailLines of empty = %q", got)
	}
	if got := tailLines(strings.Repeat("x\n", 3), 10); got != "x\nx\nx" {
		t.Errorf("tailLines short = %q", got)
	}
}
