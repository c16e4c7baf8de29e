package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/pgcluster"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// shared is the PostgreSQL the end-to-end tests share, each in a database
// of its own (pgtest.Shared).
var shared = pgtest.NewShared()

// The end-to-end tests run this test binary as the real agent: with
// LAKESIDE_TEST_MAIN=1 it behaves exactly like the lakeside command.
func TestMain(m *testing.M) {
	if os.Getenv("LAKESIDE_TEST_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(shared.Run(m))
}

// daemon is the agent running as a child process.
type daemon struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	out    *lockedWriter // writes to stderr
	exited chan struct{}
}

// log returns what the agent has logged so far; it is safe while the agent
// runs.
func (d *daemon) log() string {
	d.out.mu.Lock()
	defer d.out.mu.Unlock()
	return d.stderr.String()
}

// e2e is a database of its own plus a configuration file for the agent,
// whose slot, named after the database, is the test's alone.
type e2e struct {
	t          *testing.T
	cluster    *pgcluster.Cluster
	dsn        string
	slot       string
	conn       *pgx.Conn
	stateDir   string
	configPath string
}

// newE2E returns an e2e on the tests' shared PostgreSQL or, given settings
// (which are the whole server's), on a PostgreSQL of its own.
func newE2E(t *testing.T, tables []string, settings ...map[string]string) *e2e {
	t.Helper()
	return newE2EWith(t, tables, "", settings...)
}

// newE2EWith is newE2E with extra configuration sections appended.
func newE2EWith(t *testing.T, tables []string, extra string, settings ...map[string]string) *e2e {
	t.Helper()
	if len(settings) > 0 {
		return newE2EOn(t, pgtest.Start(t, settings...), tables, extra)
	}
	return newE2EOn(t, shared.Cluster(t), tables, extra)
}

// newE2EAlone is newE2EWith on a PostgreSQL of the test's own, for a test
// that does what other tests must not see (stop or restart the server,
// create roles) or measures what they would change (the server's WAL).
func newE2EAlone(t *testing.T, tables []string, extra string) *e2e {
	t.Helper()
	return newE2EOn(t, pgtest.Start(t), tables, extra)
}

// newE2EOn returns an e2e on a new database of cluster c.
func newE2EOn(t *testing.T, c *pgcluster.Cluster, tables []string, extra string) *e2e {
	t.Helper()
	db := pgtest.NewDatabase(t, c)
	e := &e2e{t: t, cluster: c, dsn: c.DSN(db), slot: db, stateDir: filepath.Join(t.TempDir(), "state")}
	e.conn = pgtest.Conn(t, e.dsn)
	e.configPath = filepath.Join(t.TempDir(), "lakeside.yaml")
	httpSection := "http:\n  listen: off\n"
	if strings.Contains("\n"+extra, "\nhttp:") {
		httpSection = ""
	}
	deltaSection := "delta:\n  flush_interval: 200ms\n"
	if strings.Contains("\n"+extra, "\ndelta:") {
		deltaSection = ""
	}
	logSection := "log:\n  level: info\n"
	if strings.Contains("\n"+extra, "\nlog:") {
		logSection = ""
	}
	cfg := fmt.Sprintf(`source:
  dsn: "%s"
  slot: %s
  publication: e2e
  tables: [%s]
  status_interval: 1s
state_dir: %s
%s%s%s%s`, e.dsn, e.slot, strings.Join(tables, ", "), e.stateDir, deltaSection, httpSection, logSection, extra)
	if err := os.WriteFile(e.configPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *e2e) exec(sqls ...string) {
	e.t.Helper()
	for _, s := range sqls {
		if _, err := e.conn.Exec(context.Background(), s); err != nil {
			e.t.Fatalf("%s: %v", s, err)
		}
	}
}

// lakeside runs a subcommand to completion and returns its output and exit code.
func (e *e2e) lakeside(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LAKESIDE_TEST_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// start starts `lakeside run` as a child process, with env added to the
// test's environment.
func (e *e2e) start(env ...string) *daemon {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "run", "--config", e.configPath)
	cmd.Env = append(append(os.Environ(), "LAKESIDE_TEST_MAIN=1"), env...)
	return e.startCommand(cmd)
}

// startCommand starts cmd, which runs the agent, as a child process that
// the test kills at its end if it still runs.
func (e *e2e) startCommand(cmd *exec.Cmd) *daemon {
	e.t.Helper()
	d := &daemon{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	d.out = &lockedWriter{w: d.stderr}
	cmd.Stderr = d.out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { cmd.Wait(); close(d.exited) }()
	e.t.Cleanup(func() { d.kill() })
	return d
}

func (d *daemon) kill() {
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Signal(syscall.SIGKILL)
		<-d.exited
	}
}

// sigkill kills the agent with SIGKILL and fails the test unless the kill
// is what ended it (run numbers the start, for the message).
func (e *e2e) sigkill(d *daemon, run int) {
	e.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	<-d.exited
	if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		e.t.Fatalf("run %d: agent exited by itself before the kill; log:\n%s", run, d.stderr)
	}
}

// stop sends SIGTERM and returns how long the agent took to exit.
func (e *e2e) stop(d *daemon) time.Duration {
	e.t.Helper()
	start := time.Now()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		d.kill()
		e.t.Fatalf("agent ignored SIGTERM for 20s; log:\n%s", d.stderr)
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		e.t.Fatalf("agent exited with %d (%s) after SIGTERM; log:\n%s", code, d.cmd.ProcessState, d.stderr)
	}
	return time.Since(start)
}

