package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file run the real lakeside command against
// configurations a stranger could hand it, and check that each is refused
// before PostgreSQL is contacted, with a message that names the key and
// line, and without echoing a secret.

// hcUnreachableDSN points at a port nobody listens on, so that a
// configuration that wrongly passes makes check fail later, on connecting,
// with another message.
const hcUnreachableDSN = "postgres://lakeside@127.0.0.1:1/shop?connect_timeout=2&sslmode=disable"

// hcSecret stands for a password, key or token; no output may contain it.
const hcSecret = "Sup3rS3cretPW"

// hcConfig writes a configuration with the given sections after source and
// state_dir (and http.listen off unless they set http) into a new
// directory, and returns its path.
func hcConfig(t *testing.T, extra string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("source:\n  dsn: %q\n  tables: [public.stock]\nstate_dir: %s\n", hcUnreachableDSN, filepath.Join(dir, "state"))
	if !strings.Contains("\n"+extra, "\nhttp:") {
		cfg += "http:\n  listen: off\n"
	}
	path := filepath.Join(dir, "lakeside.yaml")
	writeFile(t, path, cfg+extra)
	return path
}

// hcCheck runs lakeside check --config path and returns its output.
func hcCheck(t *testing.T, path string) (stdout, stderr string, code int) {
	t.Helper()
	e := &e2e{t: t}
	return e.lakeside("check", "--config", path)
}

// wantRefused fails unless check exited 1 before reaching PostgreSQL, with
// every text of wants in its error, and no secret in its output.
func wantRefused(t *testing.T, stdout, stderr string, code int, wants ...string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit code %d, want 1; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "✓ configuration") {
		t.Errorf("the configuration was accepted; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	for _, want := range wants {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stdout+stderr, hcSecret) {
		t.Errorf("the output reveals the secret %q; stdout:\n%s\nstderr:\n%s", hcSecret, stdout, stderr)
	}
	if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("the error is more than one line:\n%s", stderr)
	}
}

// watched is the outcome of a command run under watch.
type watched struct {
	stderr    string
	code      int
	exited    bool  // on its own, before the deadline
	peakRSS   int64 // the most resident memory seen, in bytes
	overMem   bool  // killed for using too much memory
	signalled bool  // signal was called
	duration  time.Duration
}

// runWatched runs lakeside with args, calls signal (when not nil) once the
// process has run for a moment or is seen reading, and kills it when it passes maxRSS bytes of
// resident memory or runs for longer than limit. It replaces e2e.lakeside
// where a command that misbehaves would otherwise fill the machine's memory
// or never end.
func runWatched(t *testing.T, limit time.Duration, maxRSS int64, signal func(*os.Process), args ...string) watched {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LAKESIDE_TEST_MAIN=1")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var w watched
	signalled := signal == nil
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
loop:
	for {
		select {
		case <-done:
			w.exited = true
			break loop
		case <-deadline:
			cmd.Process.Kill()
			<-done
			break loop
		case <-tick.C:
			anon, _, err := rss(cmd.Process.Pid)
			if err == nil {
				w.peakRSS = max(w.peakRSS, anon)
				if anon > maxRSS {
					w.overMem = true
					cmd.Process.Kill()
					<-done
					break loop
				}
			}
			// The Go runtime and the signal handlers are set up well
			// within this time, and memory grows only once the load has
			// begun.
			if !signalled && (time.Since(start) > 150*time.Millisecond || anon > 32<<20) {
				signal(cmd.Process)
				signalled = true
			}
		}
	}
	w.signalled = signal != nil && signalled
	w.duration = time.Since(start)
	w.stderr = errb.String()
	w.code = cmd.ProcessState.ExitCode()
	return w
}

// hcMaxRSS is more memory than loading any configuration needs.
const hcMaxRSS = 256 << 20

// TestHardeningConfigNotRegularFile: finding 7, `check --config /dev/zero`
// read without end. A configuration that is not a regular file is refused
// before a byte is read.
func TestHardeningConfigNotRegularFile(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "lakeside.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero is a character device, not a regular file"},
		{fifo, fifo + " is a named pipe, not a regular file"},
		{t.TempDir(), "is a directory, not a regular file"},
	} {
		w := runWatched(t, 10*time.Second, hcMaxRSS, nil, "check", "--config", tc.path)
		switch {
		case w.overMem:
			t.Errorf("check --config %s used more than %d MiB; killed", tc.path, hcMaxRSS>>20)
		case !w.exited:
			t.Errorf("check --config %s did not end in %s; killed", tc.path, w.duration)
		case w.code != 1 || !strings.Contains(w.stderr, tc.want):
			t.Errorf("check --config %s: exit code %d, stderr %q; want 1 and %q", tc.path, w.code, w.stderr, tc.want)
		}
	}
}

