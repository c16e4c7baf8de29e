package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/applier"
	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
)

// Status is the object printed by `lakeside status --json` and served by the
// control socket.
type Status struct {
	// Running tells whether an agent answered; otherwise the figures come
	// from the state file alone.
	Running bool `json:"running"`
	// State is the source's state: starting, snapshot, streaming,
	// disconnected or stopped.
	State string `json:"state"`
	// ApplyState is the applier's state while an agent runs: "applying",
	// or ApplyFailing while a table (or every table) cannot be applied;
	// ApplyFailures then says which, why and since when.
	ApplyState    string         `json:"apply_state,omitempty"`
	ApplyFailures []ApplyFailure `json:"apply_failures,omitempty"`
	Slot          string         `json:"slot"`
	// ConfirmedLSN is the flush position acknowledged to PostgreSQL (when
	// no agent runs: the durable checkpoint, which the agent acknowledges
	// on a clean stop).
	ConfirmedLSN string `json:"confirmed_lsn"`
	// CheckpointLSN is the position durable in the queue.
	CheckpointLSN string `json:"checkpoint_lsn"`
	ReceivedLSN   string `json:"received_lsn,omitempty"`
	ServerWALEnd  string `json:"server_wal_end,omitempty"`
	// LagBytes is the server's WAL end minus the confirmed position.
	LagBytes int64 `json:"lag_bytes"`
	// LagSeconds is how long ago the newest captured transaction committed,
	// while the agent is behind the server (zero when caught up).
	LagSeconds float64       `json:"lag_seconds"`
	Queue      QueueStatus   `json:"queue"`
	AppliedLSN string        `json:"applied_lsn,omitempty"`
	Tables     []TableStatus `json:"tables"`
	// Changes counts the row changes captured since the agent started,
	// the snapshot's rows included; the live page charts its rate.
	Changes int64 `json:"changes"`
	// Captured describes the captured source tables: what each is
	// captured as, which PostgreSQL table (OID and generation) that is,
	// and what last happened to it.
	Captured []CapturedStatus `json:"captured,omitempty"`
	// Upload describes replication to the remote, when configured.
	Upload *UploadStatus `json:"upload,omitempty"`
	// LiveClients counts the live view's stream clients.
	LiveClients int    `json:"live_clients"`
	LastError   string `json:"last_error,omitempty"`
	// Backfills are the copies of tables' existing rows pending, running
	// or finished since the agent started (when no agent runs: the
	// unfinished ones the state file records).
	Backfills []BackfillStatus `json:"backfills,omitempty"`
}

// Backfill states.
const (
	BackfillPending = "pending"
	BackfillRunning = "running"
	BackfillDone    = "done"
)

// BackfillStatus describes the copy of one table's existing rows while
// changes stream: a table configured after the first start, or resynced.
type BackfillStatus struct {
	Table string `json:"table"`
	// Reason is why it is copied: added, resync, re-created.
	Reason string `json:"reason"`
	// State is BackfillPending, BackfillRunning or BackfillDone.
	State      string `json:"state"`
	RowsCopied int64  `json:"rows_copied"`
	Chunks     int64  `json:"chunks"`
	// Since is when the copy began; Finished when it ended.
	Since    time.Time  `json:"since"`
	Finished *time.Time `json:"finished,omitempty"`
	// Restarts counts the times the copy of a table without a key
	// started over because a transaction changed the table while it was
	// copied.
	Restarts int64 `json:"restarts,omitempty"`
	// Applying is set while the table's Delta tables are behind the
	// others': "waiting for the copy", or "catching up" once it is queued.
	Applying string `json:"applying,omitempty"`
}

// backfillStatus converts the source's account of a copy.
func backfillStatus(b source.BackfillStatus) BackfillStatus {
	out := BackfillStatus{Table: b.Table, Reason: b.Reason, State: BackfillPending, RowsCopied: b.Rows, Chunks: b.Chunks, Since: b.Since.UTC(),
		Restarts: b.Restarts}
	switch {
	case b.Done:
		out.State = BackfillDone
		f := b.Finished.UTC()
		out.Finished = &f
	case b.Running:
		out.State = BackfillRunning
	}
	return out
}

// ApplyFailing is the ApplyState of an applier that cannot apply a table.
const ApplyFailing = "apply failing"

// ApplyFailure is what the applier cannot apply: one source table, or
// every table when Table is empty. Its changes stay queued.
type ApplyFailure struct {
	Table string    `json:"table,omitempty"`
	Error string    `json:"error"`
	Since time.Time `json:"since"`
	// AppliedLSN is how far the table holds the queue.
	AppliedLSN string `json:"applied_lsn"`
}

// applyFailures converts the applier's failures.
func applyFailures(fs []applier.Failure) []ApplyFailure {
	var out []ApplyFailure
	for _, f := range fs {
		out = append(out, ApplyFailure{Table: f.Table, Error: f.Err.Error(), Since: f.Since.UTC(), AppliedLSN: f.Applied.String()})
	}
	return out
}

