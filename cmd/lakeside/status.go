package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/agent"
)

// statusCommand prints the agent's positions and queue.
type statusCommand struct {
	stdout     io.Writer
	configPath string
	json       bool
}

func (c *statusCommand) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("lakeside status", flag.ContinueOnError)
	path := configFlag(fs)
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.configPath = *path
	return nil
}

func (c *statusCommand) Run(ctx context.Context) error {
	cfg, err := agent.LoadConfig(c.configPath)
	if err != nil {
		return err
	}
	st, err := agent.ReadStatus(ctx, cfg)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	running := "not running"
	if st.Running {
		running = "running"
	}
	fmt.Fprintf(c.stdout, "agent:       %s (%s)\n", running, st.State)
	fmt.Fprintf(c.stdout, "slot:        %s\n", st.Slot)
	fmt.Fprintf(c.stdout, "confirmed:   %s\n", st.ConfirmedLSN)
	fmt.Fprintf(c.stdout, "checkpoint:  %s\n", st.CheckpointLSN)
	if st.Running {
		fmt.Fprintf(c.stdout, "server WAL:  %s (lag %d bytes)\n", st.ServerWALEnd, st.LagBytes)
	}
	fmt.Fprintf(c.stdout, "queue:       %d transactions, %d bytes\n", st.Queue.Entries, st.Queue.Bytes)
	if st.LastError != "" {
		fmt.Fprintf(c.stdout, "last error:  %s\n", st.LastError)
	}
	return nil
}