// TestHardeningConfigSIGTERMWhileLoading: finding 7, the command ignored
// SIGTERM while it read /dev/zero. A SIGTERM sent while the configuration
// loads ends the command at once, whatever the file is.
func TestHardeningConfigSIGTERMWhileLoading(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "lakeside.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	term := func(p *os.Process) { p.Signal(syscall.SIGTERM) }
	for _, path := range []string{"/dev/zero", fifo} {
		w := runWatched(t, 5*time.Second, hcMaxRSS, term, "check", "--config", path)
		switch {
		case w.overMem && !w.signalled:
			t.Errorf("check --config %s grew past %d MiB before SIGTERM could be sent; killed", path, hcMaxRSS>>20)
		case w.overMem:
			t.Errorf("check --config %s went on reading past %d MiB after SIGTERM; killed", path, hcMaxRSS>>20)
		case !w.exited:
			t.Errorf("check --config %s ignored SIGTERM for %s; killed", path, w.duration)
		case w.code == 0:
			t.Errorf("check --config %s exited 0; stderr %q", path, w.stderr)
		}
	}
}

// TestHardeningConfigSizeLimit: finding 7, a configuration is read whole
// into memory. One of more than 1 MiB is refused from its size, before it
// is read, with the limit in the message.
func TestHardeningConfigSizeLimit(t *testing.T) {
	t.Parallel()
	path := hcConfig(t, "")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A valid configuration, padded with comments past the limit.
	padding := strings.Repeat("# "+strings.Repeat("x", 77)+"\n", (2<<20)/80)
	writeFile(t, path, string(data)+padding)
	want := fmt.Sprintf("%s is %d bytes, larger than the 1 MiB limit", path, len(data)+len(padding))
	w := runWatched(t, 10*time.Second, hcMaxRSS, nil, "check", "--config", path)
	if !w.exited || w.code != 1 || !strings.Contains(w.stderr, want) {
		t.Errorf("check of a 2 MiB configuration: exited %v, code %d, stderr %q; want a refusal naming the 1 MiB limit", w.exited, w.code, w.stderr)
	}

	// The environment file beside it is bounded the same way.
	writeFile(t, path, string(data))
	envPath := filepath.Join(filepath.Dir(path), "environment")
	writeFile(t, envPath, "A=1\n"+padding)
	stdout, stderr, code := hcCheck(t, path)
	wantRefused(t, stdout, stderr, code, fmt.Sprintf("%s is %d bytes, larger than the 1 MiB limit", envPath, len("A=1\n")+len(padding)))
}

// TestHardeningConfigCutsLongValues: finding 7, errors quoted values of any
// length. A value of 100000 characters gives an error of one short line
// that quotes its beginning.
func TestHardeningConfigCutsLongValues(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 100000)
	for _, tc := range []struct{ name, extra, want string }{
		{"slot", "", `:3: source.slot: "xxxx`},
		// YAML limits a plain key to 1024 characters.
		{"unknown key", "log:\n  " + long[:1000] + ": 1\n", `:8: log: unknown key "xxxx`},
		{"duration", "delta:\n  flush_interval: " + long + "\n", `:8: delta.flush_interval: "xxxx`},
		{"site", "replica:\n  url: file:///srv/replica\n  site: a/" + long + "\n", `:9: replica.site: "a/xxxx`},
		{"listen", "http:\n  listen: " + long + "\n", `:6: http.listen: "xxxx`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hcConfig(t, tc.extra)
			if tc.name == "slot" {
				data, _ := os.ReadFile(path)
				writeFile(t, path, strings.Replace(string(data), "  tables:", "  slot: "+long+"\n  tables:", 1))
			}
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, tc.want, `…"`)
			if len(stderr) > 600 {
				t.Errorf("the error is %d bytes long:\n%.600s", len(stderr), stderr)
			}
		})
	}
}

