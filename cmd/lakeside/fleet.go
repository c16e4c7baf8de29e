package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/fleet"
	"github.com/lakeside/lakeside/uploader/replica"
)

// fleetUsage is the usage of `lakeside fleet`, which has one subcommand.
const fleetUsage = "usage: lakeside fleet status [--config FILE | --replica URL --table schema.table ...] [--json]"

// fleetCommand is `lakeside fleet status`, the central operator's view of
// a fleet (replica.layout: fleet): per fleet table, every site with its
// last commit, its source position and how far behind the newest site it
// is, the laggards first. It reads the tables' logs and writes nothing,
// so it runs anywhere with read access to the bucket: on a site, with
// its configuration, or elsewhere with --replica and the credentials in
// the environment.
type fleetCommand struct {
	stdout     io.Writer
	configPath string
	configSet  bool
	replicaURL string
	tables     []config.TableName // from --table
	json       bool
}

func (c *fleetCommand) ParseFlags(args []string) error {
	if len(args) == 0 || args[0] != "status" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(c.stdout, fleetUsage)
			return flag.ErrHelp
		}
		return errors.New(fleetUsage)
	}
	fs := flag.NewFlagSet("lakeside fleet status", flag.ContinueOnError)
	path := configFlag(fs)
	fs.StringVar(&c.replicaURL, "replica", "", "read the fleet at `URL`, its replica.url (s3://bucket/prefix or file:///path), instead of --config; "+
		"S3's endpoint, region and credentials come from AWS_ENDPOINT_URL_S3 (or AWS_ENDPOINT_URL), AWS_REGION, "+
		"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	fs.Func("table", "a source `table` (schema.table) whose mirror and changelog to show; repeatable; "+
		"required with --replica, else the configuration's source.tables", func(s string) error {
		t, err := config.ParseTableName(s)
		if err != nil {
			return err
		}
		c.tables = append(c.tables, t)
		return nil
	})
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (name a table with --table)", fs.Arg(0))
	}
	c.configPath = *path
	fs.Visit(func(f *flag.Flag) { c.configSet = c.configSet || f.Name == "config" })
	switch {
	case c.replicaURL != "" && c.configSet:
		return errors.New("give --config or --replica, not both")
	case c.replicaURL != "" && len(c.tables) == 0:
		return errors.New("--replica needs --table schema.table, once per table: a replica cannot be listed, so the tables must be named")
	}
	return nil
}

func (c *fleetCommand) Run(ctx context.Context) error {
	client, url, tables, err := c.open(ctx)
	if err != nil {
		return err
	}
	st := uploader.FleetStore(client)
	rep := fleetReport{Replica: url, ReadAt: time.Now().UTC()}
	failed := 0
	for _, t := range tables {
		ts, err := fleet.ReadStatus(ctx, st, t)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			failed++
			rep.Tables = append(rep.Tables, fleetTableReport{Table: t, Version: -1, Checkpoint: -1, Error: err.Error(), Sites: []fleetSiteReport{}})
			continue
		}
		rep.Tables = append(rep.Tables, newFleetTableReport(ts, rep.ReadAt))
	}
	if c.json {
		if err := writeJSON(c.stdout, rep); err != nil {
			return err
		}
	} else {
		printFleetReport(c.stdout, rep)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d fleet tables did not read", failed, len(tables))
	}
	return nil
}

// open returns the client rooted at the fleet's replica URL, the URL, and
// the directory names of the fleet tables to read: a mirror and a
// changelog per source table.
func (c *fleetCommand) open(ctx context.Context) (uploader.ReplicaClient, string, []string, error) {
	var rc uploader.Config
	names := c.tables
	if c.replicaURL != "" {
		// The site names no directory in the fleet layout: any valid
		// name does, for the check of the configuration.
		rc = uploader.Config{URL: c.replicaURL, Site: "fleet-status", Layout: uploader.LayoutFleet}
	} else {
		cfg, err := loadConfig(ctx, c.configPath)
		if err != nil {
			return nil, "", nil, err
		}
		switch {
		case cfg.Replica.URL == "":
			return nil, "", nil, fmt.Errorf("%s sets no replica.url", c.configPath)
		case !cfg.Replica.Fleet():
			return nil, "", nil, fmt.Errorf("%s sets replica.layout %q, not %q: lakeside status shows a site's own replica", c.configPath, cfg.Replica.Layout, uploader.LayoutFleet)
		}
		rc = cfg.Replica
		if len(names) == 0 {
			names = cfg.Source.Tables
		}
	}
	client, err := replica.OpenRoot(rc, nil)
	if err != nil {
		return nil, "", nil, err
	}
	var tables []string
	for _, t := range names {
		dir := store.TableDirName(t.Schema, t.Name)
		tables = append(tables, dir, dir+store.ChangelogSuffix)
	}
	return client, rc.URL, tables, nil
}

