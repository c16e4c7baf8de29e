package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/internal/s3test"
)

// notifyListener is the service manager's end of the notify protocol: a
// datagram socket whose messages the test reads.
type notifyListener struct {
	path string
	conn *net.UnixConn
}

func listenNotify(t *testing.T) *notifyListener {
	t.Helper()
	// Socket paths are short (108 bytes): use a short temporary directory.
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifyListener{path: path, conn: conn}
}

// next returns the next message, or "" when none arrives within wait.
func (n *notifyListener) next(wait time.Duration) string {
	buf := make([]byte, 4096)
	n.conn.SetReadDeadline(time.Now().Add(wait))
	k, err := n.conn.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:k])
}

// TestSystemdNotify runs the agent as systemd would (NOTIFY_SOCKET and
// WATCHDOG_USEC set): READY=1 arrives only once PostgreSQL is connected,
// WATCHDOG=1 pings follow, and SIGTERM says STOPPING=1 and exits 0.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	// It stops and restarts PostgreSQL: a PostgreSQL of its own.
	e := newE2EAlone(t, []string{"public.stock"}, "")
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	n := listenNotify(t)
	ctx := context.Background()
	if err := e.cluster.StopServer(ctx); err != nil {
		t.Fatal(err)
	}

	d := e.start("NOTIFY_SOCKET="+n.path, "WATCHDOG_USEC=1000000")
	// With PostgreSQL down the agent retries, and tells systemd nothing.
	if msg := n.next(4 * time.Second); msg != "" {
		t.Fatalf("the agent notified %q before PostgreSQL was reachable; log:\n%s", msg, d.stderr)
	}
	if err := e.cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	msg := n.next(60 * time.Second)
	if !strings.HasPrefix(msg, "READY=1\n") {
		t.Fatalf("first notification %q, want READY=1; log:\n%s", msg, d.stderr)
	}
	if st := e.status(); st.State != "snapshot" && st.State != "streaming" {
		t.Fatalf("READY=1 sent while capture is %q", st.State)
	}
	pings := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && pings < 3; {
		if m := n.next(time.Until(deadline)); strings.Contains(m, "WATCHDOG=1") && strings.Contains(m, "STATUS=") {
			pings++
		}
	}
	if pings < 3 {
		t.Fatalf("%d watchdog pings in 5 s with a 1 s watchdog, want at least 3; log:\n%s", pings, d.stderr)
	}

	d.cmd.Process.Signal(syscall.SIGTERM)
	stopping := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !stopping; {
		stopping = strings.Contains(n.next(time.Until(deadline)), "STOPPING=1")
	}
	<-d.exited
	if !stopping || d.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("SIGTERM: STOPPING=1 sent %v, exit code %d; log:\n%s", stopping, d.cmd.ProcessState.ExitCode(), d.stderr)
	}
}

// TestReloadOnSIGHUP changes the configuration under a running agent: the
// log level, the upload bandwidth limit and the HTTP token take effect at
// once, a changed slot is reported as needing a restart, and a broken file
// is refused while the agent runs on.
func TestReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	replicaDir := t.TempDir()
	section := func(token, bandwidth string) string {
		return "http:\n  listen: " + addr + "\n  token: " + token + "\n" +
			"replica:\n  url: file://" + replicaDir + "\n  site: branch\n  max_bytes_per_second: " + bandwidth + "\n"
	}
	e := newE2EWith(t, []string{"public.stock"}, section("first-token", "1MiB"))
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	d := e.start()
	waitState(t, e, d, "streaming")

	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("first-token") != http.StatusOK || get("second-token") != http.StatusUnauthorized {
		t.Fatal("the first token is not the one in effect")
	}

	cfg, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(cfg), section("first-token", "1MiB"), section("second-token", "2MiB"), 1)
	edited = strings.Replace(edited, "level: info", "level: debug", 1)
	edited = strings.Replace(edited, "slot: "+e.slot, "slot: "+e.slot+"_other", 1)
	writeFile(t, e.configPath, edited)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, d, "changed keys take effect only after a restart")
	logged := d.log()
	for _, want := range []string{"configuration reloaded", "log.level", "replica.max_bytes_per_second", "http.token", "source.slot"} {
		if !strings.Contains(logged, want) {
			t.Errorf("the reload's log does not mention %q", want)
		}
	}
	if strings.Contains(logged, "second-token") {
		t.Error("the log shows the new token")
	}
	if get("first-token") != http.StatusUnauthorized || get("second-token") != http.StatusOK {
		t.Error("the new token is not the one in effect after SIGHUP")
	}
	e.exec(`INSERT INTO stock VALUES (1, 1)`)
	waitLog(t, d, "level=DEBUG")
	e.waitApplied(d)
	checkMetrics(t, "http://"+addr+"/metrics", "second-token")

	// A file that does not load is refused; the agent runs on.
	writeFile(t, e.configPath, edited+"bogus: 1\n")
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, d, "reload refused")
	if !strings.Contains(d.log(), "lakeside.yaml:") || get("second-token") != http.StatusOK {
		t.Fatalf("a broken file on SIGHUP: log:\n%s", d.stderr)
	}
	e.stop(d)
}