// UploadStatus summarises replication to the remote.
type UploadStatus struct {
	Target          string `json:"target"`
	Online          bool   `json:"online"`
	BacklogVersions int64  `json:"backlog_versions"`
	BacklogBytes    int64  `json:"backlog_bytes"`
	Requests        int64  `json:"requests"`
	Errors          int64  `json:"errors"`
	// Stalls counts the errors that were stalls: requests cancelled
	// because nothing of them moved for a while.
	Stalls        int64  `json:"stalls,omitempty"`
	Versions      int64  `json:"versions"`
	BytesUploaded int64  `json:"bytes_uploaded"`
	LastError     string `json:"last_error,omitempty"`
	// OfflineSince is when the replica became unreachable (unset while
	// online); LastUpload is when a version of any table was last
	// confirmed on the replica (unset before the first).
	OfflineSince *time.Time `json:"offline_since,omitempty"`
	LastUpload   *time.Time `json:"last_upload,omitempty"`
}

// QueueStatus summarises the queue.
type QueueStatus struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// TableStatus describes one Delta table.
type TableStatus struct {
	Name          string `json:"name"`
	Kind          string `json:"kind"`
	Path          string `json:"path"`
	Version       int64  `json:"version"`
	AppliedLSN    string `json:"applied_lsn"`
	RemoteVersion *int64 `json:"remote_version"`
	// RemoteError says why the table's replication is stopped or what its
	// last attempt failed with.
	RemoteError string `json:"remote_error,omitempty"`
}

// CapturedStatus describes one captured source table.
type CapturedStatus struct {
	// Table is the name the table is captured as, which its Delta tables
	// have: the configured name it was first captured under.
	Table string `json:"table"`
	// Configured is its entry in source.tables, and PostgresName what
	// PostgreSQL calls it now (empty while no table of its OID exists),
	// as the running agent last saw.
	Configured   string `json:"configured,omitempty"`
	PostgresName string `json:"postgres_name,omitempty"`
	// OID is the PostgreSQL table captured; Generation counts from 1, up
	// by one each time the table was dropped and created again.
	OID        uint32 `json:"oid"`
	Generation uint64 `json:"generation"`
	// Event says what the running agent last saw happen to the table
	// (renamed, dropped, re-created), and when.
	Event     string     `json:"event,omitempty"`
	EventTime *time.Time `json:"event_time,omitempty"`
	// Backfill, when set, is why the table's rows are to be copied and
	// the copy has not been asked for yet.
	Backfill string `json:"backfill,omitempty"`
}

// stateStatus fills the parts of the status that the state file holds.
func stateStatus(r *store.Reader, st *Status) error {
	cp, err := r.Checkpoint()
	if err != nil {
		return err
	}
	qs, err := r.QueueStats()
	if err != nil {
		return err
	}
	applied, err := r.Applied()
	if err != nil {
		return err
	}
	st.CheckpointLSN = cp.String()
	st.AppliedLSN = applied.String()
	st.Queue = QueueStatus{Entries: qs.Transactions, Bytes: qs.Bytes}
	if !st.Running {
		recs, err := r.Backfills()
		if err != nil {
			return err
		}
		for _, oid := range slices.Sorted(maps.Keys(recs)) {
			if b := recs[oid]; !b.Done {
				st.Backfills = append(st.Backfills, backfillStatus(source.BackfillStatus{Table: b.Table, Reason: b.Reason,
					Rows: b.Rows, Chunks: b.Chunks, Since: b.Started}))
			}
		}
	}
	if st.Tables == nil {
		st.Tables = []TableStatus{}
	}
	ids, err := r.TableIdentities()
	if err != nil {
		return err
	}
	for _, id := range ids {
		cur := id.Current()
		st.Captured = append(st.Captured, CapturedStatus{Table: id.Table, OID: cur.OID, Generation: cur.Generation, Backfill: cur.Backfill})
	}
	return nil
}

// captureStatus adds what the running source knows of the captured tables
// to what the state file says.
func captureStatus(st *Status, tables []source.TableStatus) {
	for _, t := range tables {
		i := slices.IndexFunc(st.Captured, func(c CapturedStatus) bool { return c.Table == t.Table })
		if i < 0 {
			st.Captured = append(st.Captured, CapturedStatus{Table: t.Table})
			i = len(st.Captured) - 1
		}
		c := &st.Captured[i]
		c.Configured, c.PostgresName, c.Event = t.Configured, t.PostgresName, t.Event
		if c.OID == 0 {
			c.OID, c.Generation = t.OID, t.Generation
		}
		if !t.EventTime.IsZero() {
			at := t.EventTime.UTC()
			c.EventTime = &at
		}
	}
}