// fleetReport is what `lakeside fleet status` prints, as JSON with --json.
type fleetReport struct {
	// Replica is the fleet's replica URL (it holds no credentials).
	Replica string `json:"replica"`
	// ReadAt is when the command read the logs; ages count from it.
	ReadAt time.Time          `json:"read_at"`
	Tables []fleetTableReport `json:"tables"`
}

// fleetTableReport is one fleet table.
type fleetTableReport struct {
	// Table is the table's directory name under the replica URL.
	Table string `json:"table"`
	// Exists is false for a table no site created yet (no log).
	Exists bool `json:"exists"`
	// Version is the newest version of the log; Checkpoint the version of
	// the checkpoint it was read from. -1: none.
	Version    int64 `json:"version"`
	Checkpoint int64 `json:"checkpoint"`
	// Error says why the table did not read.
	Error string `json:"error,omitempty"`
	// Sites are the laggards first.
	Sites []fleetSiteReport `json:"sites"`
}

// fleetSiteReport is one site's copy of a local table in a fleet table.
type fleetSiteReport struct {
	Site string `json:"site"`
	// Kind is "mirror" or "changelog".
	Kind string `json:"kind"`
	// LastCommit is when the site last committed data, by its clock; null
	// when the log does not say.
	LastCommit *time.Time `json:"last_commit"`
	// AgeSeconds is how long before ReadAt that was.
	AgeSeconds float64 `json:"age_seconds"`
	// LSN is the end LSN of the last source transaction the fleet holds
	// of the site; null when no commit of it carried one.
	LSN *string `json:"lsn"`
	// LocalVersion is the local Delta version the fleet holds, of the
	// local table LocalTableID.
	LocalVersion int64  `json:"local_version"`
	LocalTableID string `json:"local_table_id"`
	// FleetVersion is the version of the site's last data commit; null
	// when it is at or before the checkpoint, which does not say.
	FleetVersion *int64 `json:"fleet_version"`
	// BehindSeconds is how much older the site's last commit is than the
	// newest site's.
	BehindSeconds float64 `json:"behind_seconds"`
}

// newFleetTableReport converts what fleet.ReadStatus read.
func newFleetTableReport(ts *fleet.TableStatus, now time.Time) fleetTableReport {
	out := fleetTableReport{Table: ts.Table, Exists: ts.Version >= 0, Version: ts.Version, Checkpoint: ts.Checkpoint, Sites: []fleetSiteReport{}}
	for _, s := range ts.Sites {
		r := fleetSiteReport{Site: s.Site, Kind: s.Kind, LocalVersion: s.LocalVersion, LocalTableID: s.LocalID, BehindSeconds: s.Behind.Seconds()}
		if !s.LastCommit.IsZero() {
			at := s.LastCommit.UTC()
			r.LastCommit, r.AgeSeconds = &at, now.Sub(at).Seconds()
		}
		if s.LSN > 0 {
			lsn := store.LSN(s.LSN).String()
			r.LSN = &lsn
		}
		if s.FleetVersion >= 0 {
			v := s.FleetVersion
			r.FleetVersion = &v
		}
		out.Sites = append(out.Sites, r)
	}
	return out
}

// printFleetReport writes the report for people: a block per table.
func printFleetReport(w io.Writer, rep fleetReport) {
	fmt.Fprintf(w, "fleet %s, read %s\n", rep.Replica, rep.ReadAt.Format(time.RFC3339))
	for _, t := range rep.Tables {
		fmt.Fprintln(w)
		switch {
		case t.Error != "":
			fmt.Fprintf(w, "%s: does not read: %s\n", t.Table, t.Error)
			continue
		case !t.Exists:
			fmt.Fprintf(w, "%s: no fleet table (no site has created it)\n", t.Table)
			continue
		case t.Checkpoint >= 0:
			fmt.Fprintf(w, "%s: version %d, read from checkpoint %d\n", t.Table, t.Version, t.Checkpoint)
		default:
			fmt.Fprintf(w, "%s: version %d\n", t.Table, t.Version)
		}
		if len(t.Sites) == 0 {
			fmt.Fprintln(w, "no site has committed data yet")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SITE\tKIND\tLAST COMMIT\tAGE\tSOURCE LSN\tLOCAL VERSION\tFLEET VERSION\tBEHIND")
		for _, s := range t.Sites {
			last, age, lsn, fv := "-", "-", "-", "-"
			if s.LastCommit != nil {
				last, age = s.LastCommit.Format("2006-01-02T15:04:05.000Z07:00"), seconds(s.AgeSeconds).Round(time.Second).String()
			}
			if s.LSN != nil {
				lsn = *s.LSN
			}
			if s.FleetVersion != nil {
				fv = fmt.Sprint(*s.FleetVersion)
			} else if t.Checkpoint >= 0 {
				fv = fmt.Sprintf("<= %d", t.Checkpoint)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Site, s.Kind, last, age, lsn, s.LocalVersion, fv,
				seconds(s.BehindSeconds).Round(time.Millisecond))
		}
		tw.Flush()
	}
}

// seconds converts a figure of the report back to a duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