// waitLog waits for text to appear in the agent's log.
func waitLog(t *testing.T, d *daemon, text string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(d.log(), text) {
			return
		}
	}
	t.Fatalf("the agent did not log %q; log:\n%s", text, d.stderr)
}

// TestCheckReplicaAndDisk runs `lakeside check` against a real S3 server:
// reachable and writable passes, wrong credentials and an unreachable
// endpoint fail with the fix, and a backlog budget larger than the free
// disk fails the disk check.
func TestCheckReplicaAndDisk(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	bucket := s3.NewBucket()
	replica := func(endpoint, secret, budget string) string {
		return fmt.Sprintf("replica:\n  url: s3://%s/lake\n  site: branch1\n  endpoint: %s\n  region: %s\n  access_key_id: %s\n  secret_access_key: %s\n  max_backlog: %s\n",
			bucket, endpoint, s3test.Region, s3test.AccessKey, secret, budget)
	}
	good := replica(s3.Endpoint(), s3test.SecretKey, "64MiB")
	e := newE2EWith(t, []string{"public.stock"}, good)
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	base, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	check := func(section string) (string, int) {
		writeFile(t, e.configPath, strings.Replace(string(base), good, section, 1))
		out, stderr, code := e.lakeside("check", "--config", e.configPath)
		return out + stderr, code
	}

	out, code := check(good)
	for _, want := range []string{"✓ connect to PostgreSQL", "✓ state_dir " + e.stateDir + " is writable", "free (needs 1.1 GiB)",
		"/lake/branch1 is reachable and writable", "✓ replica returns what was written", "✓ replica allows deletes",
		"✓ replica refuses to overwrite a commit"} {
		if !strings.Contains(out, want) {
			t.Errorf("check with a good replica does not say %q", want)
		}
	}
	if code != 0 || strings.Contains(out, "✗") {
		t.Fatalf("check with a good replica: exit %d\n%s", code, out)
	}
	for obj := range s3.Client().ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil || strings.Contains(obj.Key, ".lakeside-check") {
			t.Fatalf("check left %q on the replica (%v)", obj.Key, obj.Err)
		}
	}

	out, code = check(replica(s3.Endpoint(), "wrong-secret", "64MiB"))
	if code == 0 || !strings.Contains(out, "✗ replica") || !strings.Contains(out, "fix: check replica.url") {
		t.Fatalf("check with a wrong secret key: exit %d\n%s", code, out)
	}

	closed := "http://" + freeAddr(t)
	out, code = check(replica(closed, s3test.SecretKey, "64MiB"))
	if code == 0 || !strings.Contains(out, "✗ replica") {
		t.Fatalf("check with an unreachable replica: exit %d\n%s", code, out)
	}

	out, code = check(replica(s3.Endpoint(), s3test.SecretKey, "1000000GiB"))
	if code == 0 || !strings.Contains(out, "✗ state_dir has") || !strings.Contains(out, "lower replica.max_backlog") {
		t.Fatalf("check with a budget beyond the free disk: exit %d\n%s", code, out)
	}
}