// status asks the running (or stopped) agent for its status.
func (e *e2e) status() *agent.Status {
	e.t.Helper()
	cfg, err := config.Load(e.configPath)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := agent.ReadStatus(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// waitCaughtUp waits until the agent's checkpoint reaches the server's WAL
// position at the time of the call.
func (e *e2e) waitCaughtUp(d *daemon) {
	e.t.Helper()
	var text string
	if err := e.conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&text); err != nil {
		e.t.Fatal(err)
	}
	target, _ := pglogrepl.ParseLSN(text)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			e.t.Fatalf("agent exited while catching up; log:\n%s", d.stderr)
		default:
		}
		cfg, _ := config.Load(e.configPath)
		if st, err := agent.ReadStatus(context.Background(), cfg); err == nil && st.Running {
			if cp, err := pglogrepl.ParseLSN(st.CheckpointLSN); err == nil && cp >= target {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("agent did not reach %s in 3 minutes; log:\n%s", text, d.stderr)
}

// backfillRecord reads the stopped agent's record of the copy of a table
// (by the name of its Delta tables), or nil.
func (e *e2e) backfillRecord(table string) *store.Backfill {
	e.t.Helper()
	db, err := store.Open(e.stateDir, store.Options{ReadOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var rec *store.Backfill
	err = db.View(func(r *store.Reader) error {
		recs, err := r.Backfills()
		for _, b := range recs {
			if b.Table == table {
				rec = b
			}
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// queue reads the stopped agent's queue.
func (e *e2e) queue() ([]*store.Txn, map[store.RelationKey]*store.Relation, store.LSN) {
	e.t.Helper()
	db, err := store.Open(e.stateDir, store.Options{ReadOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var txns []*store.Txn
	var rels map[store.RelationKey]*store.Relation
	var cp store.LSN
	err = db.View(func(r *store.Reader) error {
		var err error
		if txns, err = r.ReadTxns(0, 0); err != nil {
			return err
		}
		if cp, err = r.Checkpoint(); err != nil {
			return err
		}
		rels, err = r.Relations()
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return txns, rels, cp
}

// slotConfirmed returns the slot's confirmed_flush_lsn.
func (e *e2e) slotConfirmed() store.LSN {
	e.t.Helper()
	var text string
	if err := e.conn.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&text); err != nil {
		e.t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(text)
	if err != nil {
		e.t.Fatal(err)
	}
	return store.LSN(l)
}

// peakRSS returns the peak resident set size of a process in bytes.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// freeAddr returns a loopback address with a port nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// setSourceKey sets a key of the config file's source section, replacing
// the line that sets it if there is one.
func (e *e2e) setSourceKey(key, value string) {
	e.t.Helper()
	data, err := os.ReadFile(e.configPath)
	if err != nil {
		e.t.Fatal(err)
	}
	line := "  " + key + ": " + value + "\n"
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  "+key+":") {
			lines[i] = line
			writeFile(e.t, e.configPath, strings.Join(lines, ""))
			return
		}
	}
	writeFile(e.t, e.configPath, strings.Replace(string(data), "source:\n", "source:\n"+line, 1))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deltaRows reads the latest version of a local Delta table as maps keyed
// by column name.
func (e *e2e) deltaRows(table string) []map[string]any {
	e.t.Helper()
	rows, err := e.readDelta(table)
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// notATableYet reports whether err, of opening a local Delta table, says
// that the table is not created yet: no directory, or a _delta_log the
// agent has made but not yet committed to.
func notATableYet(err error) bool {
	return errors.Is(err, delta.ErrNotATable) || errors.Is(err, fs.ErrNotExist)
}

// readDelta is deltaRows returning its error.
func (e *e2e) readDelta(table string) ([]map[string]any, error) {
	var out []map[string]any
	err := e.scanDelta(table, func(row map[string]any) { out = append(out, row) })
	return out, err
}

// scanDelta calls fn with each row of the latest version of a local Delta
// table, as a map keyed by column name, reading one data file at a time:
// a check that only counts rows holds no more than a file of them.
func (e *e2e) scanDelta(table string, fn func(row map[string]any)) error {
	ctx := context.Background()
	tbl, err := delta.Open(ctx, filepath.Join(e.stateDir, "tables", table))
	if err != nil {
		return fmt.Errorf("open Delta table %s: %w", table, err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", table, err)
	}
	names := snap.Schema().FieldNames()
	err = snap.ScanFiles(ctx, func(_ *delta.Add, rows []delta.Row) error {
		for _, r := range rows {
			m := make(map[string]any, len(names))
			for j, n := range names {
				m[n] = r[j]
			}
			fn(m)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	return nil
}

// waitApplied waits until everything captured so far is in the Delta
// tables: the checkpoint has reached the server's WAL position and the
// queue is empty (the applier trims what every table applied).
func (e *e2e) waitApplied(d *daemon) {
	e.t.Helper()
	e.waitCaughtUp(d)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		cfg, _ := config.Load(e.configPath)
		if st, err := agent.ReadStatus(context.Background(), cfg); err == nil && st.Running && st.Queue.Entries == 0 {
			return
		}
		select {
		case <-d.exited:
			e.t.Fatalf("agent exited while applying; log:\n%s", d.stderr)
		case <-time.After(100 * time.Millisecond):
		}
	}
	e.t.Fatalf("the queue did not drain into the Delta tables in 3 minutes; log:\n%s", d.stderr)
}

// rss returns a process's current anonymous and file-backed resident
// memory in bytes.
func rss(pid int) (anon, file int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb * 1024
		case "RssFile:", "RssShmem:":
			file += kb * 1024
		}
	}
	return anon, file, nil
}

// dropSlot drops the agent's slot once its walsender has gone.
func (e *e2e) dropSlot() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.conn.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("drop slot: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
