package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/replica"
)

// firstVacuumDelay is how long after the start the agent first vacuums
// (or after VacuumInterval, when shorter).
const firstVacuumDelay = 10 * time.Minute

// VacuumReport is what a vacuum of every table did, as printed by
// `lakeside vacuum`.
type VacuumReport struct {
	// Agent tells that the running agent did the vacuum.
	Agent  bool          `json:"agent"`
	DryRun bool          `json:"dry_run"`
	Tables []TableVacuum `json:"tables"`
	// RemoteDeleted counts the files deleted from the replica right away;
	// the others follow once the replica has the versions that no longer
	// need them.
	RemoteDeleted int    `json:"remote_deleted"`
	RemoteError   string `json:"remote_error,omitempty"`
}

// TableVacuum is the vacuum of one table.
type TableVacuum struct {
	Name string `json:"name"`
	// Version is the table version vacuum looked at; every version from
	// KeptFrom to Version can still be read.
	Version  int64 `json:"version"`
	KeptFrom int64 `json:"kept_from"`
	// Files are the data files deleted (or, in a dry run, that would be),
	// LogFiles the commits and checkpoints older than the log retention
	// (30 days, or longer with a longer vacuum retention), and Bytes their
	// total size.
	Files    int      `json:"files"`
	LogFiles int      `json:"log_files"`
	Bytes    int64    `json:"bytes"`
	Paths    []string `json:"paths,omitempty"`
	// FleetLogFiles counts the commits and checkpoints of the fleet
	// table's log that expired (the fleet layout).
	FleetLogFiles int `json:"fleet_log_files,omitempty"`
	// RemoteOnly counts the files pruned before (gone locally) that the
	// replica deletes now that no version inside the retention needs them.
	RemoteOnly int `json:"remote_only,omitempty"`
	// Pruned are the data files deleted locally only, kept on the replica
	// (delta.local_retention), and PrunedBytes their total size.
	Pruned      int      `json:"pruned,omitempty"`
	PrunedBytes int64    `json:"pruned_bytes,omitempty"`
	PrunedPaths []string `json:"pruned_paths,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// vacuumSettings are the retentions a vacuum of every table applies.
type vacuumSettings struct {
	// retention is delta.vacuum_retention.
	retention time.Duration
	// localRetention is delta.local_retention: zero keeps every file
	// vacuum keeps; otherwise, after the vacuum, the files on the replica
	// that local readers no longer need are pruned (pruneTable).
	localRetention time.Duration
	dryRun         bool
}

// vacuumSettingsOf returns the settings of cfg.
func vacuumSettingsOf(cfg *config.Config, dryRun bool) vacuumSettings {
	return vacuumSettings{retention: cfg.Delta.VacuumRetention, localRetention: cfg.Delta.LocalRetention, dryRun: dryRun}
}

// vacuumTables vacuums every table under tablesDir with the given retention,
// and expires its old log files.
// With a replica (up not nil) a file is deleted only once every version that
// needs it is on the replica, and the files deleted are recorded for the
// replica to delete in turn; with a local retention the files on the
// replica that local readers no longer need are then pruned. A failing
// table does not stop the others; the errors are joined.
func vacuumTables(ctx context.Context, tablesDir string, up *uploader.Uploader, set vacuumSettings) (*VacuumReport, error) {
	retention, dryRun := set.retention, set.dryRun
	tables, err := uploader.DirTables(tablesDir)(ctx)
	if err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	rep := &VacuumReport{DryRun: dryRun, Tables: []TableVacuum{}}
	var errs []error
	for _, t := range tables {
		opts := delta.VacuumOptions{Retention: retention, DryRun: dryRun}
		if up != nil {
			opts.KeepFrom, opts.BeforeDelete = up.VacuumOptions(t.Name)
			if set.localRetention > 0 {
				// Files pruned before: the replica deletes them once
				// this retention would have.
				opts.Absent = func(context.Context) ([]delta.VacuumFile, error) {
					return up.AbsentFiles(t.Name, t.Path)
				}
			}
		}
		tbl := delta.New(t.Path)
		res, err := tbl.Vacuum(ctx, opts)
		tv := TableVacuum{Name: t.Name}
		if res != nil {
			tv.Version, tv.KeptFrom = res.Version, res.KeptFrom
			for _, f := range res.Files {
				if f.Absent {
					tv.RemoteOnly++
					continue
				}
				tv.Files++
				tv.Bytes += f.Size
				tv.Paths = append(tv.Paths, f.Path)
			}
		}
		if err == nil {
			// The log keeps at least as long as the data files.
			opts.Retention = max(delta.DefaultLogRetention, retention)
			var lr *delta.VacuumResult
			if lr, err = tbl.ExpireLog(ctx, opts); lr != nil {
				tv.LogFiles = len(lr.Files)
				tv.Bytes += lr.Bytes
				for _, f := range lr.Files {
					tv.Paths = append(tv.Paths, f.Path)
				}
			}
		}
		if err == nil && up != nil && set.localRetention > 0 {
			err = pruneTable(ctx, tbl, t.Name, up, set, &tv)
		}
		if err == nil && up != nil && !dryRun {
			// In the fleet layout, the fleet table's own log too: any
			// site may, by the same retention.
			tv.FleetLogFiles, err = up.ExpireFleetLog(ctx, t.Name, max(delta.DefaultLogRetention, retention))
		}
		if err != nil {
			tv.Error = err.Error()
			errs = append(errs, fmt.Errorf("table %s: %w", t.Name, err))
		}
		rep.Tables = append(rep.Tables, tv)
	}
	return rep, errors.Join(errs...)
}

// pruneTable deletes the local data files of table that are on the replica
// and that local readers no longer need (delta.local_retention), and adds
// them to tv. The log keeps naming them: the replica holds every version.
//
// A mirror keeps its latest version, whose files the applier reads back to
// merge, and the versions inside the local retention, which the live view's
// time travel reads. A changelog is only appended to: its files go once
// written before the local retention, those of its latest version too, so
// that its local size stays bounded. Only files recorded as uploaded are
// deleted, so with the replica offline nothing new is.
func pruneTable(ctx context.Context, tbl *delta.Table, table string, up *uploader.Uploader, set vacuumSettings, tv *TableVacuum) error {
	res, err := tbl.Prune(ctx, delta.PruneOptions{
		Retention:  set.localRetention,
		KeepLatest: !strings.HasSuffix(table, store.ChangelogSuffix),
		Archived: func(_ context.Context, path string) (bool, error) {
			return up.Uploaded(table, path)
		},
		DryRun: set.dryRun,
	})
	if res != nil {
		tv.Pruned, tv.PrunedBytes = len(res.Files), res.Bytes
		for _, f := range res.Files {
			tv.PrunedPaths = append(tv.PrunedPaths, f.Path)
		}
	}
	return err
}

// Vacuum vacuums the running agent's tables now.
func (a *Agent) Vacuum(ctx context.Context, dryRun bool) (*VacuumReport, error) {
	rep, err := vacuumTables(ctx, a.cfg.Delta.TablesDir, a.up, vacuumSettingsOf(a.cfg, dryRun))
	if rep != nil {
		rep.Agent = true
		a.logVacuum(rep)
		if a.up != nil && !dryRun {
			a.up.Notify() // the remote deletes run with the next pass
		}
	}
	if !dryRun {
		a.vacuumed.add(rep, err, time.Now())
	}
	return rep, err
}

// vacuumTotals adds up the agent's vacuums (dry runs aside) for its
// metrics. It is safe for concurrent use.
type vacuumTotals struct {
	mu sync.Mutex
	n  vacuumCounts
}

// vacuumCounts are the totals of the agent's vacuums.
type vacuumCounts struct {
	// runs counts the vacuums, failures those that failed for at least
	// one table.
	runs, failures int64
	// files, logFiles, pruned and bytes are what the vacuums deleted
	// locally (pruned: data files kept on the replica).
	files, logFiles, pruned, bytes int64
	// lastSuccess is when a vacuum last succeeded for every table.
	lastSuccess time.Time
}

// add counts a vacuum that ended at now with rep (nil when it failed
// before looking at any table) and err.
func (v *vacuumTotals) add(rep *VacuumReport, err error, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n.runs++
	if err != nil {
		v.n.failures++
	} else {
		v.n.lastSuccess = now
	}
	if rep == nil {
		return
	}
	for _, t := range rep.Tables {
		v.n.files += int64(t.Files)
		v.n.logFiles += int64(t.LogFiles)
		v.n.pruned += int64(t.Pruned)
		v.n.bytes += t.Bytes + t.PrunedBytes
	}
}

// counts returns the totals so far.
func (v *vacuumTotals) counts() vacuumCounts {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

func (a *Agent) logVacuum(rep *VacuumReport) {
	for _, t := range rep.Tables {
		if t.Files > 0 || t.Pruned > 0 || t.Error != "" {
			a.log.Info("vacuum", "table", t.Name, "dry_run", rep.DryRun, "files", t.Files, "bytes", t.Bytes,
				"pruned", t.Pruned, "pruned_bytes", t.PrunedBytes, "kept_from_version", t.KeptFrom, "err", t.Error)
		}
	}
}

// runVacuum vacuums the tables every delta.vacuum_interval until ctx is
// done. A failed vacuum is logged and tried again at the next interval.
func (a *Agent) runVacuum(ctx context.Context) error {
	timer := time.NewTimer(min(firstVacuumDelay, a.cfg.Delta.VacuumInterval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if _, err := a.Vacuum(ctx, false); err != nil && ctx.Err() == nil {
			a.log.Warn("vacuum failed; trying again later", "err", err, "next", a.cfg.Delta.VacuumInterval)
		}
		timer.Reset(a.cfg.Delta.VacuumInterval)
	}
}

// vacuumHandler serves POST /vacuum on the control socket: ?dry_run=true
// lists what a vacuum would delete, ?dry_run=false or no query vacuums. A
// query it cannot read is refused (400) before anything is deleted.
func (a *Agent) vacuumHandler(w http.ResponseWriter, r *http.Request) {
	dryRun, err := parseVacuumQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rep, err := a.Vacuum(r.Context(), dryRun)
	if rep == nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep) // per-table errors are in the report
}

// parseVacuumQuery returns the dry_run of a vacuum request's query: false
// when absent, otherwise exactly "true" or "false". A malformed query, any
// other parameter (a misspelt dry_run) or value, or dry_run given twice is an
// error: a dry run must never turn into a vacuum.
func parseVacuumQuery(raw string) (bool, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return false, fmt.Errorf("vacuum query %q: %w", raw, err)
	}
	for key := range q {
		if key != "dry_run" {
			return false, fmt.Errorf("vacuum query %q: unknown parameter %q (only dry_run=true or dry_run=false)", raw, key)
		}
	}
	values, ok := q["dry_run"]
	switch {
	case !ok:
		return false, nil
	case len(values) != 1:
		return false, fmt.Errorf("vacuum query %q: dry_run given %d times", raw, len(values))
	case values[0] == "true":
		return true, nil
	case values[0] == "false":
		return false, nil
	}
	return false, fmt.Errorf("vacuum query %q: dry_run is %q, want true or false", raw, values[0])
}

// ErrAgentNotAnswering is returned (wrapped) by RunVacuum when an agent
// holds the state directory but does not answer on its control socket.
var ErrAgentNotAnswering = errors.New("the running agent does not answer")

// RunVacuum vacuums the tables of the configuration. When an agent runs on
// the state directory, it asks that agent through the control socket (the
// agent holds the state file, where upload progress is kept); otherwise it
// opens the state file itself, vacuums, and, unless dryRun, deletes from the
// replica what is already safe to delete there (an unreachable replica is
// reported, not an error: the agent does it on its next run).
func RunVacuum(ctx context.Context, cfg *config.Config, dryRun bool, log *slog.Logger) (*VacuumReport, error) {
	rep, db, err := askAgentOrOpen[VacuumReport](ctx, cfg, "/vacuum?dry_run="+strconv.FormatBool(dryRun), "vacuum report")
	if rep != nil || err != nil {
		return rep, err
	}
	defer db.Close()
	var up *uploader.Uploader
	if cfg.Replica.URL != "" {
		if up, err = openUploader(cfg, db, log); err != nil {
			return nil, err
		}
	}
	rep, err = vacuumTables(ctx, cfg.Delta.TablesDir, up, vacuumSettingsOf(cfg, dryRun))
	if rep != nil && up != nil && !dryRun {
		n, rerr := up.DeleteRemote(ctx)
		rep.RemoteDeleted = n
		if rerr != nil {
			rep.RemoteError = rerr.Error()
		}
	}
	return rep, err
}

// openUploader returns an uploader for the configured replica on db, for a
// single pass outside a running agent.
func openUploader(cfg *config.Config, db *store.DB, log *slog.Logger) (*uploader.Uploader, error) {
	client, err := replica.Open(cfg.Replica, nil)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	opts := uploader.Options{Client: client, DB: db, Target: cfg.Replica.Target(),
		Tables: uploader.DirTables(cfg.Delta.TablesDir), Logger: log}
	if cfg.Replica.Fleet() {
		// This uploader commits nothing: it only keeps what vacuum
		// must, as the agent's does.
		opts.Fleet = &uploader.FleetOptions{Site: cfg.Replica.Site}
	}
	up, err := uploader.New(opts)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	return up, nil
}

// archiveOf returns where the tables' pruned data files are kept, the
// replica's "<url>/<site>", or "" when nothing is pruned.
func archiveOf(cfg *config.Config) string {
	if cfg.Delta.LocalRetention <= 0 || cfg.Replica.URL == "" {
		return ""
	}
	return cfg.Replica.Target()
}

// tableProperties returns the table properties the applier sets on every
// table: with delta.local_retention, the replica is the archive that other
// engines read and vacuum, so the tables carry the retentions the agent's
// vacuum keeps (delta.vacuum_retention for removed files, the log's
// retention as in vacuumTables), and their own VACUUM keeps the same
// window. Without it nothing is set.
func tableProperties(cfg *config.Config) map[string]string {
	if archiveOf(cfg) == "" {
		return nil
	}
	return map[string]string{
		"delta.deletedFileRetentionDuration": delta.FormatInterval(cfg.Delta.VacuumRetention),
		"delta.logRetentionDuration":         delta.FormatInterval(max(delta.DefaultLogRetention, cfg.Delta.VacuumRetention)),
	}
}

// askAgentOrOpen asks the agent running on cfg.StateDir to do what path
// names (a POST on its control socket, path with its query) and returns
// its report, what being the report's name in errors. When no agent
// answers, it opens the state file instead, for the caller to do the work
// and close it; an agent that holds the file without answering is an
// error (ErrAgentNotAnswering).
func askAgentOrOpen[R any](ctx context.Context, cfg *config.Config, path, what string) (*R, *store.DB, error) {
	sock := filepath.Join(cfg.StateDir, SocketName)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lakeside"+path, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := controlClient(sock, 0).Do(req)
	if err == nil {
		var rep R
		if err := readReply(resp, what, &rep); err != nil {
			return nil, nil, err
		}
		return &rep, nil, nil
	}
	db, err := store.Open(cfg.StateDir, store.Options{LockTimeout: 2 * time.Second})
	if errors.Is(err, store.ErrLocked) {
		return nil, nil, fmt.Errorf("%w: it holds %s but nothing answers on %s; try again once it is up", ErrAgentNotAnswering, cfg.StateDir, sock)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open state: %w", err)
	}
	return nil, db, nil
}
