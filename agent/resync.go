package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"time"

	"github.com/lakeside/lakeside/agent/internal/source"
)

// ResyncReply is the agent's answer to a resync request.
type ResyncReply struct {
	Table string `json:"table"`
	// Since is when the copy was recorded: the backfill of the table in
	// Status.Backfills that began then, or later, is this one.
	Since time.Time `json:"since"`
}

// Resync copies a configured table ("schema.table") again: the changelog
// records a truncate of it, then its rows as PostgreSQL holds them now,
// copied while changes stream (see Status.Backfills).
func (a *Agent) Resync(ctx context.Context, table string) (*ResyncReply, error) {
	since := time.Now().UTC()
	if err := a.src.Resync(ctx, table, source.ReasonResync); err != nil {
		return nil, err
	}
	return &ResyncReply{Table: table, Since: since}, nil
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

// AskResync asks the agent running on stateDir to resync table through the
// control socket; it fails with ErrNoAgent when none answers.
func AskResync(ctx context.Context, stateDir, table string) (*ResyncReply, error) {
	client := controlClient(filepath.Join(stateDir, SocketName), time.Minute)
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://lakeside/resync?"+url.Values{"table": {table}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoAgent, err)
	}
	var rep ResyncReply
	if err := readReply(resp, "resync", &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
