//go:build unix

package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// watchdog is the process that stops a cluster started with
// Options.StopWithProcess once this process is gone. Its standard input is
// a pipe whose write end only this process holds (close-on-exec keeps it
// from the processes this one starts), so the pipe ends when this process
// does, however it ends.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // the pipe's write end
}

// watchdogScript is the watchdog, run by sh as the server user with the
// paths of pg_ctl, the data directory and the cluster directory as its
// arguments. A line on its standard input says the cluster was stopped;
// the input ending without one says this process is gone, and the script
// stops the server in immediate mode and removes the cluster directory.
const watchdogScript = `read -r line && exit 0
"$1" -D "$2" -m immediate -w -t 60 stop >/dev/null 2>&1
rm -rf "$3"
`

// startWatchdog starts the cluster's watchdog.
func (c *Cluster) startWatchdog() (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	defer r.Close()
	cmd := c.run.commandPath(context.Background(), "/bin/sh", "-c", watchdogScript, "pgcluster-watchdog",
		filepath.Join(c.run.binDir, "pg_ctl"), c.dataDir, c.dir)
	cmd.Dir = "/"
	cmd.Stdin = r
	// A session of its own, as the server's: the SIGINT of a Ctrl-C,
	// sent to the terminal's process group, does not end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// release tells the watchdog that the cluster is stopped and removed, and
// waits for it to exit.
func (w *watchdog) release() {
	_, _ = w.pipe.WriteString("stopped\n")
	_ = w.pipe.Close()
	_ = w.cmd.Wait()
}
