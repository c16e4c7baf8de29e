package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/internal/tuning"
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
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(cfg.SlogLevel())
	log := newLogger(cfg, level, c.stderr).With("version", Version)
	off, err := tuning.Parse(os.Getenv(tuning.Variable))
	if err != nil {
		return err
	}
	if !off.GC {
		setGC()
	}
	a := agent.New(cfg, log, Version)
	a.TurnOff(off)
	if !off.Threads && os.Getenv("GOMAXPROCS") == "" {
		// The agent shares a small machine with PostgreSQL, whose walsender
		// is the other half of every capture: while capture drains a
		// backlog, the agent leaves it CPUs of its own (measured on 2
		// cores, one scheduler thread captures about a fifth faster than
		// two). Once capture has caught up, the agent uses them all: a
		// flush writes its tables side by side. GOMAXPROCS in the
		// environment overrides this (agent/tuning_threads.go).
		a.ShareCPUs(runtime.NumCPU()/2, runtime.NumCPU())
	}
	if off != (tuning.Off{}) {
		log.Info("performance tricks turned off", "variable", tuning.Variable, "off", os.Getenv(tuning.Variable))
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
				c.reload(reloadCtx, a, level, log)
			}
		}
	}()
	return a.Run(ctx)
}

// reload re-reads the configuration file on SIGHUP, takes on what can
// change while running (log level, upload bandwidth limit, HTTP token) and
// says which changed keys need a restart. A file that does not load is
// refused whole and the running configuration stays.
func (c *runCommand) reload(ctx context.Context, a *agent.Agent, level *slog.LevelVar, log *slog.Logger) {
	cfg, err := loadConfig(ctx, c.configPath)
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
