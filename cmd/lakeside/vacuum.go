package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/agent"
)

// vacuumCommand deletes the data files of the Delta tables that no version
// inside the retention window (delta.vacuum_retention) needs. When an agent
// runs, the agent does it (it holds the state file); otherwise the command
// does it itself.
type vacuumCommand struct {
	stdout, stderr io.Writer
	configPath     string
	dryRun         bool
	json           bool
}

func (c *vacuumCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside vacuum", flag.ContinueOnError)
	path := configFlag(fs)
	fs.BoolVar(&c.dryRun, "dry-run", false, "list the files vacuum would delete, delete nothing")
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.configPath = *path
	return nil
}

func (c *vacuumCommand) Run(ctx context.Context) error {
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	rep, err := agent.RunVacuum(ctx, cfg, c.dryRun, newLogger(cfg, cfg.SlogLevel(), c.stderr))
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
	verb := "deleted"
	if rep.DryRun {
		verb = "would delete"
	}
	fmt.Fprintf(c.stdout, "vacuum by %s, retention %s\n", by, cfg.Delta.VacuumRetention)
	for _, t := range rep.Tables {
		fmt.Fprintf(c.stdout, "%s: %s %d files (%s); versions %d to %d stay readable\n",
			t.Name, verb, t.Files, agent.FormatBytes(t.Bytes), t.KeptFrom, t.Version)
		if rep.DryRun {
			for _, p := range t.Paths {
				fmt.Fprintf(c.stdout, "  %s\n", p)
			}
		}
		if t.Pruned > 0 {
			fmt.Fprintf(c.stdout, "  pruned: %s %d files (%s) kept on the replica (delta.local_retention %s)\n",
				verb, t.Pruned, agent.FormatBytes(t.PrunedBytes), cfg.Delta.LocalRetention)
			if rep.DryRun {
				for _, p := range t.PrunedPaths {
					fmt.Fprintf(c.stdout, "  %s\n", p)
				}
			}
		}
		if t.Error != "" {
			fmt.Fprintf(c.stdout, "  error: %s\n", t.Error)
		}
	}
	switch {
	case rep.DryRun || cfg.Replica.URL == "":
	case rep.Agent:
		fmt.Fprintln(c.stdout, "replica: the agent deletes the same files there once the replica has the versions that no longer need them")
	case rep.RemoteError != "":
		fmt.Fprintf(c.stdout, "replica: not reachable (%s); the agent deletes the files there when it runs\n", rep.RemoteError)
	default:
		fmt.Fprintf(c.stdout, "replica: deleted %d files; the rest follow once the replica has the versions that no longer need them\n", rep.RemoteDeleted)
	}
	return err
}
