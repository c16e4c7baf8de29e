// Package agent wires a running Lakeside agent together: the state file, the
// replication source, the applier that builds the local Delta tables, the
// uploader that replicates them, the live view, and the control socket that
// answers status queries. It runs them from a config.Config, which package
// agent/config reads and checks, and applies a reload to them.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/applier"
	"github.com/lakeside/lakeside/agent/internal/live"
	"github.com/lakeside/lakeside/agent/internal/live/web"
	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/internal/tuning"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/replica"
)

// SocketName is the control socket's name inside the state directory.
const SocketName = "lakeside.sock"

// CrashRecordName is the file in state_dir in which the applier says what
// it holds of the queue, so that a transaction that kills the agent each
// time it is applied is quarantined (see applier.MaxCrashExits).
const CrashRecordName = applier.CrashRecordName

// captureMaxValue is capture's limit for source.max_value_size: zero keeps
// every value PostgreSQL can send (at most 1 GB).
func captureMaxValue(size int64) int64 {
	if size == 0 {
		return math.MaxInt32
	}
	return size
}

// Agent is one running agent.
type Agent struct {
	cfg     *config.Config
	log     *slog.Logger
	version string

	db      *store.DB
	src     *source.Source
	app     *applier.Applier
	up      *uploader.Uploader // nil when replication is off
	hub     *live.Hub
	server  *live.Server  // nil when http.listen is off
	limiter *rate.Limiter // upload bandwidth, nil when replication is off
	metrics *prometheus.Registry
	// vacuumed adds up the vacuums the agent ran (see Vacuum).
	vacuumed vacuumTotals
	// compactor compacts the tables: in the background with
	// delta.compaction, and when asked (Compact).
	compactor *applier.Compactor
	// threads sets GOMAXPROCS by what capture does; nil leaves it alone.
	threads *threads
	// tuningOff names the stages' performance tricks turned off.
	tuningOff tuning.Off

	// reloadMu guards effective, the configuration as changed by reloads
	// (cfg stays as started).
	reloadMu  sync.Mutex
	effective *config.Config
}

// New returns an agent for cfg; nothing starts until Run. version goes into
// the Delta tables' commitInfo.
func New(cfg *config.Config, log *slog.Logger, version string) *Agent {
	if log == nil {
		log = slog.Default()
	}
	return &Agent{cfg: cfg, log: log, version: version}
}

// ShareCPUs makes the agent run its Go code on catchingUp threads at once
// (GOMAXPROCS) while capture drains a backlog, leaving the other CPUs to
// PostgreSQL's walsender, and on otherwise threads once capture has caught
// up. It applies catchingUp at once. Call it before Run; without it the
// agent leaves GOMAXPROCS as it is.
func (a *Agent) ShareCPUs(catchingUp, otherwise int) {
	a.threads = newThreads(a.log, catchingUp, otherwise, nil)
}

// sourceConfig converts the configuration for the replication source.
func sourceConfig(c *config.Config, log *slog.Logger) source.Config {
	return source.Config{
		DSN:                    c.Source.DSN,
		Slot:                   c.Source.Slot,
		Publication:            c.Source.Publication,
		Tables:                 c.Source.Tables,
		Snapshot:               c.Source.Snapshot == config.SnapshotInitial,
		StatusInterval:         c.Source.StatusInterval,
		LogicalDecodingWorkMem: c.Source.LogicalDecodingWorkMem,
		MaxValueBytes:          captureMaxValue(c.Source.MaxValueSize),
		BackfillChunkRows:      c.Source.BackfillChunkRows,
		BackfillRowsPerSecond:  c.Source.BackfillRowsPerSecond,
		Logger:                 log,
	}
}

