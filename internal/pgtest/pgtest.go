// Package pgtest provides testing helpers on top of pgcluster: throwaway
// PostgreSQL clusters, uniquely named databases and connections, all
// cleaned up automatically.
//
// A test gets a cluster of its own from Start, or shares one with the other
// tests of its package (Shared), each in a database of its own
// (NewDatabase): starting a cluster costs about a second of initdb and
// startup, sharing one costs a CREATE DATABASE. What is the whole
// cluster's, and not a database's, must then be the test's alone: the
// replication slots it creates are named after its database, and a test
// that changes the server's settings, stops or crashes the server, creates
// roles or looks at every session or slot of the server starts a cluster of
// its own.
//
// The helpers never skip, but under -short: when PostgreSQL is not
// installed they fail the test with a message that says how to install it.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgcluster"
)

// cleanupTimeout bounds each cleanup step; the test's context is already
// cancelled when cleanups run.
const cleanupTimeout = time.Minute

// Start starts a throwaway cluster for the test, with optional extra
// postgresql.conf settings (later maps win). The cluster is stopped and its
// directory removed when the test ends, or when the test binary ends
// without running the test's cleanups (killed, a panic, a timeout). On
// error the test fails with the error, which includes the server log tail.
func Start(t testing.TB, settings ...map[string]string) *pgcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts PostgreSQL: not a short test")
	}
	merged := map[string]string{}
	for _, s := range settings {
		maps.Copy(merged, s)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := pgcluster.Start(t.Context(), pgcluster.Options{Settings: merged, Logger: logger, StopWithProcess: true})
	if err != nil {
		t.Fatalf("pgtest: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("pgtest: stop PostgreSQL: %v\nserver log:\n%s", err, c.LogTail(30))
		}
	})
	return c
}

// NewDatabase creates a database with a unique name derived from the test
// name and returns that name: of lowercase letters, digits and underscores
// and shorter than PostgreSQL's limit of 63 bytes, it is also a valid
// replication slot name, which on a shared cluster is the test's alone. When the test ends the database is
// dropped WITH (FORCE), after dropping any replication slots that use it;
// errors are ignored if the server is no longer running.
func NewDatabase(t testing.TB, c *pgcluster.Cluster) string {
	t.Helper()
	name := databaseName(t.Name())
	if err := c.CreateDatabase(t.Context(), name); err != nil {
		t.Fatalf("pgtest: %v\nserver log:\n%s", err, c.LogTail(20))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := dropDatabase(ctx, c, name)
		if err == nil {
			return
		}
		if running, rerr := c.Running(ctx); rerr == nil && !running {
			return // the cluster is gone: nothing to drop
		}
		t.Errorf("pgtest: drop database %s: %v", name, err)
	})
	return name
}

// Conn connects to dsn and closes the connection when the test ends.
func Conn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect %q: %v", dsn, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

// maxNameLen keeps database names below PostgreSQL's 63 byte identifier
// limit, leaving room for the random suffix.
const maxNameLen = 40

// databaseName turns a test name into a unique lowercase identifier such as
// "testfoo_sub_case_1a2b3c4d".
func databaseName(testName string) string {
	var b strings.Builder
	underscore := false
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= maxNameLen {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore && b.Len() > 0 {
			b.WriteByte('_')
			underscore = true
		}
	}
	base := strings.TrimSuffix(b.String(), "_")
	switch {
	case base == "":
		base = "db"
	case base[0] >= '0' && base[0] <= '9':
		base = "db_" + base
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails
	return base + "_" + hex.EncodeToString(suffix[:])
}

// dropDatabase drops the replication slots of database name, terminating
// the sessions that hold them, and then the database itself.
func dropDatabase(ctx context.Context, c *pgcluster.Cluster, name string) error {
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// PostgreSQL refuses to drop a database that logical slots refer to, and
	// an active slot cannot be dropped until its walsender has exited.
	for {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND NOT active`, name); err != nil {
			return err
		}
		var remaining int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, name).Scan(&remaining); err != nil {
			return err
		}
		if remaining == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}
