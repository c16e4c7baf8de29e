package main

import (
	"context"
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
	cfg, err := loadConfig(c.configPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "✓ configuration %s\n", c.configPath)
	checks, err := c.postgres(ctx, cfg)
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

// postgres runs the capture preflight: the connection, then the server's
// settings, the role and the tables.
func (c *checkCommand) postgres(ctx context.Context, cfg *agent.Config) ([]agent.Check, error) {
	scfg := cfg.SourceConfig(nil)
	conn, err := scfg.Connect(ctx)
	if err != nil {
		return []agent.Check{{Name: "connect to PostgreSQL", Problem: err.Error(),
			Fix: "check source.dsn, that the server runs, and pg_hba.conf"}}, nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	checks, err := source.Preflight(ctx, conn, scfg)
	if err != nil {
		return nil, err
	}
	return append([]agent.Check{{Name: "connect to PostgreSQL", OK: true}}, checks...), nil
}
