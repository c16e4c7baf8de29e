package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// TableStatus is where every site stands in one fleet table, as the
// table's log says (ReadStatus).
type TableStatus struct {
	// Table is the table's directory name.
	Table string
	// Version is the newest version of the log; -1: the table has no log.
	Version int64
	// Checkpoint is the version of the checkpoint the log was read from;
	// -1: it was read from version 0.
	Checkpoint int64
	// Sites are the sites' copies of their local tables, one per site and
	// kind, the laggards first: the oldest last commit first.
	Sites []SiteStatus
}

// SiteStatus is where one site's copy of a local table stands in a fleet
// table: its newest progress txn, and its newest source position.
type SiteStatus struct {
	Site string
	// Kind is "mirror" or "changelog".
	Kind string
	// LocalID is the local table's id. A site that started its table
	// over (a resync) has older ids too; only the newest is shown.
	LocalID string
	// LastCommit is when the site made its last data commit, by its own
	// clock (the txn's lastUpdated); zero when the log does not say.
	LastCommit time.Time
	// LocalVersion is the local version the fleet holds the table up to.
	LocalVersion int64
	// LSN is the PostgreSQL end LSN of the last source transaction the
	// fleet holds of the site; 0 when no commit of it carried one
	// (PostgreSQL never ends a transaction at 0).
	LSN int64
	// FleetVersion is the version of the site's last data commit; -1 when
	// it is at or before Checkpoint, which does not say which.
	FleetVersion int64
	// Behind is how much older LastCommit is than the newest site's.
	Behind time.Duration
}

// siteKey identifies a row of TableStatus.Sites.
type siteKey struct{ site, kind string }

// ReadStatus reads the log of the fleet table named table, without
// writing anything: the checkpoint _last_checkpoint names, staged under
// os.TempDir() while it is read, and the commits after it; or, when there
// is none or it does not read, the log from version 0. A table without a
// log is no error: its status has Version -1 and no sites.
func ReadStatus(ctx context.Context, store Store, table string) (*TableStatus, error) {
	l := NewLog(store, table)
	st := &TableStatus{Table: table, Version: -1, Checkpoint: -1}
	sites := map[siteKey]*SiteStatus{}
	lc, err := l.LastCheckpoint(ctx)
	if err != nil && !errors.Is(err, delta.ErrCorruptLog) {
		return nil, fmt.Errorf("fleet table %s: %w", table, err)
	}
	known := int64(-1)
	var cpErr error
	if lc != nil {
		known = lc.Version
		cpErr = l.readCheckpoint(ctx, lc, os.TempDir(), func(acts []delta.Action) error {
			takeStatus(sites, -1, acts)
			return nil
		})
		switch {
		case cpErr == nil:
			st.Checkpoint = lc.Version
		case ctx.Err() != nil:
			return nil, fmt.Errorf("fleet table %s: %w", table, ctx.Err())
		default:
			clear(sites) // read from version 0 instead
		}
	}
	head, err := l.latestFrom(ctx, known)
	if err != nil {
		return nil, fmt.Errorf("fleet table %s: %w", table, err)
	}
	for v := st.Checkpoint + 1; v <= head; v++ {
		acts, err := l.Read(ctx, v)
		if err != nil {
			if cpErr != nil {
				return nil, fmt.Errorf("fleet table %s: %v, the checkpoint _last_checkpoint names; the log from version 0 does not read either: %w", table, cpErr, err)
			}
			return nil, fmt.Errorf("fleet table %s: %w", table, err)
		}
		takeStatus(sites, v, acts)
	}
	st.Version = head
	var newest time.Time
	for _, s := range sites {
		st.Sites = append(st.Sites, *s)
		if s.LastCommit.After(newest) {
			newest = s.LastCommit
		}
	}
	for i := range st.Sites {
		if s := &st.Sites[i]; !s.LastCommit.IsZero() {
			s.Behind = newest.Sub(s.LastCommit)
		}
	}
	slices.SortFunc(st.Sites, func(a, b SiteStatus) int {
		return cmp.Or(a.LastCommit.Compare(b.LastCommit), cmp.Compare(a.Site, b.Site), cmp.Compare(a.Kind, b.Kind))
	})
	return st, nil
}

// takeStatus takes into sites the txn actions of the sites in acts:
// those of version v, or of a checkpoint when v is -1. A commit read in
// order replaces what came before it; a checkpoint, which holds every
// appId's newest txn in no order, keeps of a site's several local tables
// the one it committed last.
func takeStatus(sites map[siteKey]*SiteStatus, v int64, acts []delta.Action) {
	var stamp int64 // the commit's timestamp, for a txn without lastUpdated
	for _, a := range acts {
		if ci, ok := a.(*delta.CommitInfo); ok {
			stamp = ci.Timestamp
		}
	}
	row := func(site, kind string) *SiteStatus {
		k := siteKey{site, kind}
		if sites[k] == nil {
			sites[k] = &SiteStatus{Site: site, Kind: kind, LocalVersion: -1, FleetVersion: -1}
		}
		return sites[k]
	}
	for _, a := range acts {
		t, ok := a.(*delta.Txn)
		if !ok {
			continue
		}
		if site, _, kind, ok := parsePositionAppID(t.AppID); ok {
			row(site, kind).LSN = t.Version
			continue
		}
		site, _, kind, localID, ok := parseProgressAppID(t.AppID)
		if !ok {
			continue
		}
		var at time.Time
		switch {
		case t.LastUpdated != nil:
			at = time.UnixMilli(*t.LastUpdated).UTC()
		case v >= 0 && stamp > 0:
			at = time.UnixMilli(stamp).UTC()
		}
		s := row(site, kind)
		if v < 0 && s.LocalID != "" && at.Before(s.LastCommit) {
			continue
		}
		s.LocalID, s.LocalVersion, s.LastCommit, s.FleetVersion = localID, t.Version, at, v
	}
}
