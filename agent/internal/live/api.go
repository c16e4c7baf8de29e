package live

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

const (
	defaultRowLimit = 100
	maxRowLimit     = 10000
)

// readiness is the answer of /readyz: "ready", or "not ready" and why.
type readiness struct {
	Reason *string `json:"reason,omitempty"`
	Status string  `json:"status"`
}

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	if err := s.agent.Ready(); err != nil {
		reason := err.Error()
		writeJSON(w, http.StatusServiceUnavailable, readiness{Status: "not ready", Reason: &reason})
		return
	}
	writeJSON(w, http.StatusOK, readiness{Status: "ready"})
}

func (s *Server) serveStatus(w http.ResponseWriter, _ *http.Request) {
	st, err := s.agent.Status()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// tableListing is one entry of GET /api/v1/tables.
type tableListing struct {
	TableInfo
	Versions tableVersions `json:"versions"`
}

// tableVersions are the latest versions of a table's local Delta tables,
// null for one not made yet.
type tableVersions struct {
	Changelog *int64 `json:"changelog"`
	Mirror    *int64 `json:"mirror"`
}

// tablesList is the answer of GET /api/v1/tables.
type tablesList struct {
	Tables []tableListing `json:"tables"`
}

func (s *Server) serveTables(w http.ResponseWriter, r *http.Request) {
	infos := s.hub.TableInfos()
	out := make([]tableListing, len(infos))
	for i, ti := range infos {
		out[i] = tableListing{TableInfo: ti, Versions: tableVersions{
			Mirror:    s.deltaVersion(r, ti.dir),
			Changelog: s.deltaVersion(r, ti.dir+store.ChangelogSuffix),
		}}
	}
	writeJSON(w, http.StatusOK, tablesList{Tables: out})
}

// deltaVersion returns the latest version of the local Delta table in the
// directory dir, or nil.
func (s *Server) deltaVersion(r *http.Request, dir string) *int64 {
	if s.cfg.TablesDir == "" {
		return nil
	}
	t, err := delta.Open(r.Context(), filepath.Join(s.cfg.TablesDir, dir))
	if err != nil {
		return nil
	}
	v, err := t.LatestVersion(r.Context())
	if err != nil {
		return nil
	}
	return &v
}

// travelTo says which version of a mirror a request reads; the zero value
// reads the latest.
type travelTo struct {
	// version, when byVersion, is the version asked for.
	version   int64
	byVersion bool
	// asOf, when byTime, asks for the latest version committed at or
	// before it.
	asOf   time.Time
	byTime bool
}

// set reports whether at asks for a version other than the latest.
func (at travelTo) set() bool {
	return at.byVersion || at.byTime
}

// timeTravel reads ?version= and ?as_of=; neither reads the latest.
func timeTravel(r *http.Request) (travelTo, error) {
	q := r.URL.Query()
	if v := q.Get("version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return travelTo{}, fmt.Errorf("version must be a non-negative integer, not %q", cut(v))
		}
		if q.Get("as_of") != "" {
			return travelTo{}, errors.New("give version or as_of, not both")
		}
		return travelTo{version: n, byVersion: true}, nil
	}
	if v := q.Get("as_of"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return travelTo{}, fmt.Errorf("as_of must be an RFC 3339 time, not %q", cut(v))
		}
		return travelTo{asOf: t, byTime: true}, nil
	}
	return travelTo{}, nil
}