// Open opens the state file and prepares every stage. Run calls it when it
// was not called before.
func (a *Agent) Open() error {
	if a.db != nil {
		return nil
	}
	db, err := store.Open(a.cfg.StateDir, store.Options{})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("%w: is another lakeside running with state_dir %s?", err, a.cfg.StateDir)
	}
	if err != nil {
		return err
	}
	a.db = db
	names := make([]string, len(a.cfg.Source.Tables))
	for i, t := range a.cfg.Source.Tables {
		names[i] = t.String()
	}
	a.hub = live.NewHub(db, live.HubConfig{
		TablesDir:    a.cfg.Delta.TablesDir,
		SourceTables: names,
		AppIDPrefix:  appIDPrefix(a.cfg.Source.Slot),
		Archive:      archiveOf(a.cfg),
		Backlog:      backlog{a},
		Logger:       a.log.With("component", "live"),
	})

	if a.cfg.Replica.URL != "" {
		a.limiter = newBandwidthLimiter(a.cfg.Replica.MaxBytesPerSecond)
		client, err := replica.Open(a.cfg.Replica, nil)
		if err != nil {
			db.Close()
			return fmt.Errorf("replica: %w", err)
		}
		root, err := replica.OpenRoot(a.cfg.Replica, nil)
		if err != nil {
			db.Close()
			return fmt.Errorf("replica: %w", err)
		}
		var fleetOpts *uploader.FleetOptions
		if a.cfg.Replica.Fleet() {
			if fleetOpts, err = a.fleetOptions(db); err != nil {
				db.Close()
				return fmt.Errorf("replica: %w", err)
			}
		}
		a.up, err = uploader.New(uploader.Options{
			Client:       client,
			DB:           db,
			Target:       a.cfg.Replica.Target(),
			Tables:       uploader.DirTables(a.cfg.Delta.TablesDir),
			Logger:       a.log.With("component", "uploader"),
			PollInterval: a.cfg.Replica.PollInterval,
			MaxBackoff:   a.cfg.Replica.MaxBackoff,
			Concurrency:  a.cfg.Replica.Concurrency,
			Limiter:      a.limiter,
			Root:         root,
			Layout:       a.cfg.Replica.Layout,
			Fleet:        fleetOpts,
		})
		if err != nil {
			db.Close()
			return fmt.Errorf("replica: %w", err)
		}
	}

	appCfg := applier.Config{
		TablesDir:       a.cfg.Delta.TablesDir,
		FlushInterval:   a.cfg.Delta.FlushInterval,
		FlushChanges:    a.cfg.Delta.FlushChanges,
		SoftDelete:      a.cfg.Delta.SoftDelete,
		ChangeDataFeed:  a.cfg.Delta.ChangeDataFeed,
		DeletionVectors: a.cfg.Delta.DeletionVectors,
		TargetFileRows:  a.cfg.Delta.TargetFileRows,
		Compaction:      a.cfg.Delta.Compaction,
		RowGroupRows:    a.cfg.Delta.RowGroupRows,
		AppIDPrefix:     appIDPrefix(a.cfg.Source.Slot),
		EngineInfo:      "lakeside/" + a.version,
		Capture:         capture{a},
		Off:             a.tuningOff,
		CrashRecord:     filepath.Join(a.cfg.StateDir, CrashRecordName),
		Logger:          a.log.With("component", "applier"),
	}
	appCfg.TableProperties = tableProperties(a.cfg)
	if archiveOf(a.cfg) != "" {
		appCfg.Restore = a.up.Restore
	}
	if a.cfg.HTTP.Listen != config.HTTPOff {
		// The live view reads every transaction before the queue lets it
		// go. Without it (http.listen: off) the hub does not run.
		appCfg.Reader = a.hub
	}
	// The live view may have waited for a commit (liveDefer).
	committed := notifiers{a.hub}
	if a.up != nil {
		committed = append(committed, a.up)
	}
	if a.cfg.Delta.Compaction {
		committed = append(committed, compactorNotifier{a})
	}
	appCfg.Committed = committed
	a.app = applier.New(appCfg, db)
	a.compactor = applier.NewCompactor(applier.CompactorConfig{
		Options:        compactOptions(a.cfg, a.version, a.log.With("component", "compaction")),
		Interval:       a.cfg.Delta.CompactInterval,
		BytesPerSecond: a.cfg.Delta.CompactBytesPerSecond,
		Hold:           a.copying,
	}, a.app)

	srcCfg := sourceConfig(a.cfg, a.log.With("component", "source"))
	srcCfg.Off = a.tuningOff
	srcCfg.Durable = notifiers{a.hub, a.app}
	srcCfg.Backpressure = backpressure{a}
	if a.threads != nil {
		srcCfg.Threads = a.threads
	}
	a.src = source.New(srcCfg, db)
	a.metrics = a.newMetrics()
	if a.cfg.HTTP.Listen != config.HTTPOff {
		a.server = live.NewServer(live.Config{
			Listen:         a.cfg.HTTP.Listen,
			Token:          a.cfg.HTTP.Token,
			MaxClients:     a.cfg.HTTP.MaxClients,
			AllowedHosts:   a.cfg.HTTP.AllowedHosts,
			MaxConnections: a.cfg.HTTP.MaxConnections,
			TablesDir:      a.cfg.Delta.TablesDir,
			Logger:         a.log.With("component", "http"),
		}, a.hub, agentView{a}, promhttp.HandlerFor(a.metrics, promhttp.HandlerOpts{}), web.Handler())
	}
	return nil
}

