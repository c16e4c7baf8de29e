// Package pgcluster starts and stops throwaway PostgreSQL clusters configured
// for logical replication. It is used by the integration tests and by the
// `lakeside demo` command.
//
// A cluster lives in its own directory (data directory, Unix socket directory
// and server log) created under Options.BaseDir, listens on a free port on
// 127.0.0.1 and on a Unix socket, and trusts every local connection as the
// superuser "postgres". When the current process is root the server binaries
// are run as the "postgres" operating system user through runuser, because
// initdb and postgres refuse to run as root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configures a throwaway cluster.
type Options struct {
	// BinDir holds initdb, pg_ctl and postgres. The default is found by
	// FindBinDir.
	BinDir string
	// BaseDir is where the cluster directory is created; the default is
	// os.TempDir(). It must be traversable by the "postgres" user when
	// running as root, and short enough for a Unix socket path.
	BaseDir string
	// Settings are extra postgresql.conf settings that override the
	// defaults. Values are written quoted, so pass them unquoted ("64MB",
	// "on"); a value already enclosed in single quotes is written as is.
	// "port" and "unix_socket_directories" are managed by the package and
	// cannot be set.
	Settings map[string]string
	// Logger receives debug messages about the cluster's lifecycle; nil
	// discards them.
	Logger *slog.Logger
	// StopWithProcess makes sure the cluster does not outlive this process:
	// if the process ends without stopping it (killed, or a test binary
	// that panics or times out and so runs no cleanup), a watchdog started
	// beside the server stops it in immediate mode and removes its
	// directory. Without it the server, which pg_ctl detaches, runs on.
	// It works on Unix only; elsewhere it does nothing.
	StopWithProcess bool
}

// Cluster is a running (or stopped) throwaway PostgreSQL cluster. Its methods
// are safe for concurrent use; lifecycle operations are serialised.
type Cluster struct {
	run       *runner
	logger    *slog.Logger
	dir       string
	dataDir   string
	socketDir string
	logPath   string
	port      int

	mu       sync.Mutex // serialises lifecycle operations
	removed  bool
	watchdog *watchdog // nil without Options.StopWithProcess
}

const (
	// startAttempts bounds how often Start picks a new port after a clash.
	startAttempts = 5
	// pgCtlTimeout is the -t value passed to pg_ctl, in seconds.
	pgCtlTimeout = "60"
	// maxSocketPath is the longest Unix socket path the kernel accepts.
	maxSocketPath = 107
)

// defaultSettings returns the postgresql.conf settings applied to every
// cluster, before Options.Settings.
func defaultSettings() map[string]string {
	return map[string]string{
		"wal_level":             "logical",
		"max_wal_senders":       "20",
		"max_replication_slots": "20",
		"listen_addresses":      "127.0.0.1",
		"fsync":                 "off",
		"full_page_writes":      "off",
		"shared_buffers":        "64MB",
		"max_connections":       "100",
		"logging_collector":     "off",
		"log_min_messages":      "warning",
	}
}

// isManagedSetting reports whether name is set by the package itself and may
// not be overridden through Options.Settings.
func isManagedSetting(name string) bool {
	switch strings.ToLower(name) {
	case "port", "unix_socket_directories":
		return true
	}
	return false
}

