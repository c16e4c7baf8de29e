// Command lakeside is the Lakeside agent: it captures committed changes from
// PostgreSQL into a crash-safe local queue, builds Delta Lake tables from
// them, replicates the tables to S3 or a directory, and serves a live view.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/lakeside/lakeside/agent/config"
)

// Version is set at build time from git describe.
var Version = "dev"

// command is one subcommand.
type command interface {
	ParseFlags(args []string) error
	Run(ctx context.Context) error
}

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the command line and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	// What the commands print is escaped for the terminal (terminal.go);
	// the agent's log escapes what it writes itself.
	logOut := stderr
	tout, terr := &terminalWriter{w: stdout}, &terminalWriter{w: stderr}
	defer tout.flush()
	defer terr.flush()
	stdout, stderr = tout, terr
	var cmd command
	switch args[0] {
	case "run":
		cmd = &runCommand{stderr: logOut}
	case "check":
		cmd = &checkCommand{stdout: stdout}
	case "status":
		cmd = &statusCommand{stdout: stdout}
	case "vacuum":
		cmd = &vacuumCommand{stdout: stdout, stderr: stderr}
	case "compact":
		cmd = &compactCommand{stdout: stdout, stderr: stderr}
	case "resync":
		cmd = &resyncCommand{stdout: stdout}
	case "fleet":
		cmd = &fleetCommand{stdout: stdout}
	case "demo":
		cmd = &demoCommand{stdout: stdout, stderr: stderr}
	case "version":
		cmd = &versionCommand{stdout: stdout}
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lakeside: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.ParseFlags(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "lakeside %s: %v\n", args[0], err)
		return 2
	}
	if err := cmd.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "lakeside %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Lakeside captures PostgreSQL changes into Delta Lake tables, replicates them
to S3 or a directory, and serves a live view.

Usage:
  lakeside run     --config FILE   run the agent
  lakeside check   --config FILE   check PostgreSQL, state_dir and the replica, and exit
  lakeside status  --config FILE   summarise capture, queue, tables and replica (--json)
  lakeside vacuum  --config FILE   delete data files past the retention (--dry-run, --json)
  lakeside compact --config FILE   merge small data files now (--table T, --dry-run, --json)
  lakeside resync  --config FILE TABLE
                                   copy a table again (truncate, then its rows) while
                                   changes stream; prints the progress until done
  lakeside fleet status [--config FILE | --replica URL --table T ...]
                                   every site's last commit and source position in the
                                   fleet tables (replica.layout: fleet), laggards first (--json)
  lakeside demo                    run on a throwaway PostgreSQL with a sample workload
  lakeside version                 print the version
`)
}

// newLogger builds the logger the configuration asks for, at level.
func newLogger(cfg *config.Config, level slog.Leveler, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// configFlag registers --config on fs.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", config.DefaultPath, "configuration `file`")
}

// writeJSON writes v as indented JSON, the form of the commands' --json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// doneBy says who did the work of a report: the running agent, or the
// command itself.
func doneBy(byAgent bool) string {
	if byAgent {
		return "the running agent"
	}
	return "this command (no agent is running)"
}