// TestJSONLogsKeepSecrets runs the agent with log.format json through a
// start, a reload, a lost and regained PostgreSQL and a stop: every line is
// one JSON object, and neither the database password, the S3 secret key nor
// the HTTP token appears.
func TestJSONLogsKeepSecrets(t *testing.T) {
	t.Parallel()
	const password, token = "pg-password-7f3a", "http-token-91c2"
	s3 := s3test.Start(t)
	bucket := s3.NewBucket()
	addr := freeAddr(t)
	// It restarts PostgreSQL: a PostgreSQL of its own.
	e := newE2EAlone(t, []string{"public.stock"}, fmt.Sprintf(`log:
  level: debug
  format: json
http:
  listen: %s
  token: %s
`, addr, token)+replicaSection(s3, bucket, ""))
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	cfg, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	// Trust authentication ignores the password; the agent still holds it.
	writeFile(t, e.configPath, strings.Replace(string(cfg), `dsn: "`, `dsn: "password=`+password+` `, 1))

	d := e.start()
	waitState(t, e, d, "streaming")
	e.exec(`INSERT INTO stock VALUES (1, 1)`)
	e.waitApplied(d)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, d, "configuration reloaded")
	if err := e.cluster.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, "reconnected to PostgreSQL")
	e.stop(d)

	lines := strings.Split(strings.TrimSpace(d.log()), "\n")
	allThreads := false
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] == nil || rec["level"] == nil {
			t.Errorf("log line is not a JSON record: %q", line)
		}
		// Capture started caught up: the agent runs on every CPU.
		if rec["msg"] == "scheduler threads" && rec["catching_up"] == false && rec["count"] == float64(runtime.NumCPU()) {
			allThreads = true
		}
		for _, secret := range []string{password, s3test.SecretKey, token} {
			if strings.Contains(line, secret) {
				t.Errorf("log line reveals a secret: %q", line)
			}
		}
	}
	if len(lines) < 5 {
		t.Fatalf("only %d log lines:\n%s", len(lines), d.log())
	}
	if !allThreads {
		t.Errorf("the agent never logged that it runs on all %d CPUs once capture caught up", runtime.NumCPU())
	}
}

// TestEnvironmentFileNextToConfig: the commands an operator runs by hand
// expand ${VAR} from the environment file beside the configuration, as the
// service does from its EnvironmentFile=; a malformed file is named.
func TestEnvironmentFileNextToConfig(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.stock"})
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	cfg, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.configPath, strings.Replace(string(cfg), `dsn: "`+e.dsn+`"`, `dsn: "${LAKESIDE_TEST_BRANCH_DSN}"`, 1))
	envPath := filepath.Join(filepath.Dir(e.configPath), "environment")
	writeFile(t, envPath, "# secrets of the service\n\nLAKESIDE_TEST_BRANCH_DSN='"+e.dsn+"'\n")
	if out, stderr, code := e.lakeside("check", "--config", e.configPath); code != 0 || !strings.Contains(out, "✓ connect to PostgreSQL") {
		t.Fatalf("check with the DSN in the environment file: exit %d\n%s%s", code, out, stderr)
	}
	writeFile(t, envPath, "LAKESIDE_TEST_BRANCH_DSN\n")
	if _, stderr, code := e.lakeside("check", "--config", e.configPath); code == 0 || !strings.Contains(stderr, "environment: line 1: want VAR=value") {
		t.Fatalf("check with a malformed environment file: exit %d\n%s", code, stderr)
	}
}

// checkMetrics scrapes url and checks that every stage is covered: capture,
// queue, slot, Delta commits and files, upload backlog and errors, clients.
func checkMetrics(t *testing.T, url, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	values := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		var v float64
		fmt.Sscan(value, &v)
		values[name] += v
	}
	for _, m := range []struct {
		name     string
		positive bool
	}{
		{"lakeside_captured_transactions_total", true}, {"lakeside_captured_changes_total", true},
		{"lakeside_queue_bytes", false}, {"lakeside_queue_transactions", false},
		{"lakeside_confirmed_lsn", true}, {"lakeside_slot_lag_bytes", false},
		{"lakeside_delta_commits_total", true}, {"lakeside_delta_files_added_total", true},
		{"lakeside_delta_files_removed_total", false}, {"lakeside_delta_table_version", true},
		{"lakeside_replica_backlog_bytes", false}, {"lakeside_replica_backlog_versions", false},
		{"lakeside_replica_errors_total", false}, {"lakeside_replica_requests_total", true},
		{"lakeside_websocket_clients", false},
		{"lakeside_vacuum_runs_total", false}, {"lakeside_vacuum_failures_total", false},
		{"lakeside_vacuum_deleted_files_total", false}, {"lakeside_vacuum_deleted_bytes_total", false},
	} {
		v, ok := values[m.name]
		if !ok || (m.positive && v <= 0) {
			t.Errorf("metric %s: present %v, value %v", m.name, ok, v)
		}
	}
}
