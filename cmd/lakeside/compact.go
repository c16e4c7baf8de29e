package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/agent"
)

// compactCommand merges the small data files of the Delta tables now
// (OPTIMIZE), whatever the small-file threshold. When an agent runs, the
// agent does it (its applier commits between flushes); otherwise the
// command does it itself.
type compactCommand struct {
	stdout, stderr io.Writer
	configPath     string
	table          string
	dryRun         bool
	json           bool
}

func (c *compactCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside compact", flag.ContinueOnError)
	path := configFlag(fs)
	fs.StringVar(&c.table, "table", "", "compact only this table, named as its directory (public.orders, public.orders_changes)")
	fs.BoolVar(&c.dryRun, "dry-run", false, "plan the bins and print them, write nothing")
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (name a table with --table)", fs.Arg(0))
	}
	c.configPath = *path
	return nil
}

func (c *compactCommand) Run(ctx context.Context) error {
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	rep, err := agent.RunCompact(ctx, cfg, c.table, c.dryRun, Version, newLogger(cfg, cfg.SlogLevel(), c.stderr))
	if rep == nil {
		return err
	}
	if c.json {
		if jerr := writeJSON(c.stdout, rep); jerr != nil {
			return jerr
		}
		return err
	}
	by := doneBy(rep.Agent)
	verb := "merged"
	if rep.DryRun {
		verb = "would merge"
	}
	fmt.Fprintf(c.stdout, "compaction by %s, target file size %s\n", by, agent.FormatBytes(cfg.Delta.TargetFileSize))
	for _, t := range rep.Tables {
		fmt.Fprintf(c.stdout, "%s: %s %d files into %d (%d bins); files %d -> %d, small files %d -> %d; read %s, wrote %s\n",
			t.Name, verb, t.BinFiles, t.Bins, t.Bins, t.FilesBefore, t.FilesAfter, t.SmallBefore, t.SmallAfter,
			agent.FormatBytes(t.BytesRead), agent.FormatBytes(t.BytesWritten))
		if t.Dropped > 0 {
			fmt.Fprintf(c.stdout, "  %d bins left for later: a flush changed their files meanwhile\n", t.Dropped)
		}
		if t.Error != "" {
			fmt.Fprintf(c.stdout, "  error: %s\n", t.Error)
		}
	}
	return err
}
