package agent

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/live"
)

func parse(t *testing.T, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("lakeside.yaml", []byte(`source:
  dsn: "host=/tmp dbname=shop"
  tables: [public.stock]
state_dir: /var/lib/lakeside
`+extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestReload(t *testing.T) {
	cfg := parse(t, "http:\n  listen: 0.0.0.0:8080\n  token: token-a-0123456789\nreplica:\n  url: file:///srv/replica\n  site: s\n")
	a := New(cfg, nil, "test")
	a.limiter = newBandwidthLimiter(0)
	a.server = live.NewServer(live.Config{Listen: cfg.HTTP.Listen, Token: cfg.HTTP.Token}, nil, nil, nil, nil)

	next := parse(t, "http:\n  listen: 0.0.0.0:8080\n  token: token-b-0123456789\nreplica:\n  url: file:///srv/replica\n  site: s\n  max_bytes_per_second: 1MiB\n")
	changes, err := a.Reload(next)
	if err != nil || len(changes) != 2 {
		t.Fatalf("Reload = %v, %v", changes, err)
	}
	if a.limiter.Limit() != rate.Limit(1<<20) {
		t.Fatalf("bandwidth limit %v after reload, want 1 MiB/s", a.limiter.Limit())
	}
	// Reloading the same file again changes nothing more.
	if changes, err := a.Reload(next); err != nil || len(changes) != 0 {
		t.Fatalf("second Reload = %v, %v", changes, err)
	}
	// Back to unlimited.
	if _, err := a.Reload(parse(t, "http:\n  listen: 0.0.0.0:8080\n  token: token-b-0123456789\nreplica:\n  url: file:///srv/replica\n  site: s\n")); err != nil {
		t.Fatal(err)
	}
	if a.limiter.Limit() != rate.Inf {
		t.Fatalf("bandwidth limit %v, want unlimited", a.limiter.Limit())
	}
	// A non-loopback server cannot lose its token while running.
	noToken := *next
	noToken.HTTP.Token = ""
	if _, err := a.Reload(&noToken); !errors.Is(err, live.ErrTokenRequired) {
		t.Fatalf("Reload without a token = %v, want ErrTokenRequired", err)
	}
}

// TestReloadTakesOnEveryLiveKey checks that Reload applies every key whose
// field is tagged reload:"live", and only those: after a reload, the keys
// still differing from the new configuration are the ones needing a
// restart.
func TestReloadTakesOnEveryLiveKey(t *testing.T) {
	cfg := parse(t, "replica:\n  url: file:///srv/replica\n  site: s\n")
	next := parse(t, "log:\n  level: debug\nhttp:\n  token: token-b-0123456789\n  max_clients: 3\nreplica:\n  url: file:///srv/replica\n  site: s\n  max_bytes_per_second: 1MiB\n")
	a := New(cfg, nil, "test")
	changes, err := a.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, c := range changes {
		if c.Live {
			live = append(live, c.Key)
		}
	}
	if want := []string{"replica.max_bytes_per_second", "http.token", "log.level"}; !slices.Equal(live, want) {
		t.Fatalf("live changes = %v, want %v", live, want)
	}
	for _, c := range config.Diff(a.effective, next) {
		if c.Live {
			t.Errorf("%s is live but Reload did not take it on", c.Key)
		}
	}
}
