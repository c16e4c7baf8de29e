package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// serverUser is the operating system account the server runs as when this
// process is root, because initdb and postgres refuse to run as root.
const serverUser = "postgres"

// runner runs PostgreSQL binaries, dropping privileges to serverUser through
// runuser when the current process is root.
type runner struct {
	binDir  string
	workDir string
	runuser string // path of runuser; empty when not root
	uid     int    // owner for files the server must write; -1 when not root
	gid     int
}

// newRunner prepares a runner for binDir. When running as root it looks up
// the serverUser account and the runuser binary.
func newRunner(binDir string) (*runner, error) {
	r := &runner{binDir: binDir, uid: -1, gid: -1}
	if os.Geteuid() != 0 {
		return r, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs a %q user to own the cluster: %w", serverUser, err)
	}
	if r.uid, err = strconv.Atoi(u.Uid); err != nil {
		return nil, fmt.Errorf("parse uid of %q: %w", serverUser, err)
	}
	if r.gid, err = strconv.Atoi(u.Gid); err != nil {
		return nil, fmt.Errorf("parse gid of %q: %w", serverUser, err)
	}
	r.runuser, err = exec.LookPath("runuser")
	if err != nil {
		for _, p := range []string{"/usr/sbin/runuser", "/sbin/runuser"} {
			if _, serr := os.Stat(p); serr == nil {
				r.runuser, err = p, nil
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("running as root needs runuser: %w", err)
		}
	}
	return r, nil
}

// asRoot reports whether commands are run through runuser.
func (r *runner) asRoot() bool { return r.runuser != "" }

// chown hands path to the server user when running as root.
func (r *runner) chown(path string) error {
	if !r.asRoot() {
		return nil
	}
	if err := os.Chown(path, r.uid, r.gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	return nil
}

// command builds the exec.Cmd for the PostgreSQL binary name.
func (r *runner) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return r.commandPath(ctx, filepath.Join(r.binDir, name), args...)
}

// commandPath builds the exec.Cmd for the program at path, run as the
// server user.
func (r *runner) commandPath(ctx context.Context, path string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if r.asRoot() {
		cmd = exec.CommandContext(ctx, r.runuser, append([]string{"-u", serverUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = r.workDir
	cmd.Env = serverEnv()
	// pg_ctl start leaves the postmaster running; it redirects the
	// postmaster's output to the log file, but never wait forever on pipes.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs the PostgreSQL binary name and returns its combined output. On
// failure the error carries the tail of that output.
func (r *runner) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := r.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = errors.Join(err, ctxErr)
		}
		return out.String(), &cmdError{name: name, err: err, output: tailLines(out.String(), 20)}
	}
	return out.String(), nil
}

// cmdError is a failed command together with the tail of its output.
type cmdError struct {
	name   string
	err    error
	output string
}

func (e *cmdError) Error() string {
	if e.output == "" {
		return e.name + ": " + e.err.Error()
	}
	return e.name + ": " + e.err.Error() + ": " + e.output
}

func (e *cmdError) Unwrap() error { return e.err }

// exitCode returns the exit status carried by err, or -1 if it has none.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// serverEnv is the environment for PostgreSQL binaries: the current one
// without libpq variables (PGDATA, PGPORT, ...) that could redirect them.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// tailLines returns the last n non-empty-trailing lines of s.
func tailLines(s string, n int) string {
	s = strings.TrimRight(s, "\n")
	if s == "" || n <= 0 {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
