package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
)

// resyncCommand asks the running agent to copy a table again: the
// changelog records a truncate of the table, then its rows as they are
// now, copied while changes keep streaming. It prints the copy's progress
// until it is done.
type resyncCommand struct {
	stdout     io.Writer
	configPath string
	table      string
	// every is how often a line of the progress is printed: each request
	// to the agent waits that long for the copy to end.
	every time.Duration
}

func (c *resyncCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside resync", flag.ContinueOnError)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one table, as schema.table")
	}
	if _, err := config.ParseTableName(fs.Arg(0)); err != nil {
		return err
	}
	c.configPath, c.table = *path, fs.Arg(0)
	if c.every == 0 {
		c.every = time.Second
	}
	return nil
}

func (c *resyncCommand) Run(ctx context.Context) error {
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	rep, err := agent.AskResync(ctx, cfg.StateDir, c.table)
	if errors.Is(err, agent.ErrNoAgent) {
		return fmt.Errorf("%w: a resync needs the running agent (start it, then run this again)", err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "resync of %s recorded: the table is truncated and copied again while changes stream\n", rep.Table)
	if rep.Released {
		fmt.Fprintf(c.stdout, "the quarantined transaction no longer holds %s back: its changes in it are passed over, the copy brings its rows\n", rep.Table)
	}
	last := ""
	for {
		// The agent answers once the copy is done, or after c.every.
		p, err := agent.FollowResync(ctx, cfg.StateDir, rep, c.every)
		if ctx.Err() != nil {
			return fmt.Errorf("stopped following the resync (it goes on in the agent; see lakeside status): %w", ctx.Err())
		}
		if err != nil {
			return fmt.Errorf("follow the resync: %w (it goes on in the agent; see lakeside status)", err)
		}
		if p.Backfill == nil {
			continue
		}
		if line := backfillLine(*p.Backfill); line != last {
			fmt.Fprintln(c.stdout, line)
			last = line
		}
		if p.Backfill.State == agent.BackfillDone {
			if p.Backfill.Applying != "" {
				fmt.Fprintln(c.stdout, "the copy is queued; the table's Delta tables catch up with it next (see lakeside status)")
			}
			return nil
		}
	}
}
