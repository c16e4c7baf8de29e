package main

import (
	"context"
	"flag"
	"io"

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
	return agent.New(cfg, log).Run(ctx)
}
