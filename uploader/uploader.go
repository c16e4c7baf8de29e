package uploader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/store"
)

// Defaults of Options.
const (
	DefaultPollInterval       = 10 * time.Second
	DefaultMinBackoff         = time.Second
	DefaultMaxBackoff         = time.Minute
	DefaultConcurrency        = 4
	DefaultWindow             = 1024
	DefaultMultipartThreshold = 16 << 20
	DefaultPartSize           = 8 << 20
)

// Options configure an Uploader.
type Options struct {
	// Client is the replica, rooted at <url>/<site>/.
	Client ReplicaClient
	// DB is the agent's state file, where the upload state is kept.
	DB *store.DB
	// Target identifies the remote (see Config.Target).
	Target string
	// Tables lists the local tables to replicate, on every pass (see
	// DirTables).
	Tables func(ctx context.Context) ([]Table, error)
	// Logger defaults to slog.Default().
	Logger *slog.Logger

	// PollInterval is how often Run looks for new versions without a
	// Notify.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait between passes while the
	// remote is unreachable; it doubles (with jitter) up to MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Concurrency is the number of data and checkpoint files uploaded at
	// once, and of parts of one large file.
	Concurrency int
	// Window is how many versions ahead of the commit going up their data
	// and checkpoint files may be uploaded, so that the workers keep busy
	// while the commits go up one at a time.
	Window int
	// Files larger than MultipartThreshold go up in parts of PartSize
	// (when the client implements MultipartClient). S3 needs at least
	// 5 MiB per part except the last.
	MultipartThreshold int64
	PartSize           int64

	// MaxBytesPerSecond limits upload bandwidth through a rate.Limiter;
	// Limiter, when set, is used instead.
	MaxBytesPerSecond int64
	Limiter           Limiter

	// Root, when set, is the replica's client rooted at the URL (not at
	// the site): before its first pass the uploader claims Layout there
	// (ClaimLayout), and replicates nothing while the replica holds
	// another layout.
	Root   ReplicaClient
	Layout string

	// Fleet, when set, makes the replica a fleet (Config.Layout "fleet"):
	// each table is committed into the shared table of its name instead
	// of being copied (docs/fleet.md).
	Fleet *FleetOptions

	// Now is the clock; it defaults to time.Now.
	Now func() time.Time
}

// FleetOptions configure the fleet layout.
type FleetOptions struct {
	// Site is the value of the fleet tables' _site column.
	Site string
	// RunID is this run's id, recorded (store.Writer.AddFleetRun) before
	// the first fleet put; PastRuns are the earlier runs of this state.
	RunID    string
	PastRuns []string
	// Interval is the least time between two fleet commits of a table.
	Interval time.Duration
	// ScratchDir is where translated files are staged before their
	// upload.
	ScratchDir string
	// EngineInfo goes into the fleet commits.
	EngineInfo string
}

// Uploader replicates local Delta tables to a replica. Its methods are safe
// for concurrent use; Run and SyncOnce must not run concurrently with each
// other.
type Uploader struct {
	opts   Options
	client *instrumented
	log    *slog.Logger
	notify chan struct{}
	// pass serialises passes (SyncOnce and backlog refreshes).
	pass sync.Mutex

	mu           sync.Mutex
	tables       map[string]*tableState
	fleet        map[string]*fleetState // by table, in the fleet layout
	layoutOK     bool                   // the replica holds Options.Layout
	online       bool
	offlineSince time.Time
	lastError    string

	requests atomic.Int64
	failures atomic.Int64
	stalls   atomic.Int64
	versions atomic.Int64
	bytes    atomic.Int64
}

// tableState is the in-memory view of one table, for status and backlog.
type tableState struct {
	name          string
	localVersion  int64
	remoteVersion int64
	// pending maps versions not yet on the remote to their size in bytes
	// (commit file, data files, checkpoint).
	pending     map[int64]int64
	lastSuccess time.Time
	lastError   string
	stopped     string
}