// Status reports on the running agent.
func (a *Agent) Status() (*Status, error) {
	src := a.src.Status()
	st := &Status{
		Running:      true,
		State:        src.State,
		Slot:         a.cfg.Source.Slot,
		ConfirmedLSN: src.ConfirmedLSN.String(),
		ReceivedLSN:  src.ReceivedLSN.String(),
		ServerWALEnd: src.ServerWALEnd.String(),
		LastError:    src.LastError,
		LiveClients:  a.hub.Clients(),
		ApplyState:   "applying",
		Changes:      src.Changes,
	}
	waits := a.app.Waiting()
	for _, b := range a.src.Backfills() {
		bs := backfillStatus(b)
		bs.Applying = waits[b.Table]
		st.Backfills = append(st.Backfills, bs)
	}
	if st.ApplyFailures = applyFailures(a.app.Failures()); st.ApplyFailures != nil {
		st.ApplyState = ApplyFailing
	}
	if src.ServerWALEnd > src.ConfirmedLSN {
		st.LagBytes = int64(src.ServerWALEnd - src.ConfirmedLSN)
		if !src.LastCommitTime.IsZero() {
			st.LagSeconds = max(0, time.Since(src.LastCommitTime).Seconds())
		}
	}
	if err := a.db.View(func(r *store.Reader) error { return stateStatus(r, st) }); err != nil {
		return nil, err
	}
	captureStatus(st, a.src.Tables())
	remote := map[string]uploader.TableStatus{}
	if a.up != nil {
		us := a.up.Status()
		st.Upload = &UploadStatus{Target: a.cfg.Replica.Target(), Online: us.Online, Requests: us.Requests, Errors: us.Failures, Stalls: us.Stalls,
			Versions: us.Versions, BytesUploaded: us.BytesUploaded, LastError: us.LastError}
		if !us.Online && !us.OfflineSince.IsZero() {
			at := us.OfflineSince.UTC()
			st.Upload.OfflineSince = &at
		}
		for _, t := range us.Tables {
			remote[t.Name] = t
			st.Upload.BacklogVersions += t.BacklogVersions
			st.Upload.BacklogBytes += t.BacklogBytes
			if !t.LastSuccess.IsZero() && (st.Upload.LastUpload == nil || t.LastSuccess.After(*st.Upload.LastUpload)) {
				at := t.LastSuccess.UTC()
				st.Upload.LastUpload = &at
			}
		}
	}
	for _, t := range a.app.Tables() {
		ts := TableStatus{Name: t.Name, Kind: t.Kind, Path: t.Path, Version: t.Version, AppliedLSN: t.AppliedLSN.String()}
		if r, ok := remote[t.Name]; ok {
			ts.RemoteVersion = &r.RemoteVersion
			ts.RemoteError = r.Stopped
			if ts.RemoteError == "" {
				ts.RemoteError = r.LastError
			}
		}
		st.Tables = append(st.Tables, ts)
	}
	return st, nil
}

// ErrNoAgent means no agent answers on the control socket.
var ErrNoAgent = errors.New("no agent answers on the control socket")

// AskStatus asks the agent running on stateDir for its status through the
// control socket only; it fails at once with ErrNoAgent when none answers
// (none runs, or one is still starting).
func AskStatus(ctx context.Context, stateDir string) (*Status, error) {
	return askAgent[Status](ctx, stateDir, 5*time.Second, http.MethodGet, "/status", "status")
}

// ReadStatus asks the agent running on stateDir for its status through the
// control socket, or, when none answers, reads the state file. An agent
// that holds the state file is asked again once the wait for the file's
// lock has failed: it may have been starting, its socket not open yet.
func ReadStatus(ctx context.Context, cfg *config.Config) (*Status, error) {
	st, err := AskStatus(ctx, cfg.StateDir)
	if !errors.Is(err, ErrNoAgent) {
		return st, err
	}
	sock := filepath.Join(cfg.StateDir, SocketName)
	db, err := store.Open(cfg.StateDir, store.Options{ReadOnly: true, LockTimeout: 2 * time.Second})
	if errors.Is(err, store.ErrLocked) {
		if st, err := AskStatus(ctx, cfg.StateDir); !errors.Is(err, ErrNoAgent) {
			return st, err
		}
		return nil, fmt.Errorf("an agent holds %s but does not answer on %s", cfg.StateDir, sock)
	}
	if err != nil {
		return nil, fmt.Errorf("no agent is running and the state cannot be read: %w", err)
	}
	defer db.Close()
	st = &Status{State: "stopped", Slot: cfg.Source.Slot}
	if err := db.View(func(r *store.Reader) error { return stateStatus(r, st) }); err != nil {
		return nil, err
	}
	st.ConfirmedLSN = st.CheckpointLSN
	return st, nil
}

// FormatBytes writes n in binary units, e.g. "3.2 MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
