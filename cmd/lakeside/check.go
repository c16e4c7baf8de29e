package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/agent"
)

// checkCommand runs the preflight checks and nothing else.
type checkCommand struct {
	stdout     io.Writer
	configPath string
}

func (c *checkCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside check", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.configPath = *path
	return nil
}

func (c *checkCommand) Run(ctx context.Context) error {
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "✓ configuration %s\n", c.configPath)
	checks, err := agent.CheckPostgres(ctx, cfg)
	if err != nil {
		return err
	}
	checks = append(checks, agent.CheckStateDir(cfg)...)
	checks = append(checks, agent.CheckReplica(ctx, cfg)...)
	bad := 0
	for _, ch := range checks {
		fmt.Fprintln(c.stdout, ch.String())
		if !ch.OK {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d checks failed", bad, len(checks)+1)
	}
	return nil
}
