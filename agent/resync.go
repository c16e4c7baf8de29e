package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lakeside/lakeside/agent/internal/source"
)

// ResyncReply is the agent's answer to a resync request.
type ResyncReply struct {
	Table string `json:"table"`
	// Since is when the copy was recorded: the backfill of the table in
	// Status.Backfills that began then, or later, is this one.
	Since time.Time `json:"since"`
	// Released is set when the table was held back by a quarantined
	// transaction, which no longer holds it.
	Released bool `json:"released,omitempty"`
}

// Resync copies a configured table ("schema.table") again: the changelog
// records a truncate of it, then its rows as PostgreSQL holds them now,
// copied while changes stream (see Status.Backfills). A quarantined
// transaction no longer holds the table back: its changes in it are
// passed over, since the copy follows it in the queue.
func (a *Agent) Resync(ctx context.Context, table string) (*ResyncReply, error) {
	since := time.Now().UTC()
	if err := a.src.Resync(ctx, table, source.ReasonResync); err != nil {
		return nil, err
	}
	rep := &ResyncReply{Table: table, Since: since}
	rep.Released = a.app.Release(table)
	return rep, nil
}

// resyncHandler serves POST /resync?table=schema.table.
func (a *Agent) resyncHandler(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(q) != 1 || len(q["table"]) != 1 {
		http.Error(w, "resync: want exactly one table=schema.table", http.StatusBadRequest)
		return
	}
	rep, err := a.Resync(r.Context(), q["table"][0])
	switch {
	case errors.Is(err, source.ErrNotCapturing):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

// ResyncProgress is the agent's answer to a request that follows a resync:
// the copy, or nil while it has not begun.
type ResyncProgress struct {
	Backfill *BackfillStatus `json:"backfill"`
}

// maxFollowWait is the longest a request following a resync waits.
const maxFollowWait = time.Minute

// followResyncHandler serves GET /resync?table=schema.table&since=T&wait=D:
// the copy of the table that began at T or later, once it is done, or as
// it is after D (at most maxFollowWait), whichever comes first.
func (a *Agent) followResyncHandler(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(q) != 3 || len(q["table"]) != 1 || len(q["since"]) != 1 || len(q["wait"]) != 1 {
		http.Error(w, "follow resync: want table=schema.table, since=RFC 3339 time and wait=duration", http.StatusBadRequest)
		return
	}
	since, err := time.Parse(time.RFC3339Nano, q["since"][0])
	if err != nil {
		http.Error(w, "follow resync: since: "+err.Error(), http.StatusBadRequest)
		return
	}
	wait, err := time.ParseDuration(q["wait"][0])
	if err != nil || wait < 0 {
		http.Error(w, fmt.Sprintf("follow resync: wait: not a duration of zero or more: %q", q["wait"][0]), http.StatusBadRequest)
		return
	}
	b := awaitBackfill(r.Context(), a.src.BackfillsChanged, a.src.Backfills, q["table"][0], since, min(wait, maxFollowWait))
	if b != nil {
		b.Applying = a.app.Waiting()[b.Table]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ResyncProgress{Backfill: b})
}

// awaitBackfill returns the copy of table that began at since or later
// once list reports it done, or as list reports it when wait has passed or
// ctx is done; nil when there is none. changed returns a channel closed at
// list's next change.
func awaitBackfill(ctx context.Context, changed func() <-chan struct{}, list func() []source.BackfillStatus,
	table string, since time.Time, wait time.Duration) *BackfillStatus {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		next := changed()
		var found *BackfillStatus
		for _, b := range list() {
			if b.Table == table && !b.Since.Before(since) {
				st := backfillStatus(b)
				found = &st
			}
		}
		if found != nil && found.State == BackfillDone {
			return found
		}
		select {
		case <-next:
		case <-timer.C:
			return found
		case <-ctx.Done():
			return found
		}
	}
}

// FollowResync asks the agent running on stateDir how the copy that rep
// recorded goes, waiting up to wait for it to end; the reply's Backfill is
// nil while the copy has not begun. It fails with ErrNoAgent when none
// answers.
func FollowResync(ctx context.Context, stateDir string, rep *ResyncReply, wait time.Duration) (*ResyncProgress, error) {
	q := url.Values{"table": {rep.Table}, "since": {rep.Since.Format(time.RFC3339Nano)}, "wait": {wait.String()}}
	return askAgent[ResyncProgress](ctx, stateDir, wait+time.Minute, http.MethodGet, "/resync?"+q.Encode(), "follow resync")
}

// AskResync asks the agent running on stateDir to resync table through the
// control socket; it fails with ErrNoAgent when none answers.
func AskResync(ctx context.Context, stateDir, table string) (*ResyncReply, error) {
	return askAgent[ResyncReply](ctx, stateDir, time.Minute, http.MethodPost, "/resync?"+url.Values{"table": {table}}.Encode(), "resync")
}
