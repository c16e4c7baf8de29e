package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/applier"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
)

// CompactReport is what a compaction of the tables did, as printed by
// `lakeside compact`.
type CompactReport struct {
	// Agent tells that the running agent did the compaction.
	Agent  bool           `json:"agent"`
	DryRun bool           `json:"dry_run"`
	Tables []TableCompact `json:"tables"`
}

// TableCompact is the compaction of one table: files before and after,
// bins, bytes read and written (see applier.TableCompact).
type TableCompact = applier.TableCompact

// compactOptions returns the compaction options of cfg, for the tables
// named (every table when none) and with the engine of version.
func compactOptions(cfg *config.Config, version string, log *slog.Logger) applier.CompactOptions {
	return applier.CompactOptions{
		TablesDir:      cfg.Delta.TablesDir,
		TargetFileSize: cfg.Delta.TargetFileSize,
		TargetFileRows: cfg.Delta.TargetFileRows,
		MinFiles:       cfg.Delta.CompactMinFiles,
		Write:          delta.WriteOptions{RowGroupRows: cfg.Delta.RowGroupRows, CreatedBy: "lakeside/" + version},
		EngineInfo:     "lakeside/" + version,
		Logger:         log,
	}
}

// Compact compacts the running agent's tables now (table: only that one),
// whatever the small-file threshold; the applier commits between flushes.
func (a *Agent) Compact(ctx context.Context, table string, dryRun bool) (*CompactReport, error) {
	var tables []string
	if table != "" {
		tables = []string{table}
	}
	rep, err := a.compactor.Compact(ctx, tables, dryRun)
	if rep == nil {
		return nil, err
	}
	return &CompactReport{Agent: true, DryRun: rep.DryRun, Tables: rep.Tables}, err
}

// compactHandler serves POST /compact on the control socket: ?table=T
// compacts only that table, ?dry_run=true plans without writing. A query
// it cannot read, or a table that is not one of the tables, is refused
// (400) before anything is written.
func (a *Agent) compactHandler(w http.ResponseWriter, r *http.Request) {
	table, dryRun, err := parseCompactQuery(r.URL.RawQuery)
	if err == nil && table != "" {
		err = checkTableName(r.Context(), a.cfg.Delta.TablesDir, table)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rep, err := a.Compact(r.Context(), table, dryRun)
	if rep == nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep) // per-table errors are in the report
}

// parseCompactQuery returns the table and dry_run of a compaction
// request's query: each at most once, dry_run exactly "true" or "false";
// any other parameter is an error, so that a misspelt dry run never
// writes.
func parseCompactQuery(raw string) (table string, dryRun bool, err error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", false, fmt.Errorf("compact query %q: %w", raw, err)
	}
	for key, values := range q {
		if key != "dry_run" && key != "table" {
			return "", false, fmt.Errorf("compact query %q: unknown parameter %q (only table and dry_run)", raw, key)
		}
		if len(values) != 1 {
			return "", false, fmt.Errorf("compact query %q: %s given %d times", raw, key, len(values))
		}
	}
	if v, ok := q["dry_run"]; ok {
		switch v[0] {
		case "true":
			dryRun = true
		case "false":
		default:
			return "", false, fmt.Errorf("compact query %q: dry_run is %q, want true or false", raw, v[0])
		}
	}
	if v, ok := q["table"]; ok {
		if v[0] == "" {
			return "", false, fmt.Errorf("compact query %q: table is empty", raw)
		}
		table = v[0]
	}
	return table, dryRun, nil
}

// checkTableName fails unless name is the directory name of one of the
// tables under tablesDir; it is looked up in the listing, never used as a
// path.
func checkTableName(ctx context.Context, tablesDir, name string) error {
	tables, err := uploader.DirTables(tablesDir)(ctx)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(tables, func(t uploader.Table) bool { return t.Name == name }) {
		return fmt.Errorf("no table %q in %s (name it as its directory, e.g. public.orders or public.orders_changes)", name, tablesDir)
	}
	return nil
}

// RunCompact compacts the tables of the configuration (table: only that
// one), with any bin, and reports what it did. When an agent runs on the
// state directory, that agent does it (its applier commits between
// flushes); otherwise the command holds the state file, so that no agent
// starts meanwhile, and commits to the tables itself, without the
// bandwidth limit.
func RunCompact(ctx context.Context, cfg *config.Config, table string, dryRun bool, version string, log *slog.Logger) (*CompactReport, error) {
	q := url.Values{"dry_run": {strconv.FormatBool(dryRun)}}
	if table != "" {
		q.Set("table", table)
	}
	rep, db, err := askAgentOrOpen[CompactReport](ctx, cfg, "/compact?"+q.Encode(), "compaction report")
	if rep != nil || err != nil {
		return rep, err
	}
	defer db.Close()
	if table != "" {
		if err := checkTableName(ctx, cfg.Delta.TablesDir, table); err != nil {
			return nil, err
		}
	}
	opts := compactOptions(cfg, version, log)
	opts.MinFiles, opts.DryRun = 0, dryRun
	if table != "" {
		opts.Tables = []string{table}
	}
	done, err := applier.Compact(ctx, opts, nil)
	if done == nil {
		return nil, err
	}
	return &CompactReport{DryRun: done.DryRun, Tables: done.Tables}, err
}
