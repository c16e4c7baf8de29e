package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/source"
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
	cfg, err := agent.LoadConfig(c.configPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "✓ configuration %s\n", c.configPath)
	scfg := cfg.SourceConfig(nil)
	conn, err := scfg.Connect(ctx)
	if err != nil {
		fmt.Fprintf(c.stdout, "✗ connect to PostgreSQL: %v\n    fix: check source.dsn, that the server runs, and pg_hba.conf\n", err)
		return errors.New("checks failed")
	}
	defer conn.Close(context.WithoutCancel(ctx))
	fmt.Fprintln(c.stdout, "✓ connect to PostgreSQL")
	checks, err := source.Preflight(ctx, conn, scfg)
	if err != nil {
		return err
	}
	bad := 0
	for _, ch := range checks {
		fmt.Fprintln(c.stdout, ch.String())
		if !ch.OK {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d checks failed", bad)
	}
	return nil
}
