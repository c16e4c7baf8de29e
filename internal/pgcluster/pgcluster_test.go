package pgcluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgcluster"
)

// start starts a cluster and registers its removal; it fails the test with
// the error (which carries the server log tail) if the cluster cannot start.
func start(t *testing.T, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	skipShort(t)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	began := time.Now()
	c, err := pgcluster.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Logf("cluster started in %v on port %d", time.Since(began).Round(time.Millisecond), c.Port())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stop cluster: %v\n%s", err, c.LogTail(20))
		}
	})
	return c
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect %q: %v", dsn, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestClusterLifecycle(t *testing.T) {
	ctx := t.Context()
	c := start(t, pgcluster.Options{})

	if c.BinDir() == "" || c.DataDir() == "" || c.SocketDir() == "" || c.Port() == 0 {
		t.Fatalf("incomplete cluster: bindir=%q data=%q socket=%q port=%d", c.BinDir(), c.DataDir(), c.SocketDir(), c.Port())
	}
	if _, err := os.Stat(c.Dir()); err != nil {
		t.Fatalf("cluster dir: %v", err)
	}

	admin := connect(t, c.DSN("postgres"))
	if got := queryString(t, admin, "SHOW wal_level"); got != "logical" {
		t.Fatalf("wal_level = %q, want logical", got)
	}
	for setting, want := range map[string]string{
		"fsync":                 "off",
		"full_page_writes":      "off",
		"synchronous_commit":    "on",
		"max_replication_slots": "20",
		"max_wal_senders":       "20",
		"server_encoding":       "UTF8",
	} {
		if got := queryString(t, admin, "SHOW "+setting); got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}

	// A name that needs identifier quoting.
	const db = `App "db" 1`
	if err := c.CreateDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, db, `
		CREATE TABLE items (id int PRIMARY KEY, name text);
		INSERT INTO items VALUES (1, 'before');`); err != nil {
		t.Fatal(err)
	}

	sock := connect(t, c.DSN(db))
	if got := queryString(t, sock, "SELECT current_database()"); got != db {
		t.Fatalf("socket current_database = %q, want %q", got, db)
	}
	tcp := connect(t, c.TCPDSN(db))
	if got := queryString(t, tcp, "SELECT coalesce(inet_server_addr()::text, 'socket')"); got != "127.0.0.1/32" {
		t.Fatalf("tcp server address = %q, want 127.0.0.1/32", got)
	}

	// Logical decoding works: create a pgoutput slot.
	if _, err := sock.Exec(ctx, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')"); err != nil {
		t.Fatalf("create slot: %v", err)
	}

	// Write in a committed transaction, then crash.
	tx, err := sock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO items VALUES (2, 'committed before crash')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if err := c.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if running, err := c.Running(ctx); err != nil || running {
		t.Fatalf("after crash: running=%v err=%v", running, err)
	}
	if err := sock.Ping(ctx); err == nil {
		t.Fatal("ping succeeded after crash")
	}
	port := c.Port()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Fatalf("port changed across restart: %d -> %d", port, c.Port())
	}

	after := connect(t, c.TCPDSN(db))
	var n int
	if err := after.QueryRow(ctx, "SELECT count(*) FROM items WHERE id IN (1, 2)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("rows after crash recovery = %d, want 2", n)
	}
	if got := queryString(t, after, "SELECT plugin FROM pg_replication_slots WHERE slot_name = 's'"); got != "pgoutput" {
		t.Fatalf("slot plugin after crash = %q, want pgoutput", got)
	}

	// A clean stop keeps the data too, and a plain restart works.
	if err := c.StopServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("restart of a running server: %v", err)
	}
	if err := c.Exec(ctx, db, "INSERT INTO items VALUES (3, 'after restarts')"); err != nil {
		t.Fatal(err)
	}
	if tail := c.LogTail(5); tail == "" {
		t.Error("empty server log tail")
	}

	// Stop removes everything and is idempotent.
	dir := c.Dir()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster dir still there after Stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

func TestSettingsOverride(t *testing.T) {
	c := start(t, pgcluster.Options{
		Settings: map[string]string{"max_connections": "42", "cluster_name": `it's \quoted`},
	})
	conn := connect(t, c.DSN("postgres"))
	if got := queryString(t, conn, "SHOW max_connections"); got != "42" {
		t.Errorf("max_connections = %q, want 42", got)
	}
	if got := queryString(t, conn, "SHOW cluster_name"); got != `it's \quoted` {
		t.Errorf("cluster_name = %q, want %q", got, `it's \quoted`)
	}
}

