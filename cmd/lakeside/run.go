package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/lakeside/lakeside/agent"
)

// The agent's garbage collection settings (see Run).
const (
	gcPercent   = 400
	memoryLimit = 128 << 20
)

// runCommand runs the agent.
type runCommand struct {
	stderr     io.Writer
	configPath string
}

func (c *runCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside run", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.configPath = *path
	return nil
}

func (c *runCommand) Run(ctx context.Context) error {
	cfg, err := loadConfig(c.configPath)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.SlogLevel())
	log := newLogger(cfg, level, c.stderr).With("version", Version)
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		// Capture allocates for every change and keeps little of it: a
		// collection each time the heap doubles stalls the reading of the
		// stream (measured on 2 cores: collecting at 5x captures 10-20%
		// more single-row transactions a second). The memory limit keeps
		// the heap bounded all the same (a 2M-row transaction captured
		// and applied peaks at 125 MB anonymous memory). GOGC or
		// GOMEMLIMIT in the environment overrides both.
		debug.SetGCPercent(gcPercent)
		debug.SetMemoryLimit(memoryLimit)
	}
	a := agent.New(cfg, log, Version)
	if os.Getenv("GOMAXPROCS") == "" {
		// The agent shares a small machine with PostgreSQL, whose walsender
		// is the other half of every capture: while capture drains a
		// backlog, the agent leaves it CPUs of its own (measured on 2
		// cores, one scheduler thread captures about a fifth faster than
		// two). Once capture has caught up, the agent uses them all: a
		// flush writes its tables side by side. GOMAXPROCS in the
		// environment overrides this.
		a.ShareCPUs(runtime.NumCPU()/2, runtime.NumCPU())
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloadCtx, stopReloads := context.WithCancel(ctx)
	defer stopReloads()
	go func() {
		for {
			select {
			case <-reloadCtx.Done():
				return
			case <-hup:
				c.reload(a, level, log)
			}
		}
	}()
	return a.Run(ctx)
}

// reload re-reads the configuration file on SIGHUP, takes on what can
// change while running (log level, upload bandwidth limit, HTTP token) and
// says which changed keys need a restart. A file that does not load is
// refused whole and the running configuration stays.
func (c *runCommand) reload(a *agent.Agent, level *slog.LevelVar, log *slog.Logger) {
	cfg, err := loadConfig(c.configPath)
	if err != nil {
		log.Error("reload refused; the running configuration stays", "err", err)
		return
	}
	changes, err := a.Reload(cfg)
	if err != nil {
		log.Error("reload refused; the running configuration stays", "err", err)
		return
	}
	level.Set(cfg.SlogLevel())
	applied, restart := []string{}, []string{}
	for _, ch := range changes {
		if ch.Live {
			applied = append(applied, ch.Key)
		} else {
			restart = append(restart, ch.Key)
		}
	}
	log.Info("configuration reloaded", "applied", applied)
	if len(restart) > 0 {
		log.Warn("changed keys take effect only after a restart (systemctl restart lakeside)", "keys", restart)
	}
}
