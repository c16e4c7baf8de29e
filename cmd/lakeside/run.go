package main

import (
	"context"
	"flag"
	"io"
	"os"
	"runtime"

	"github.com/lakeside/lakeside/agent"
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
	cfg, err := agent.LoadConfig(c.configPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg, c.stderr).With("version", Version)
	if os.Getenv("GOMAXPROCS") == "" {
		// The agent shares a small machine with PostgreSQL, whose walsender
		// is the other half of every capture: leave it CPUs of its own.
		// Measured on 2 cores, one scheduler thread captures about a fifth
		// faster than two. GOMAXPROCS in the environment overrides this.
		runtime.GOMAXPROCS(max(1, runtime.NumCPU()/2))
	}
	return agent.New(cfg, log, Version).Run(ctx)
}