// appIDPrefix starts the appIds of the txn actions in the Delta tables of
// a slot's changes.
func appIDPrefix(slot string) string { return "lakeside-" + slot }

// notifiers tells each of its stages that there is something new to look
// at (source.Notifier, applier.Notifier).
type notifiers []interface{ Notify() }

func (ns notifiers) Notify() {
	for _, n := range ns {
		n.Notify()
	}
}

// copying reports whether the Delta table in directory dir belongs to a
// source table being copied (a backfill): background compaction leaves
// it until the copy is done.
func (a *Agent) copying(dir string) bool {
	if a.src == nil {
		return false
	}
	for _, b := range a.src.Backfills() {
		if mirror, ok := store.CapturedDirName(b.Table); ok && b.Running && (dir == mirror || dir == mirror+store.ChangelogSuffix) {
			return true
		}
	}
	return false
}

// compactorNotifier tells the agent's compactor, made after the applier,
// of the applier's commits (its small-file threshold).
type compactorNotifier struct{ a *Agent }

func (c compactorNotifier) Notify() { c.a.compactor.Notify() }

// capture answers what the applier asks of capture (applier.Capture) from
// the agent's source, which is made after the applier.
type capture struct{ a *Agent }

func (c capture) CatchingUp() bool      { return c.a.src.CatchingUp() }
func (c capture) BacklogEnd() store.LSN { return c.a.src.BacklogEnd() }
func (c capture) Copies() []string      { return c.a.src.Copies() }

// backlog tells the live view when to leave the CPUs to a backlog
// (live.Backlog).
type backlog struct{ a *Agent }

func (b backlog) Backlogged() bool { return b.a.liveDefer() }

// backpressure holds capture back for the agent (source.Backpressure).
type backpressure struct{ a *Agent }

func (b backpressure) Pause() (bool, string) { return b.a.backpressure() }

// backpressure pauses capture while the replication backlog exceeds its
// budget (invariant 6 in docs/architecture.md): PostgreSQL keeps the WAL, nothing is dropped.
func (a *Agent) backpressure() (bool, string) {
	if a.up == nil || a.cfg.Replica.MaxBacklog <= 0 {
		return false, ""
	}
	if b := a.up.Backlog(); b.Bytes >= a.cfg.Replica.MaxBacklog {
		return true, fmt.Sprintf("replication backlog of %d bytes reached replica.max_backlog (%d bytes)", b.Bytes, a.cfg.Replica.MaxBacklog)
	}
	return false, ""
}

