package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/backoff"
)

// DefaultMaxAttempts is how many versions a commit tries in a row before
// it gives way to the next pass (ErrContention).
const DefaultMaxAttempts = 10

// DefaultBackoff is the wait between lost races after the second. It is
// short and capped low: a lost race means only that another site was a
// moment faster, and a long wait lets the others run further ahead.
var DefaultBackoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 500 * time.Millisecond, Factor: 2, Jitter: backoff.Full}

// Options identify the site committing and tune its retries.
type Options struct {
	// Site is the site's name, its value of the _site partition column.
	Site string
	// RunID identifies this run of the agent; commitInfo carries it, so
	// that a put whose outcome was lost is known as the site's own.
	RunID string
	// PastRuns are the run ids of the site's earlier runs, from its state.
	PastRuns []string
	// MaxAttempts caps the versions a commit tries (DefaultMaxAttempts).
	MaxAttempts int
	// Backoff paces retries after the second lost race (DefaultBackoff).
	Backoff backoff.Policy
	// EngineInfo goes into commitInfo.
	EngineInfo string
	// Now is the clock (time.Now).
	Now func() time.Time
	// CheckpointInterval is the number of versions between two
	// checkpoints when the table does not set delta.checkpointInterval
	// (DefaultCheckpointInterval); negative: the site writes none.
	CheckpointInterval int64
	// ScratchDir is where the site replays the log to write a checkpoint
	// and stages a checkpoint it reads, in a directory of its own it
	// removes after (os.TempDir()).
	ScratchDir string
	// Logger takes what fails without failing a commit, such as a
	// checkpoint (nothing is logged by default).
	Logger *slog.Logger
}

// progress is how far the fleet holds one appId of the site.
type progress struct {
	local int64 // the local version the fleet holds the appId's table up to
	fleet int64 // the fleet version that brought it there
}

// Writer commits one site's changes into one fleet table. It is not safe
// for concurrent use: a site has at most one commit in flight per table.
type Writer struct {
	log          *Log
	opts         Options
	site         string
	runs         []string
	meta         *delta.Metadata
	proto        *delta.Protocol
	sitePhysical string // the physical name of SiteColumn
	prefix       string // the directory of the site's files, "_site=<site>/"
	head         int64  // the newest version known to be committed
	progress     map[string]progress
	lostRaces    int64 // puts that found their version taken
	readOthers   int64 // other commits read while committing
}

// Open reads the log of the fleet table named table: its newest schema and
// protocol, and how far it holds each of the site's appIds. It starts from
// the checkpoint _last_checkpoint names and reads the commits after it. A
// table with no log fails with an error wrapping ErrNotExist (see Create).
func Open(ctx context.Context, store Store, table string, opts Options) (*Writer, error) {
	w, err := newWriter(store, table, opts)
	if err != nil {
		return nil, err
	}
	head, err := w.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("open fleet table %s: %w", table, err)
	}
	if head < 0 {
		return nil, fmt.Errorf("open fleet table %s: %w", table, ErrNotExist)
	}
	return w, nil
}

