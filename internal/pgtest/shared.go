package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/pgcluster"
)

// sharedSettings are the settings of a shared cluster, over pgcluster's:
// room for the walsenders, slots and sessions of the tests that run at
// once (go test -parallel) and of the agents they start, and for the
// databases dropped with slots still being released.
func sharedSettings() map[string]string {
	return map[string]string{
		"max_wal_senders":       "64",
		"max_replication_slots": "64",
		"max_connections":       "200",
	}
}

// Shared is a cluster that the tests of a package share, each in a
// database of its own (NewDatabase). The first test that asks for it
// starts it; it is stopped and removed once every test of the package has
// run, or when the test binary ends otherwise (killed, a panic, a
// timeout). A package declares one and runs its tests through it:
//
//	var shared = pgtest.NewShared()
//
//	func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
//
// and a test calls shared.Cluster(t) where it would call Start(t). Only a
// test that changes nothing of the whole cluster may share it: see the
// package documentation.
type Shared struct {
	settings map[string]string

	mu      sync.Mutex
	running bool               // Run is running the tests
	started bool               // the cluster was started, or failed to
	cluster *pgcluster.Cluster // nil until started, or if it failed
	err     error              // why the cluster did not start
}

// NewShared returns a shared cluster, not yet started, with optional extra
// postgresql.conf settings (later maps win) for the tests that share it.
func NewShared(settings ...map[string]string) *Shared {
	merged := sharedSettings()
	for _, m := range settings {
		maps.Copy(merged, m)
	}
	return &Shared{settings: merged}
}

// Run runs the tests (m.Run), then stops and removes the cluster if a test
// started it, and returns the exit code for os.Exit: m.Run's, or 1 if the
// cluster could not be stopped.
func (s *Shared) Run(m *testing.M) int {
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	code := m.Run()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = false
	if s.cluster == nil {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := s.cluster.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stop the shared PostgreSQL: %v\nserver log:\n%s\n", err, s.cluster.LogTail(30))
		return max(code, 1)
	}
	return code
}

// Cluster returns the shared cluster, starting it if no test has yet. If it
// cannot start, the test fails with the error, which includes the server
// log tail, as does every later test that asks for it. It skips the test
// under -short, as Start does, and fails it if the tests do not run
// through Run, which would leave the cluster running.
func (s *Shared) Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL: not a short test")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		t.Fatal("pgtest: a Shared cluster needs the package's TestMain to run the tests through its Run")
	}
	if !s.started {
		s.started = true
		s.cluster, s.err = s.start()
	}
	if s.err != nil {
		t.Fatalf("pgtest: start the shared PostgreSQL: %v", s.err)
	}
	return s.cluster
}

// start starts the cluster, under no test's context: it outlives the test
// that starts it.
func (s *Shared) start() (*pgcluster.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{
		Settings:        s.settings,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		StopWithProcess: true,
	})
	return c, err
}