// New returns an uploader; call Run to start it.
func New(opts Options) (*Uploader, error) {
	if opts.Client == nil || opts.DB == nil || opts.Tables == nil || opts.Target == "" {
		return nil, errors.New("uploader: Client, DB, Tables and Target are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.MultipartThreshold <= 0 {
		opts.MultipartThreshold = DefaultMultipartThreshold
	}
	if opts.PartSize <= 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.Limiter == nil && opts.MaxBytesPerSecond > 0 {
		burst := int(min(max(opts.MaxBytesPerSecond/10, 32<<10), 1<<20))
		opts.Limiter = rate.NewLimiter(rate.Limit(opts.MaxBytesPerSecond), burst)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	u := &Uploader{
		opts:   opts,
		log:    opts.Logger.With("replica", opts.Client.Type()),
		notify: make(chan struct{}, 1),
		tables: map[string]*tableState{},
		fleet:  map[string]*fleetState{},
		online: true,
	}
	u.client = &instrumented{c: opts.Client, requests: &u.requests, failures: &u.failures, stalls: &u.stalls}
	if mp, ok := opts.Client.(MultipartClient); ok {
		u.client.mp = mp
	}
	return u, nil
}

// Notify tells the uploader that a table has a new local version. It never
// blocks.
func (u *Uploader) Notify() {
	select {
	case u.notify <- struct{}{}:
	default:
	}
}

// Run replicates until ctx is done, then returns nil. Passes run on Notify
// and every PollInterval; while the remote is unreachable they run after a
// growing backoff instead, and a Notify only refreshes the backlog.
func (u *Uploader) Run(ctx context.Context) error {
	// Jitter in the upper half, so agents do not retry in step.
	retry := backoff.New(backoff.Policy{Min: u.opts.MinBackoff, Max: u.opts.MaxBackoff, Factor: 2, Jitter: backoff.Equal})
	for {
		err := u.SyncOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := u.opts.PollInterval
		offline := isRemote(err)
		if offline {
			wait = retry.Next()
		} else {
			retry.Reset()
		}
		timer := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
				break waiting
			case <-u.notify:
				if !offline {
					timer.Stop()
					break waiting
				}
				u.refreshBacklog(ctx)
			}
		}
	}
}

// SyncOnce runs one pass: every table is brought as close to its local
// version as the remote allows. It returns the errors met, joined; an error
// from the remote means the remote is unreachable or failing.
func (u *Uploader) SyncOnce(ctx context.Context) error {
	u.pass.Lock()
	defer u.pass.Unlock()
	tables, err := u.opts.Tables(ctx)
	if err != nil {
		return fmt.Errorf("uploader: %w", err)
	}
	if err := u.claimLayout(ctx); err != nil {
		for _, t := range tables {
			u.setTableError(t.Name, err)
		}
		u.setOnline(err)
		return err
	}
	var errs []error
	for _, t := range tables {
		var err error
		if u.opts.Fleet != nil {
			err = u.syncFleet(ctx, t)
		} else {
			err = u.syncTable(ctx, t)
		}
		if err == nil {
			_, err = u.deleteRemote(ctx, t)
		}
		u.setTableError(t.Name, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("table %s: %w", t.Name, err))
			if isRemote(err) {
				break // the other tables would fail the same way
			}
		}
	}
	err = errors.Join(errs...)
	u.setOnline(err)
	return err
}

// claimLayout claims Options.Layout on the replica once (ClaimLayout).
func (u *Uploader) claimLayout(ctx context.Context) error {
	if u.opts.Root == nil || u.layoutOK {
		return nil
	}
	root := &instrumented{c: u.opts.Root, requests: &u.requests, failures: &u.failures, stalls: &u.stalls}
	if err := ClaimLayout(ctx, root, u.opts.Layout); err != nil {
		return fmt.Errorf("uploader: %w", err)
	}
	u.layoutOK = true
	return nil
}