// liveDefer tells the live view to poll the queue only now and then: while
// capture catches up with a backlog (the applier holds back then too, so
// that a small machine spends itself on shrinking the WAL the server keeps
// for the slot), and then until the applier has committed it. The view is
// not live during a backlog anyway (its clients refetch the rows after it),
// and the applier reading and committing the backlog, which is what
// analysts wait for, then has the CPUs to itself: reading a backlog of a
// million changes takes the view about 0.15 s of CPU.
func (a *Agent) liveDefer() bool { return a.src.CatchingUp() || a.app.FlushingBacklog() }

// DB returns the open state file (nil before Open).
func (a *Agent) DB() *store.DB { return a.db }

// Source returns the replication source (nil before Open).
func (a *Agent) Source() *source.Source { return a.src }

// Run runs the agent until ctx is cancelled or a stage fails. A clean
// shutdown returns nil after everything received is durable and
// acknowledged.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Open(); err != nil {
		return err
	}
	defer a.db.Close()

	sock := filepath.Join(a.cfg.StateDir, SocketName)
	_ = os.Remove(sock) // left behind by a crash; the state file's lock says no agent runs
	ln, err := listenControl(sock)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	ctl := &http.Server{Handler: a.controlHandler(), ReadHeaderTimeout: 5 * time.Second}
	go ctl.Serve(ln)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ctl.Shutdown(sctx)
		os.Remove(sock)
	}()

	replicaTarget := "off"
	if a.cfg.Replica.URL != "" {
		replicaTarget = a.cfg.Replica.Target()
	}
	a.log.Info("agent starting", "state_dir", a.cfg.StateDir, "slot", a.cfg.Source.Slot, "tables", len(a.cfg.Source.Tables),
		"delta", a.cfg.Delta.TablesDir, "replica", replicaTarget, "http", a.cfg.HTTP.Listen)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		stage string
		err   error
	}
	results := make(chan result)
	stages := 0
	start := func(stage string, run func(context.Context) error) {
		stages++
		go func() {
			err := run(ctx)
			results <- result{stage, err}
		}()
	}
	start("source", a.src.Run)
	start("applier", a.app.Run)
	if a.server != nil {
		start("live view", a.hub.Run)
	}
	start("vacuum", a.runVacuum)
	if a.cfg.Delta.Compaction {
		start("compaction", a.compactor.Run)
	}
	if a.up != nil {
		start("uploader", a.up.Run)
	}
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		a.notifySystemd(ctx)
	}()
	defer func() { cancel(); <-notified }()
	if a.server != nil {
		start("http", a.server.Serve)
	}

	// The first stage to stop, with or without an error, stops the others.
	var first error
	for range stages {
		r := <-results
		if r.err != nil && first == nil {
			first = fmt.Errorf("%s: %w", r.stage, r.err)
			a.log.Error("stage failed; stopping", "stage", r.stage, "err", r.err)
		}
		cancel()
	}
	if first != nil {
		return first
	}
	a.log.Info("agent stopped")
	return nil
}

// agentView gives the live view the agent's status and readiness.
type agentView struct{ a *Agent }

func (v agentView) Status() (any, error) { return v.a.Status() }

func (v agentView) Ready() error {
	if st := v.a.src.Status(); st.State != "streaming" {
		reason := "capture is " + st.State
		if st.LastError != "" {
			reason += ": " + st.LastError
		}
		return errors.New(reason)
	}
	if fs := v.a.app.Failures(); len(fs) > 0 {
		return errors.New(applyFailingLine(fs))
	}
	return nil
}

// applyFailingLine says in one line what the applier cannot apply.
func applyFailingLine(fs []applier.Failure) string {
	f := fs[0]
	what := "every table"
	if f.Table != "" {
		what = f.Table
	}
	if len(fs) > 1 {
		what += fmt.Sprintf(" and %d more", len(fs)-1)
	}
	return fmt.Sprintf("%s: %s since %s: %s", ApplyFailing, what, f.Since.UTC().Format(time.RFC3339), f.Err)
}