// settingName matches valid postgresql.conf parameter names.
var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// Start creates a new cluster directory, runs initdb, starts the server and
// waits until it accepts connections. On failure nothing is left behind.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	began := time.Now()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	settings := defaultSettings()
	for k, v := range opts.Settings {
		if !settingName.MatchString(k) {
			return nil, fmt.Errorf("settings: invalid name %q", k)
		}
		if isManagedSetting(k) {
			return nil, fmt.Errorf("settings: %q is managed by pgcluster", k)
		}
		if strings.ContainsAny(v, "\n\r") {
			return nil, fmt.Errorf("settings: value of %q contains a newline", k)
		}
		settings[strings.ToLower(k)] = v
	}

	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(ctx); err != nil {
			return nil, err
		}
	} else if err := checkBinDir(binDir); err != nil {
		return nil, fmt.Errorf("bindir %s: %w", binDir, err)
	}
	run, err := newRunner(binDir)
	if err != nil {
		return nil, err
	}

	c := &Cluster{run: run, logger: logger}
	if err := c.makeDirs(opts.BaseDir); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			c.abandon(ctx)
		}
	}()

	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	baseConf, err := os.ReadFile(c.confPath())
	if err != nil {
		return nil, fmt.Errorf("read postgresql.conf: %w", err)
	}

	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		c.port = port
		settings["port"] = strconv.Itoa(port)
		settings["unix_socket_directories"] = c.socketDir
		if err := os.WriteFile(c.confPath(), renderConf(baseConf, settings), 0o600); err != nil {
			return nil, fmt.Errorf("write postgresql.conf: %w", err)
		}
		logOffset := c.logSize()
		err = c.startServer(ctx)
		if err == nil {
			break
		}
		if attempt < startAttempts && ctx.Err() == nil && isPortClash(c.logSince(logOffset)) {
			logger.DebugContext(ctx, "pgcluster: port clash, retrying", "port", port, "attempt", attempt)
			continue
		}
		return nil, err
	}
	if opts.StopWithProcess {
		if c.watchdog, err = c.startWatchdog(); err != nil {
			return nil, err
		}
	}
	started = true
	logger.DebugContext(ctx, "pgcluster: started", "dir", c.dir, "port", c.port, "elapsed", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// makeDirs creates the cluster directory layout under base:
//
//	<base>/lakeside-pg-XXXX/        cluster dir, 0755
//	<base>/lakeside-pg-XXXX/data/   data directory
//	<base>/lakeside-pg-XXXX/s/      Unix socket directory (kept short)
//	<base>/lakeside-pg-XXXX/server.log
func (c *Cluster) makeDirs(base string) error {
	if base == "" {
		base = os.TempDir()
	}
	base, err := filepath.Abs(base)
	if err != nil {
		return fmt.Errorf("base dir: %w", err)
	}
	dir, err := os.MkdirTemp(base, "lakeside-pg-")
	if err != nil {
		return fmt.Errorf("create cluster dir: %w", err)
	}
	c.dir = dir
	c.dataDir = filepath.Join(dir, "data")
	c.socketDir = filepath.Join(dir, "s")
	c.logPath = filepath.Join(dir, "server.log")
	c.run.workDir = dir

	fail := func(err error) error {
		_ = os.RemoveAll(dir)
		return err
	}
	if n := len(filepath.Join(c.socketDir, ".s.PGSQL.65535")); n > maxSocketPath {
		return fail(fmt.Errorf("socket path under %s is %d bytes, over the %d byte limit: use a shorter base dir", base, n, maxSocketPath))
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(fmt.Errorf("chmod cluster dir: %w", err))
	}
	if err := os.Mkdir(c.dataDir, 0o700); err != nil {
		return fail(fmt.Errorf("create data dir: %w", err))
	}
	if err := os.Mkdir(c.socketDir, 0o755); err != nil {
		return fail(fmt.Errorf("create socket dir: %w", err))
	}
	for _, p := range []string{dir, c.dataDir, c.socketDir} {
		if err := c.run.chown(p); err != nil {
			return fail(fmt.Errorf("cluster dir: %w", err))
		}
	}
	if c.run.asRoot() {
		if err := checkTraversable(base, c.run.uid, c.run.gid); err != nil {
			return fail(err)
		}
	}
	return nil
}

// checkTraversable verifies that the user uid/gid can reach dir, so that the
// server (running as that user) can use the cluster directory below it.
func checkTraversable(dir string, uid, gid int) error {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("base dir: %w", err)
		}
		owner, group := statOwner(fi)
		var ok bool
		switch {
		case owner == uid:
			ok = fi.Mode().Perm()&0o100 != 0
		case group == gid:
			ok = fi.Mode().Perm()&0o010 != 0
		default:
			ok = fi.Mode().Perm()&0o001 != 0
		}
		if !ok {
			return fmt.Errorf("base dir: %s (mode %v) is not traversable by user %q: use a base dir like os.TempDir()", p, fi.Mode().Perm(), serverUser)
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}

// initdb creates the data directory, preferring the C.UTF-8 locale and
// falling back to C where that is unavailable.
func (c *Cluster) initdb(ctx context.Context) error {
	began := time.Now()
	args := []string{"-D", c.dataDir, "--auth=trust", "-U", "postgres", "--encoding=UTF8", "-N"}
	out, err := c.run.run(ctx, "initdb", append(args, "--locale=C.UTF-8")...)
	if err != nil && ctx.Err() == nil && strings.Contains(strings.ToLower(out), "locale") {
		c.logger.DebugContext(ctx, "pgcluster: C.UTF-8 locale unavailable, using C", "output", tailLines(out, 5))
		// initdb empties the data directory it was given on failure.
		_, err = c.run.run(ctx, "initdb", append(args, "--locale=C")...)
	}
	if err != nil {
		return fmt.Errorf("initdb: %w", err)
	}
	c.logger.DebugContext(ctx, "pgcluster: initdb done", "dir", c.dataDir, "elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

// renderConf appends settings, sorted by name, to the initdb-generated
// postgresql.conf content base. Later lines override earlier ones.
func renderConf(base []byte, settings map[string]string) []byte {
	var b strings.Builder
	b.Write(base)
	b.WriteString("\n# Added by lakeside pgcluster.\n")
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s = %s\n", k, quoteConfValue(settings[k]))
	}
	return []byte(b.String())
}

// quoteConfValue quotes v for postgresql.conf unless it is already quoted.
func quoteConfValue(v string) string {
	if len(v) >= 2 && strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `''`)
	return "'" + v + "'"
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// may take it before the server binds it; Start retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// isPortClash reports whether a server log excerpt shows a failure to bind
// the listen port.
func isPortClash(log string) bool {
	return strings.Contains(log, "Address already in use") ||
		strings.Contains(log, "could not create any TCP/IP sockets")
}

// startServer runs pg_ctl start and waits until a connection succeeds.
func (c *Cluster) startServer(ctx context.Context) error {
	logOffset := c.logSize()
	_, err := c.run.run(ctx, "pg_ctl", "-D", c.dataDir, "-l", c.logPath, "-w", "-t", pgCtlTimeout, "start")
	if err != nil {
		return fmt.Errorf("start: %w%s", err, c.logExcerpt(logOffset))
	}
	if err := c.waitReady(ctx); err != nil {
		return fmt.Errorf("start: %w%s", err, c.logExcerpt(logOffset))
	}
	return nil
}

// waitReady connects to the server until it answers, for up to ten seconds.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var lastErr error
	for {
		conn, err := pgx.Connect(ctx, c.DSN("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for server: %w", lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopServer runs pg_ctl stop in mode ("fast" or "immediate") if the server
// is running.
func (c *Cluster) stopServer(ctx context.Context, mode string) error {
	running, err := c.running(ctx)
	if err != nil {
		return err
	}
	if !running {
		return nil
	}
	logOffset := c.logSize()
	if _, err := c.run.run(ctx, "pg_ctl", "-D", c.dataDir, "-m", mode, "-w", "-t", pgCtlTimeout, "stop"); err != nil {
		return fmt.Errorf("stop -m %s: %w%s", mode, err, c.logExcerpt(logOffset))
	}
	return nil
}

// running asks pg_ctl status whether the server is running.
func (c *Cluster) running(ctx context.Context) (bool, error) {
	_, err := c.run.run(ctx, "pg_ctl", "-D", c.dataDir, "status")
	switch code := exitCode(err); {
	case err == nil:
		return true, nil
	case code == 3 || code == 4: // not running / no accessible data directory
		return false, nil
	default:
		return false, fmt.Errorf("status: %w", err)
	}
}

// abandon tears down a cluster whose Start failed, ignoring errors.
func (c *Cluster) abandon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := c.stopServer(ctx, "immediate"); err != nil {
		c.logger.WarnContext(ctx, "pgcluster: stop after failed start", "dir", c.dir, "err", err)
		return // keep the directory of a server that may still run
	}
	_ = os.RemoveAll(c.dir)
}

// Stop shuts the server down (fast mode) and removes the whole cluster
// directory. Stopping a cluster that is already stopped or removed is not an
// error. If the server cannot be stopped the directory is kept.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil
	}
	began := time.Now()
	if err := c.stopServer(ctx, "fast"); err != nil {
		if ierr := c.stopServer(ctx, "immediate"); ierr != nil {
			return errors.Join(err, ierr)
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove cluster dir: %w", err)
	}
	c.removed = true
	if c.watchdog != nil {
		c.watchdog.release()
	}
	c.logger.DebugContext(ctx, "pgcluster: stopped and removed", "dir", c.dir, "elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

// Crash stops the server with pg_ctl stop -m immediate, which simulates a
// crash: the next start runs crash recovery. The data is kept.
func (c *Cluster) Crash(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errRemoved
	}
	if err := c.stopServer(ctx, "immediate"); err != nil {
		return fmt.Errorf("crash: %w", err)
	}
	c.logger.DebugContext(ctx, "pgcluster: crashed", "dir", c.dir)
	return nil
}

// StopServer shuts the server down (fast mode) and keeps the data, so that
// Restart can bring it back.
func (c *Cluster) StopServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errRemoved
	}
	if err := c.stopServer(ctx, "fast"); err != nil {
		return err
	}
	c.logger.DebugContext(ctx, "pgcluster: server stopped", "dir", c.dir)
	return nil
}

// Restart starts the server again on the same port after Crash or
// StopServer. If the server is running it is first shut down (fast mode).
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return errRemoved
	}
	began := time.Now()
	if err := c.stopServer(ctx, "fast"); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if err := c.startServer(ctx); err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	c.logger.DebugContext(ctx, "pgcluster: restarted", "dir", c.dir, "elapsed", time.Since(began).Round(time.Millisecond))
	return nil
}