// newWriter returns a Writer that knows nothing of the table yet.
func newWriter(store Store, table string, opts Options) (*Writer, error) {
	if opts.Site == "" || opts.RunID == "" {
		return nil, fmt.Errorf("open fleet table %s: a site name and a run id are required", table)
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Backoff.Min <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ScratchDir == "" {
		opts.ScratchDir = os.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Writer{log: NewLog(store, table), opts: opts, site: opts.Site,
		runs: append([]string{opts.RunID}, opts.PastRuns...), head: -1, progress: map[string]progress{}}, nil
}

// catchUp reads the versions after w.head up to head, in order, keeping
// the newest schema and protocol and the site's progress.
func (w *Writer) catchUp(ctx context.Context, head int64) error {
	for v := w.head + 1; v <= head; v++ {
		acts, err := w.log.Read(ctx, v)
		if err != nil {
			return err
		}
		if err := w.learn(v, acts); err != nil {
			return err
		}
	}
	return nil
}

// learn takes in version v: its schema and protocol, and the site's own
// appIds it advances. An appId of the site written by a run that is not
// the site's is a clone of its state and fails with ErrConflict.
func (w *Writer) learn(v int64, acts []delta.Action) error {
	run := ""
	for _, a := range acts {
		if ci, ok := a.(*delta.CommitInfo); ok {
			run = runOf(ci)
		}
	}
	for _, a := range acts {
		switch a := a.(type) {
		case *delta.Metadata:
			if err := w.setMetadata(a); err != nil {
				return fmt.Errorf("version %d: %w", v, err)
			}
		case *delta.Protocol:
			if err := checkProtocol(a); err != nil {
				return fmt.Errorf("%w: version %d: %v", ErrConflict, v, err)
			}
			w.proto = a
		case *delta.Txn:
			if strings.HasPrefix(a.AppID, w.appIDPrefix()) {
				if !slices.Contains(w.runs, run) {
					return fmt.Errorf("%w: version %d: appId %s committed by run %q, not one of this site's: another agent holds this site's state",
						ErrConflict, v, a.AppID, run)
				}
				w.progress[a.AppID] = progress{local: a.Version, fleet: v}
			}
		}
	}
	w.head = v
	return nil
}

// setMetadata makes md the schema the site's commits are built on.
func (w *Writer) setMetadata(md *delta.Metadata) error {
	st, err := md.Schema()
	if err != nil {
		return fmt.Errorf("%w: schema: %v", ErrConflict, err)
	}
	f, _ := st.Field(SiteColumn)
	if f == nil || len(md.PartitionColumns) == 0 || md.PartitionColumns[0] != SiteColumn {
		return fmt.Errorf("%w: the table is not partitioned by %s first: not a fleet table", ErrConflict, SiteColumn)
	}
	for _, k := range []string{"delta.invariants", "delta.generationExpression"} {
		if strings.Contains(md.SchemaString, `"`+k+`"`) {
			return fmt.Errorf("%w: the schema has %s, which this agent does not check", ErrConflict, k)
		}
	}
	for k := range md.Configuration {
		if strings.HasPrefix(k, "delta.constraints.") {
			return fmt.Errorf("%w: the table has the CHECK constraint %s, which this agent does not check", ErrConflict, k)
		}
	}
	w.meta, w.sitePhysical = md, f.PhysicalName()
	w.prefix = delta.PartitionDir([]string{SiteColumn}, map[string]*string{SiteColumn: &w.site}) + "/"
	return nil
}

// Metadata returns the newest metaData the site knows.
func (w *Writer) Metadata() *delta.Metadata { return w.meta }

// Version returns the newest version the site knows to be committed.
func (w *Writer) Version() int64 { return w.head }

// Progress returns the local version up to which the fleet holds appID's
// table, and the fleet version that brought it there (or, when the site
// learnt it from a checkpoint, the checkpoint's version, at or after that
// one); ok is false when the fleet holds nothing of it.
func (w *Writer) Progress(appID string) (local, fleet int64, ok bool) {
	p, ok := w.progress[appID]
	return p.local, p.fleet, ok
}

// SitePartition returns the partition values of the site's files, keyed
// by the physical name of SiteColumn as column mapping asks.
func (w *Writer) SitePartition() map[string]*string {
	return map[string]*string{w.sitePhysical: &w.site}
}

// SiteDir returns the directory, relative to the table, of the site's
// files: "_site=<site>/" with the site escaped as a partition value.
func (w *Writer) SiteDir() string { return w.prefix }

// AppID returns the appId of the site's local table kind ("changelog" or
// "mirror") whose local table id is localID.
func (w *Writer) AppID(kind, localID string) string {
	return w.appIDPrefix() + w.log.table() + "/" + kind + "/" + localID
}

func (w *Writer) appIDPrefix() string { return "lakeside-fleet/" + w.site + "/" }

// Range is one data commit of a site: file actions inside its partition
// that bring the fleet's copy of a local table (its appId) to local
// version Version.
type Range struct {
	AppID   string
	Version int64
	// Actions are add, remove and cdc actions, each in the site's
	// partition.
	Actions []delta.Action
	// Operation names the commit, as in a local commit (WRITE, MERGE...).
	Operation string
	// Info goes into commitInfo, beside the site, run and range.
	Info map[string]any
	// Position, when not nil, is the site's source position after the
	// range, committed as a txn action of its own beside AppID's. It
	// takes no part in exactly once: Progress and the conflict rules
	// look at AppID alone. Nil leaves the position as it was.
	Position *Position
}

// ErrLanded is returned by Commit when an earlier range of the same appId
// landed in a put whose outcome was lost: Progress says where the fleet
// stands, and the caller commits from there.
var ErrLanded = errors.New("an earlier range of this site landed")

// Commit puts r as the next version of the fleet table and returns it. It
// never commits a range twice: a range the fleet already holds returns the
// version that holds it. On a lost race it reads the commit that won,
// applies the conflict rules (ErrConflict stops the table) and tries the
// version after; after MaxAttempts versions it fails with ErrContention.
func (w *Writer) Commit(ctx context.Context, r Range) (int64, error) {
	if p, ok := w.progress[r.AppID]; ok && r.Version <= p.local {
		if r.Version == p.local {
			return p.fleet, nil
		}
		return -1, fmt.Errorf("commit %s up to %d: the fleet holds it up to %d already", r.AppID, r.Version, p.local)
	}
	for _, a := range r.Actions {
		var values map[string]*string
		var path string
		switch a := a.(type) {
		case *delta.Add:
			values, path = a.PartitionValues, a.Path
		case *delta.Remove:
			values, path = a.PartitionValues, a.Path
		case *delta.AddCDC:
			values, path = a.PartitionValues, a.Path
		default:
			return -1, fmt.Errorf("commit %s up to %d: a range holds file actions only, not %s", r.AppID, r.Version, a.ActionName())
		}
		if v := values[w.sitePhysical]; v == nil || *v != w.site {
			return -1, fmt.Errorf("commit %s up to %d: %s lies outside the partition of site %q", r.AppID, r.Version, path, w.site)
		}
	}
	if p := r.Position; p != nil && !strings.HasPrefix(p.AppID, w.positionPrefix()) {
		return -1, fmt.Errorf("commit %s up to %d: position %s is not one of site %q", r.AppID, r.Version, p.AppID, w.site)
	}
	blind := !slices.ContainsFunc(r.Actions, func(a delta.Action) bool { _, ok := a.(*delta.Add); return !ok })
	if !blind && w.meta != nil && strings.EqualFold(w.meta.Configuration["delta.appendOnly"], "true") {
		return -1, fmt.Errorf("commit %s up to %d: %w: the table is append-only (delta.appendOnly)", r.AppID, r.Version, ErrConflict)
	}
	build := func(v int64) ([]byte, error) {
		info := map[string]any{"site": w.site, "run": w.opts.RunID, "range": r.Version}
		for k, x := range r.Info {
			info[k] = x
		}
		readVersion := v - 1
		now := w.opts.Now().UnixMilli()
		acts := append(slices.Clip(r.Actions), &delta.Txn{AppID: r.AppID, Version: r.Version, LastUpdated: ptr(now)})
		if p := r.Position; p != nil {
			acts = append(acts, &delta.Txn{AppID: p.AppID, Version: p.Version, LastUpdated: ptr(now)})
		}
		acts = append(acts,
			&delta.CommitInfo{Operation: r.Operation, EngineInfo: w.opts.EngineInfo, ReadVersion: &readVersion,
				IsBlindAppend: &blind, Extra: map[string]any{"lakeside": info}})
		return delta.EncodeCommit(acts, w.opts.Now())
	}
	v, err := w.put(ctx, build, func(v int64, acts []delta.Action) (bool, error) {
		kind, err := w.classify(v, acts, r.AppID, r.Version)
		if errors.Is(err, ErrLanded) {
			if lerr := w.learn(v, acts); lerr != nil {
				return false, lerr
			}
		}
		return kind == winnerOwn, err
	})
	if err != nil {
		return -1, fmt.Errorf("commit %s up to %d: %w", r.AppID, r.Version, err)
	}
	w.progress[r.AppID] = progress{local: r.Version, fleet: v}
	w.afterCommit(ctx, v)
	return v, nil
}

// put writes the commit build returns for version w.head+1. On a lost
// race it reads the version, lets lost judge it (own: the commit is in; an
// error: stop), takes it in and tries the next version. A put whose outcome
// is unknown (a timeout, a lost connection) is settled the same way, by
// reading the version before anything else.
func (w *Writer) put(ctx context.Context, build func(v int64) ([]byte, error),
	lost func(v int64, acts []delta.Action) (own bool, err error)) (int64, error) {
	b := backoff.New(w.opts.Backoff)
	for attempt := 1; ; attempt++ {
		v := w.head + 1
		data, err := build(v)
		if err != nil {
			return -1, err
		}
		perr := w.log.put(ctx, v, data)
		if perr == nil {
			acts, err := delta.ParseCommit(data)
			if err != nil {
				return -1, err
			}
			return v, w.learn(v, acts)
		}
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		if errors.Is(perr, ErrExists) {
			w.lostRaces++
		}
		acts, err := w.log.Read(ctx, v)
		switch {
		case errors.Is(err, ErrNotExist) && !errors.Is(perr, ErrExists):
			// Nothing landed: the same version again, after a wait.
			if attempt >= w.opts.MaxAttempts {
				return -1, fmt.Errorf("%w: %d attempts, the last: %v", ErrContention, attempt, perr)
			}
			if err := b.Wait(ctx); err != nil {
				return -1, err
			}
			continue
		case err != nil:
			return -1, fmt.Errorf("%v; reading it back: %w", perr, err)
		}
		own, err := w.judge(v, acts, lost)
		if err != nil || own {
			return v, err
		}
		// Read on to the head before the next put: the versions after
		// v were taken while v was tried, and each must be judged.
		head, err := w.log.Latest(ctx, v)
		if err != nil {
			return -1, err
		}
		for u := v + 1; u <= head; u++ {
			acts, err := w.log.Read(ctx, u)
			if err != nil {
				return -1, err
			}
			if own, err := w.judge(u, acts, lost); err != nil || own {
				return u, err
			}
		}
		if attempt >= w.opts.MaxAttempts {
			return -1, fmt.Errorf("%w: lost %d races in a row, the last at version %d", ErrContention, attempt, v)
		}
		if attempt >= 2 {
			if err := b.Wait(ctx); err != nil {
				return -1, err
			}
		}
	}
}

// judge lets lost judge version v, taken by acts, and takes it in.
func (w *Writer) judge(v int64, acts []delta.Action, lost func(int64, []delta.Action) (bool, error)) (bool, error) {
	own, err := lost(v, acts)
	if err != nil {
		return false, err
	}
	if err := w.learn(v, acts); err != nil {
		return false, err
	}
	if !own {
		w.readOthers++
	}
	return own, nil
}

// Contention returns how many of this Writer's puts found their version
// taken, and how many other writers' commits it read while committing.
func (w *Writer) Contention() (lostRaces, readOthers int64) { return w.lostRaces, w.readOthers }

// runOf returns the run id a Lakeside commitInfo names, or "".
func runOf(ci *delta.CommitInfo) string {
	if m, ok := ci.Extra["lakeside"].(map[string]any); ok {
		if r, ok := m["run"].(string); ok {
			return r
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }
