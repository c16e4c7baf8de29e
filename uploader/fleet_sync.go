package uploader

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// fleetState is a table's publisher in the fleet layout.
type fleetState struct {
	table    *FleetTable
	lastSync time.Time
}

// syncFleet commits the new local versions of t into its fleet table, at
// most once per FleetOptions.Interval, and records the local version the
// fleet holds as the table's remote version (for status and the backlog).
func (u *Uploader) syncFleet(ctx context.Context, t Table) error {
	st, l, err := u.startPass(ctx, t)
	if err != nil {
		return err
	}
	fs := u.fleet[t.Name]
	if fs == nil {
		kind := "mirror"
		if strings.HasSuffix(t.Name, "_changes") {
			kind = "changelog"
		}
		f := u.opts.Fleet
		fs = &fleetState{table: NewFleetTable(u.client, t.Path, kind, filepath.Join(f.ScratchDir, t.Name),
			fleet.Options{Site: f.Site, RunID: f.RunID, PastRuns: f.PastRuns, EngineInfo: f.EngineInfo, Now: u.opts.Now})}
		fs.table.name = t.Name
		fs.table.Limit, fs.table.Uploaded = u.limit, func(n int64) { u.bytes.Add(n) }
		u.fleet[t.Name] = fs
	}
	if l.latest <= st.RemoteVersion || u.opts.Now().Sub(fs.lastSync) < u.opts.Fleet.Interval {
		return nil
	}
	fs.lastSync = u.opts.Now()
	held, err := fs.table.Sync(ctx)
	if errors.Is(err, fleet.ErrConflict) {
		st.Stopped = err.Error()
		if serr := u.saveState(t.Name, st); serr != nil {
			return errors.Join(err, serr)
		}
		u.log.Error("fleet table stopped at this site", "table", t.Name, "err", err)
		return fmt.Errorf("%w: %w", ErrTableStopped, err)
	}
	if err != nil {
		return err
	}
	if held > st.RemoteVersion {
		st.RemoteVersion, st.LastSuccess = held, u.opts.Now()
		if err := u.saveState(t.Name, st); err != nil {
			return err
		}
		u.versions.Add(1)
	}
	return nil
}

// ExpireFleetLog expires the log of table's fleet table past retention
// (fleet.Log.ExpireLog) and returns how many objects it deleted; it does
// nothing in the site layout, whose replica's log follows the local one.
// An unreachable replica is not an error here: the next vacuum tries
// again.
func (u *Uploader) ExpireFleetLog(ctx context.Context, table string, retention time.Duration) (int, error) {
	if u.opts.Fleet == nil {
		return 0, nil
	}
	n, err := fleet.NewLog(FleetStore(u.client), table).ExpireLog(ctx, u.opts.Now(), retention, fleet.DefaultCheckpointInterval)
	if err != nil && isRemote(err) {
		u.log.Warn("fleet log expiry failed; the next vacuum tries again", "table", table, "err", err)
		return n, nil
	}
	if n > 0 {
		u.log.Info("expired the fleet table's log", "table", table, "objects", n)
	}
	return n, err
}

// fleetSiteDir returns the directory of the site's files in a fleet table.
func (u *Uploader) fleetSiteDir() string {
	site := u.opts.Fleet.Site
	return delta.PartitionDir([]string{fleet.SiteColumn}, map[string]*string{fleet.SiteColumn: &site}) + "/"
}

// RecordFleetRun records run as a run of target in db and returns the runs
// recorded before it, for FleetOptions.
func RecordFleetRun(db *store.DB, target, run string) (past []string, err error) {
	err = db.Update(func(w *store.Writer) error {
		if past, err = w.FleetRuns(target); err != nil {
			return err
		}
		return w.AddFleetRun(target, run)
	})
	if err != nil {
		return nil, fmt.Errorf("record fleet run: %w", err)
	}
	return past, nil
}