// Running reports whether the server is running.
func (c *Cluster) Running(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return false, nil
	}
	return c.running(ctx)
}

// errRemoved is returned by lifecycle methods called after Stop.
var errRemoved = errors.New("cluster was stopped and removed")

// DSN returns a keyword/value connection string for database over the Unix
// socket, as the superuser "postgres".
func (c *Cluster) DSN(database string) string {
	return c.dsn(c.socketDir, database)
}

// TCPDSN returns a keyword/value connection string for database over TCP on
// 127.0.0.1, as the superuser "postgres".
func (c *Cluster) TCPDSN(database string) string {
	return c.dsn("127.0.0.1", database)
}

// dsn builds a keyword/value connection string for host and database.
func (c *Cluster) dsn(host, database string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable",
		quoteDSNValue(host), c.port, quoteDSNValue(database))
}

// quoteDSNValue quotes v for a keyword/value connection string when needed.
func quoteDSNValue(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`+"\t\n\r\v\f") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}

// CreateDatabase creates the database name, quoting it as an identifier.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	if err := c.Exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	return nil
}

// Exec connects to database over the Unix socket and runs sql, then
// disconnects. sql may contain several statements separated by semicolons;
// they run in one implicit transaction unless sql uses BEGIN/COMMIT.
func (c *Cluster) Exec(ctx context.Context, database, sql string) error {
	conn, err := pgx.Connect(ctx, c.DSN(database))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	return nil
}

// BinDir returns the directory of the PostgreSQL binaries the cluster uses,
// for running tools such as psql or pg_recvlogical against it.
func (c *Cluster) BinDir() string { return c.run.binDir }

// Dir returns the cluster directory, which holds the data directory, the
// socket directory and the server log. Stop removes it.
func (c *Cluster) Dir() string { return c.dir }

// DataDir returns the data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// SocketDir returns the directory of the server's Unix socket.
func (c *Cluster) SocketDir() string { return c.socketDir }

// Port returns the server's port, for TCP and the Unix socket name.
func (c *Cluster) Port() int { return c.port }

// confPath returns the path of postgresql.conf.
func (c *Cluster) confPath() string { return filepath.Join(c.dataDir, "postgresql.conf") }

// LogPath returns the path of the server log.
func (c *Cluster) LogPath() string { return c.logPath }

// LogTail returns the last n lines of the server log, or "" if it cannot be
// read.
func (c *Cluster) LogTail(n int) string {
	return tailLines(c.logSince(c.logSize()-64<<10), n)
}

// logSize returns the current size of the server log.
func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(c.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the server log from byte offset on.
func (c *Cluster) logSince(offset int64) string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return ""
	}
	return string(b)
}

// logExcerpt formats the server log written since offset for an error
// message.
func (c *Cluster) logExcerpt(offset int64) string {
	tail := tailLines(c.logSince(offset), 20)
	if tail == "" {
		return ""
	}
	return "\nserver log " + c.logPath + ":\n" + tail
}
