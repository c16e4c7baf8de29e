package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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
	cfg, err := loadConfig(ctx, c.configPath)
	if err != nil {
		return err
	}
	st, err := agent.ReadStatus(ctx, cfg)
	if err != nil {
		return err
	}
	if c.json {
		return writeJSON(c.stdout, st)
	}
	printStatus(c.stdout, st)
	return nil
}

// printStatus writes the status as a summary for people.
func printStatus(w io.Writer, st *agent.Status) {
	running := "not running (figures from the state file)"
	if st.Running {
		running = "running, capture " + st.State
		if st.ApplyState != "" {
			running += ", " + st.ApplyState
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "agent:\t%s\n", running)
	fmt.Fprintf(tw, "slot:\t%s, confirmed %s\n", st.Slot, st.ConfirmedLSN)
	if st.Running {
		fmt.Fprintf(tw, "slot lag:\t%s of WAL kept by PostgreSQL (server at %s), %.1f s behind\n", agent.FormatBytes(st.LagBytes), st.ServerWALEnd, st.LagSeconds)
	}
	fmt.Fprintf(tw, "queue:\t%d transactions, %s, durable to %s\n", st.Queue.Entries, agent.FormatBytes(st.Queue.Bytes), st.CheckpointLSN)
	if st.AppliedLSN != "" {
		fmt.Fprintf(tw, "applied:\t%s\n", st.AppliedLSN)
	}
	for _, f := range st.ApplyFailures {
		what := f.Table
		if what == "" {
			what = "every table"
		}
		fmt.Fprintf(tw, "apply failing:\t%s since %s, holds the queue to %s: %s\n", what, f.Since.Format(time.RFC3339), f.AppliedLSN, f.Error)
	}
	if u := st.Upload; u != nil {
		online := "offline"
		if u.Online {
			online = "online"
		}
		fmt.Fprintf(tw, "replica:\t%s, %s, backlog %d versions (%s)\n", u.Target, online, u.BacklogVersions, agent.FormatBytes(u.BacklogBytes))
		if u.LastError != "" {
			fmt.Fprintf(tw, "replica error:\t%s\n", u.LastError)
		}
		if u.Stalls > 0 {
			fmt.Fprintf(tw, "replica stalls:\t%d requests cancelled: the replica stopped answering or went too slow\n", u.Stalls)
		}
	}
	for _, b := range st.Backfills {
		fmt.Fprintf(tw, "backfill:\t%s\n", backfillLine(b))
	}
	if st.Running {
		fmt.Fprintf(tw, "live clients:\t%d\n", st.LiveClients)
	}
	if st.LastError != "" {
		fmt.Fprintf(tw, "last error:\t%s\n", st.LastError)
	}
	tw.Flush()
	printCaptured(w, st.Captured)
	if len(st.Tables) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tKIND\tVERSION\tREMOTE\tAPPLIED LSN")
	for _, t := range st.Tables {
		remote := "-"
		if t.RemoteVersion != nil {
			remote = fmt.Sprint(*t.RemoteVersion)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.Name, t.Kind, t.Version, remote, t.AppliedLSN)
	}
	tw.Flush()
	for _, t := range st.Tables {
		if t.RemoteError != "" {
			fmt.Fprintf(w, "replica of %s: %s\n", t.Name, t.RemoteError)
		}
	}
}

// printCaptured writes what is known of the captured source tables: the
// PostgreSQL table each is now, and what happened to it.
func printCaptured(w io.Writer, captured []agent.CapturedStatus) {
	if len(captured) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CAPTURED AS\tOID\tGENERATION\tIN POSTGRESQL\tEVENT")
	for _, c := range captured {
		name := c.PostgresName
		if name == "" {
			name = "-"
		}
		event := c.Event
		if c.EventTime != nil {
			event += " (" + c.EventTime.Format(time.RFC3339) + ")"
		}
		if c.Backfill != "" {
			event += "; its rows are still to be copied (" + c.Backfill + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", c.Table, c.OID, c.Generation, name, event)
	}
	tw.Flush()
}

// backfillLine describes the copy of a table for people.
func backfillLine(b agent.BackfillStatus) string {
	line := fmt.Sprintf("%s (%s) %s, %d rows in %d chunks, since %s", b.Table, b.Reason, b.State, b.RowsCopied, b.Chunks, b.Since.Format(time.RFC3339))
	if b.Restarts > 0 {
		line += fmt.Sprintf(", started over %d times (the table has no key, and transactions changed it while it was copied)", b.Restarts)
	}
	if b.Finished != nil {
		line += fmt.Sprintf(", took %s", b.Finished.Sub(b.Since).Round(time.Second))
	}
	if b.Applying != "" {
		line += "; its Delta tables " + b.Applying
	}
	return line
}