func TestBaseDir(t *testing.T) {
	skipShort(t)
	base := t.TempDir() // 0700: not traversable by the postgres user when root
	c, err := pgcluster.Start(t.Context(), pgcluster.Options{BaseDir: base})
	if os.Geteuid() == 0 {
		if err == nil {
			_ = c.Stop(context.Background())
			t.Fatal("Start as root under a 0700 base dir succeeded")
		}
		if !strings.Contains(err.Error(), "not traversable") {
			t.Fatalf("Start error = %v, want a clear 'not traversable' error", err)
		}
		entries, _ := os.ReadDir(base)
		if len(entries) != 0 {
			t.Fatalf("failed Start left %d entries in the base dir", len(entries))
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidSettings(t *testing.T) {
	skipShort(t)
	for name, settings := range map[string]map[string]string{
		"managed port":  {"port": "5432"},
		"managed sock":  {"Unix_Socket_Directories": "/tmp"},
		"bad name":      {"x = 1\nfsync": "on"},
		"newline value": {"application_name": "a\nfsync = on"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := pgcluster.Start(t.Context(), pgcluster.Options{Settings: settings})
			if err == nil {
				_ = c.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
		})
	}
}

func TestParallelStarts(t *testing.T) {
	skipShort(t)
	const n = 4
	var wg sync.WaitGroup
	clusters := make([]*pgcluster.Cluster, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			clusters[i], errs[i] = pgcluster.Start(t.Context(), pgcluster.Options{})
		})
	}
	wg.Wait()
	ports := map[int]bool{}
	for i, c := range clusters {
		if errs[i] != nil {
			t.Errorf("start %d: %v", i, errs[i])
			continue
		}
		if ports[c.Port()] {
			t.Errorf("port %d used twice", c.Port())
		}
		ports[c.Port()] = true
		if err := c.Exec(t.Context(), "postgres", "SELECT 1"); err != nil {
			t.Errorf("exec %d: %v", i, err)
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stop %d: %v", i, err)
		}
	}
}

func TestFindBinDir(t *testing.T) {
	skipShort(t)
	dir, err := pgcluster.FindBinDir(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/initdb"); err != nil {
		t.Fatalf("FindBinDir = %q without initdb: %v", dir, err)
	}

	t.Setenv("PG_BINDIR", t.TempDir())
	if _, err := pgcluster.FindBinDir(t.Context()); !errors.Is(err, pgcluster.ErrBinariesNotFound) {
		t.Fatalf("FindBinDir with empty PG_BINDIR: %v, want ErrBinariesNotFound", err)
	}
	if _, err := pgcluster.Start(t.Context(), pgcluster.Options{}); !errors.Is(err, pgcluster.ErrBinariesNotFound) {
		t.Fatalf("Start with empty PG_BINDIR: %v, want ErrBinariesNotFound", err)
	}
}

func TestStartFailureReportsLog(t *testing.T) {
	skipShort(t)
	base, err := os.MkdirTemp("", "pgcluster-fail-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}

	c, err := pgcluster.Start(t.Context(), pgcluster.Options{
		BaseDir:  base,
		Settings: map[string]string{"shared_buffers": "lots"},
	})
	if err == nil {
		_ = c.Stop(context.Background())
		t.Fatal("Start with an invalid setting succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), `"shared_buffers"`) || !strings.Contains(err.Error(), "server log") {
		t.Errorf("error lacks the server log tail: %v", err)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("failed Start left %d entries in the base dir", len(entries))
	}
}

// skipShort skips a test that starts PostgreSQL or runs its binaries when
// only the short tests run (go test -short).
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs PostgreSQL: not a short test")
	}
}

// TestStopWithProcess kills, with SIGKILL, a process that started a
// cluster with StopWithProcess: the cluster stops and its directory goes,
// though the process ran no cleanup.
func TestStopWithProcess(t *testing.T) {
	if os.Getenv("PGCLUSTER_TEST_KILLED") == "1" {
		// The process killed: it starts the cluster, says where, and
		// waits.
		c, err := pgcluster.Start(context.Background(), pgcluster.Options{StopWithProcess: true})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(c.Dir(), c.Port())
		time.Sleep(time.Hour)
		return
	}
	skipShort(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStopWithProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGCLUSTER_TEST_KILLED=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	var dir string
	var port int
	if _, serr := fmt.Sscan(line, &dir, &port); err != nil || serr != nil {
		t.Fatalf("the process did not start a cluster: %q, %v", line, errors.Join(err, serr))
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if conn, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("the cluster does not listen on %s: %v", addr, err)
	} else {
		conn.Close()
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster directory %s is still there a minute after its process was killed (%v)", dir, err)
		}
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("the cluster still listens on %s once its directory is gone", addr)
	}
}