// cut shortens a client's text for an error message.
func cut(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// serveRows answers a page of a table's rows in key order: up to ?limit=
// of them after the cursor ?after=, and the cursor of the next page.
func (s *Server) serveRows(w http.ResponseWriter, r *http.Request) {
	table := r.PathValue("table")
	limit := defaultRowLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > maxRowLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", maxRowLimit))
			return
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	to, err := timeTravel(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	err = s.hub.withRows(r.Context(), table, to, func(src rowSource) error {
		page, err := readPage(r.Context(), s.hub.types, src, after, limit)
		if err != nil {
			return err
		}
		page.Table = table
		writeJSON(w, http.StatusOK, page)
		return nil
	})
	if err != nil {
		s.writeLookupError(w, err)
	}
}

// serveRow answers the row of a table whose key the path gives.
func (s *Server) serveRow(w http.ResponseWriter, r *http.Request) {
	table, key := r.PathValue("table"), r.PathValue("key")
	to, err := timeTravel(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var row Row
	var found bool
	err = s.hub.withRows(r.Context(), table, to, func(src rowSource) (err error) {
		row, found, err = findRow(r.Context(), s.hub.types, src, key)
		return err
	})
	if err != nil {
		s.writeLookupError(w, err)
		return
	}
	if !found {
		writeError(w, http.StatusNotFound, "no row with key "+key+" in "+table)
		return
	}
	writeJSON(w, http.StatusOK, row)
}

// historyEntry is one Delta version of a mirror.
type historyEntry struct {
	Version   int64          `json:"version"`
	Timestamp string         `json:"timestamp"`
	Operation string         `json:"operation"`
	Metrics   map[string]any `json:"metrics,omitempty"`
	LSNRange  any            `json:"lsn_range,omitempty"`
}

// historyPage is the answer of GET /history: versions of a mirror, newest
// first, and the version to continue before, if older ones remain.
type historyPage struct {
	History    []historyEntry `json:"history"`
	NextBefore *int64         `json:"next_before,omitempty"`
	Table      string         `json:"table"`
}

// The versions one /history request reads at most.
const (
	defaultHistoryLimit = 100
	maxHistoryLimit     = 1000
)

// serveHistory lists a mirror's versions, newest first: up to ?limit= of
// them before ?before= (exclusive), and the version to continue before.
func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request) {
	table := r.PathValue("table")
	rel := s.hub.relation(table)
	if rel == nil {
		s.writeLookupError(w, s.hub.known(table))
		return
	}
	q := r.URL.Query()
	limit := defaultHistoryLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > maxHistoryLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", maxHistoryLimit))
			return
		}
		limit = n
	}
	if s.cfg.TablesDir == "" {
		writeError(w, http.StatusNotFound, "no Delta mirror of "+table+" yet")
		return
	}
	t, err := delta.Open(r.Context(), filepath.Join(s.cfg.TablesDir, rel.DirName()))
	if err != nil {
		writeError(w, http.StatusNotFound, "no Delta mirror of "+table+" yet")
		return
	}
	latest, err := t.LatestVersion(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	before := latest + 1
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("before must be a non-negative integer, not %q", cut(v)))
			return
		}
		before = min(n, latest+1)
	}
	out := []historyEntry{}
	v := before - 1
	for ; v >= 0 && len(out) < limit; v-- {
		if err := r.Context().Err(); err != nil {
			return
		}
		actions, err := t.ReadCommit(r.Context(), v)
		if err != nil {
			break // expired: so are the versions before it
		}
		e := historyEntry{Version: v}
		for _, a := range actions {
			if ci, ok := a.(*delta.CommitInfo); ok {
				e.Timestamp = time.UnixMilli(ci.Timestamp).UTC().Format(time.RFC3339Nano)
				e.Operation = ci.Operation
				e.Metrics = ci.OperationMetrics
				for _, k := range []string{"lsnRange", "lsn_range", "lakesideLsnRange"} {
					if lr, ok := ci.Extra[k]; ok {
						e.LSNRange = lr
					}
				}
			}
		}
		out = append(out, e)
	}
	resp := historyPage{Table: table, History: out}
	if v >= 0 && len(out) == limit {
		resp.NextBefore = &out[len(out)-1].Version
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) writeLookupError(w http.ResponseWriter, err error) {
	var pruned *prunedError
	switch {
	case errors.As(err, &pruned):
		// Gone for good here: the version lives on in the replica.
		writeError(w, http.StatusGone, err.Error())
	case errors.Is(err, errUnknownTable):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errNotCaptured):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, delta.ErrVersionNotFound), errors.Is(err, errNoMirror):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errBadKey):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		s.log.Warn("live view: request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}