// refreshBacklog recomputes the backlog of every table from the local logs,
// without contacting the remote.
func (u *Uploader) refreshBacklog(ctx context.Context) {
	u.pass.Lock()
	defer u.pass.Unlock()
	tables, err := u.opts.Tables(ctx)
	if err != nil {
		return
	}
	for _, t := range tables {
		st, err := u.loadState(t.Name)
		if err != nil {
			continue
		}
		if l, err := readLocalLog(t.Path); err == nil {
			u.updateBacklog(ctx, t, l, st)
		}
	}
}

// setOnline records the outcome of a pass and logs changes of state once.
func (u *Uploader) setOnline(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	remote := isRemote(err)
	switch {
	case remote && u.online:
		u.online, u.offlineSince = false, u.opts.Now()
		u.lastError = err.Error()
		v, b := u.backlogLocked()
		var first *remoteError
		errors.As(err, &first)
		u.log.Warn("replica offline, continuing locally", "err", first, "backlog_versions", v, "backlog_bytes", b)
	case !remote && !u.online:
		v, b := u.backlogLocked()
		u.log.Info("replica back online", "offline_for", u.opts.Now().Sub(u.offlineSince).Round(time.Second),
			"backlog_versions", v, "backlog_bytes", b)
		u.online, u.offlineSince, u.lastError = true, time.Time{}, ""
	case remote:
		u.lastError = err.Error()
	}
}

// setTableError records a table's last error and logs it when it changes.
func (u *Uploader) setTableError(name string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ts := u.tableLocked(name)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != ts.lastError && err != nil && !isRemote(err) && !errors.Is(err, ErrRemoteConflict) {
		u.log.Error("table replication failed", "table", name, "err", err)
	}
	ts.lastError = msg
}

func (u *Uploader) tableLocked(name string) *tableState {
	ts := u.tables[name]
	if ts == nil {
		ts = &tableState{name: name, localVersion: -1, remoteVersion: -1, pending: map[int64]int64{}}
		u.tables[name] = ts
	}
	return ts
}

// loadState reads a table's upload state.
func (u *Uploader) loadState(table string) (store.UploadState, error) {
	var st store.UploadState
	err := u.opts.DB.View(func(r *store.Reader) error {
		var err error
		st, err = r.UploadState(u.opts.Target, table)
		return err
	})
	return st, err
}

// Uploaded reports whether the file at relPath (slash-separated, relative
// to the table root) is confirmed on the remote, so that vacuum may delete
// it locally. Commit files count as uploaded up to the remote version.
func (u *Uploader) Uploaded(table, relPath string) (bool, error) {
	var ok bool
	if _, isCommit := commitVersion(relPath); !isCommit && u.opts.Fleet != nil {
		// A fleet holds a translation of the file under another path:
		// it cannot be restored from there, so it stays local.
		return false, nil
	}
	err := u.opts.DB.View(func(r *store.Reader) error {
		if v, isCommit := commitVersion(relPath); isCommit {
			st, err := r.UploadState(u.opts.Target, table)
			ok = err == nil && v <= st.RemoteVersion
			return err
		}
		var err error
		_, ok, err = r.UploadedFile(u.opts.Target, table, relPath)
		return err
	})
	return ok, err
}

// RemoteVersion returns the newest version of table confirmed on the
// remote, or -1.
func (u *Uploader) RemoteVersion(table string) (int64, error) {
	st, err := u.loadState(table)
	return st.RemoteVersion, err
}

// Resume clears the stopped state of a table after an operator resolved a
// conflict (for example by pointing one of two agents at another site).
func (u *Uploader) Resume(table string) error {
	st, err := u.loadState(table)
	if err != nil {
		return err
	}
	st.Stopped = ""
	if err := u.opts.DB.Update(func(w *store.Writer) error {
		return w.PutUploadState(u.opts.Target, table, st)
	}); err != nil {
		return fmt.Errorf("uploader: resume %s: %w", table, err)
	}
	u.mu.Lock()
	u.tableLocked(table).stopped = ""
	u.mu.Unlock()
	u.Notify()
	return nil
}
