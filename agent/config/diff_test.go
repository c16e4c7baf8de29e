package config

import (
	"slices"
	"testing"
)

// parse parses a valid configuration with extra appended.
func parse(t *testing.T, extra string) *Config {
	t.Helper()
	cfg, err := Parse("lakeside.yaml", []byte(`source:
  dsn: "host=/tmp dbname=shop"
  tables: [public.stock]
state_dir: /var/lib/lakeside
`+extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDiff(t *testing.T) {
	old := parse(t, "log:\n  level: info\nhttp:\n  listen: 0.0.0.0:8080\n  token: token-a-0123456789\n")
	next := parse(t, "log:\n  level: debug\n  format: json\nhttp:\n  listen: 0.0.0.0:8080\n  token: token-b-0123456789\ndelta:\n  flush_interval: 5s\n")
	var got []string
	for _, c := range Diff(old, next) {
		got = append(got, c.Key)
		if c.Live != (c.Key == "log.level" || c.Key == "http.token") {
			t.Errorf("%s: live = %v", c.Key, c.Live)
		}
	}
	want := []string{"delta.flush_interval", "http.token", "log.level", "log.format"}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %v, want %v", got, want)
	}
	if d := Diff(old, old); len(d) != 0 {
		t.Fatalf("Diff of a configuration with itself = %v", d)
	}
}