// TestHardeningConfigReplicaURLCredentials: finding 8, credentials in
// replica.url were accepted, ignored, and printed by check, the log and
// status. They are refused, with where to put them instead, and the URL is
// not echoed.
func TestHardeningConfigReplicaURLCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url string }{
		{"key and secret", "s3://AKIAEXAMPLE:" + hcSecret + "@branch-data/lakeside"},
		{"secret only", "s3://:" + hcSecret + "@branch-data/lakeside"},
		{"file url", "file://" + hcSecret + "@/srv/replica"},
		// It does not parse either; the credentials are still not echoed.
		{"malformed", "s3://AKIAEXAMPLE:" + hcSecret + "@branch-data:99x/%zz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hcConfig(t, "replica:\n  site: branch7\n  url: \""+tc.url+"\"\n")
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, path+":9: replica.url: must not hold credentials",
				"replica.access_key_id and replica.secret_access_key", "AWS_SECRET_ACCESS_KEY")
			if strings.Contains(stdout+stderr, "AKIAEXAMPLE") {
				t.Errorf("the output reveals the access key; stderr:\n%s", stderr)
			}
		})
	}
	// A secret in a query string or fragment, which nothing reads, is
	// refused the same way.
	for _, tc := range []struct{ name, url string }{
		{"query", "s3://branch-data/lakeside?secret=" + hcSecret},
		{"empty query", "s3://branch-data/lakeside?"},
		{"fragment", "s3://branch-data/lakeside#" + hcSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hcConfig(t, "replica:\n  site: branch7\n  url: \""+tc.url+"\"\n")
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, path+":9: replica.url: must not have a query string or fragment")
		})
	}
	// Taken from the environment, as the secrets should be, it is refused
	// the same way.
	t.Run("from the environment", func(t *testing.T) {
		path := hcConfig(t, "replica:\n  site: branch7\n  url: ${LAKESIDE_HC_URL}\n")
		writeFile(t, filepath.Join(filepath.Dir(path), "environment"), "LAKESIDE_HC_URL=s3://AKIAEXAMPLE:"+hcSecret+"@branch-data/x\n")
		stdout, stderr, code := hcCheck(t, path)
		wantRefused(t, stdout, stderr, code, path+":9: replica.url: must not hold credentials")
	})
}

// TestHardeningConfigHTTPToken: finding 9, a token of a single space was
// accepted on 0.0.0.0. On an address reachable from the network the token
// must have at least 16 characters besides the whitespace around them; the
// error names http.token at its line and never quotes it.
func TestHardeningConfigHTTPToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, token string }{
		{"one space", `" "`},
		{"whitespace", `"  \t                  "`},
		{"fifteen characters", hcSecret + "15"},
		{"fifteen characters in spaces", `"   ` + hcSecret + `15   "`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hcConfig(t, "http:\n  listen: 0.0.0.0:8080\n  token: "+tc.token+"\n")
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, path+`:7: http.token: is too short for http.listen "0.0.0.0:8080"`, "at least 16 characters")
		})
	}
	// Sixteen characters pass the configuration; check goes on to
	// PostgreSQL, which is not there.
	path := hcConfig(t, "http:\n  listen: 0.0.0.0:8080\n  token: "+hcSecret+"16a\n")
	stdout, stderr, _ := hcCheck(t, path)
	if !strings.Contains(stdout, "✓ configuration") {
		t.Errorf("a 16-character token was refused; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if strings.Contains(stdout+stderr, hcSecret) {
		t.Errorf("the output reveals the token; stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

// TestHardeningConfigEnvironmentFileMode: finding 10, the environment file
// beside the configuration was read whoever could write it. One that is
// group- or world-writable, or owned by a user other than root and the one
// running the command, is refused, saying why and the command that fixes
// it.
func TestHardeningConfigEnvironmentFileMode(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, mode os.FileMode) (path, envPath string) {
		path = hcConfig(t, "replica:\n  url: file:///srv/replica\n  site: ${LAKESIDE_HC_SITE}\n")
		envPath = filepath.Join(filepath.Dir(path), "environment")
		writeFile(t, envPath, "LAKESIDE_HC_SITE=branch7\nAWS_SECRET_ACCESS_KEY="+hcSecret+"\n")
		if err := os.Chmod(envPath, mode); err != nil {
			t.Fatal(err)
		}
		return path, envPath
	}
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{
		{0o666, "is group- and world-writable (mode 0666)"},
		{0o602, "is world-writable (mode 0602)"},
		{0o620, "is group-writable (mode 0620)"},
	} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			path, envPath := setup(t, tc.mode)
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, envPath+" "+tc.want, "run chmod 600 "+envPath)
		})
	}
	t.Run("0640", func(t *testing.T) {
		path, _ := setup(t, 0o640)
		stdout, stderr, _ := hcCheck(t, path)
		if !strings.Contains(stdout, "✓ configuration") {
			t.Errorf("an environment file of mode 0640 was refused; stdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("changing a file's owner needs root")
		}
		path, envPath := setup(t, 0o600)
		if err := os.Chown(envPath, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := hcCheck(t, path)
		wantRefused(t, stdout, stderr, code, envPath+" is owned by uid 4242, neither root nor the user running lakeside", "run chown root "+envPath)
	})
}

// TestHardeningConfigListenPort: finding 13, http.listen with port 99999
// passed check. The port must be a number from 1 to 65535.
func TestHardeningConfigListenPort(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"127.0.0.1:99999", "127.0.0.1:0", "0.0.0.0:65536", "127.0.0.1:-1", "127.0.0.1:http"} {
		t.Run(listen, func(t *testing.T) {
			path := hcConfig(t, "http:\n  listen: "+listen+"\n")
			stdout, stderr, code := hcCheck(t, path)
			wantRefused(t, stdout, stderr, code, fmt.Sprintf("%s:6: http.listen: %q has no valid port (use a port from 1 to 65535", path, listen))
		})
	}
}
