package applier

import (
	"context"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// compactNice is the nice value of the thread background passes run on:
// the scheduler gives capture and the applier the CPU first.
const compactNice = 10

// CompactorConfig configures the background compaction of a running
// applier's tables.
type CompactorConfig struct {
	// Options are the options of every pass; Tables and DryRun are
	// ignored, Pace is set from BytesPerSecond.
	Options CompactOptions
	// Interval is how often every table is looked at.
	Interval time.Duration
	// BytesPerSecond bounds the bytes compaction reads and writes per
	// second (no limit when zero).
	BytesPerSecond int64
	// Hold, when set, reports whether background passes leave a table
	// (a directory name) alone for now: the tables of a source table
	// being copied, whose copy adds files a pass after it merges at
	// once, and which has the CPU meanwhile. Compact is not held.
	Hold func(table string) bool
}

// Compactor compacts a running applier's tables in the background, on one
// goroutine at low priority: every Interval, and as soon as a table has had
// Options.MinFiles files added by the applier since its last pass (the
// small-file threshold; Notify after each flush has it look). A table is
// compacted when the bins planned take at least MinFiles files; the files
// are read and written within BytesPerSecond, and the applier commits
// them between two flushes (compact.go), so neither capture nor a flush
// waits for a compaction.
type Compactor struct {
	cfg    CompactorConfig
	app    *Applier
	notify chan struct{}
	// mu lets one pass run at a time: the background's or one asked for.
	mu sync.Mutex
	// added holds each table's Applier.Tables FilesAdded at its last pass.
	added map[string]int64
}

// NewCompactor returns a compactor of app's tables.
func NewCompactor(cfg CompactorConfig, app *Applier) *Compactor {
	if cfg.Options.Logger == nil {
		cfg.Options.Logger = app.log
	}
	if cfg.Options.EngineInfo == "" {
		cfg.Options.EngineInfo = app.cfg.EngineInfo
	}
	if cfg.Options.TargetFileRows <= 0 {
		cfg.Options.TargetFileRows = app.cfg.TargetFileRows
	}
	if cfg.Options.TablesDir == "" {
		cfg.Options.TablesDir = app.cfg.TablesDir
	}
	cfg.Options.Tables, cfg.Options.DryRun = nil, false
	cfg.Options.Pace = pace(cfg.BytesPerSecond)
	return &Compactor{cfg: cfg, app: app, notify: make(chan struct{}, 1), added: map[string]int64{}}
}

// pace returns a Pace function that lets bytesPerSecond through, or nil
// for no limit.
func pace(bytesPerSecond int64) func(ctx context.Context, n int64) error {
	if bytesPerSecond <= 0 {
		return nil
	}
	burst := int(min(bytesPerSecond, 1<<20))
	lim := rate.NewLimiter(rate.Limit(bytesPerSecond), burst)
	return func(ctx context.Context, n int64) error {
		for n > 0 {
			step := min(n, int64(burst))
			if err := lim.WaitN(ctx, int(step)); err != nil {
				return err
			}
			n -= step
		}
		return nil
	}
}

// Notify tells the compactor that the applier committed: it looks for
// tables past the small-file threshold. It never blocks.
func (c *Compactor) Notify() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Run compacts until ctx ends, and returns nil then. A failed pass is
// logged and tried again later. Its passes run on a thread of their own at
// a lower priority (nice compactNice), which ends with Run.
func (c *Compactor) Run(ctx context.Context) error {
	// Never unlocked: the thread, niced, ends with the goroutine.
	runtime.LockOSThread()
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), compactNice); err != nil {
		c.app.log.Debug("compaction runs at normal priority", "err", err)
	}
	timer := time.NewTimer(c.cfg.Interval)
	defer timer.Stop()
	for {
		var tables []string
		select {
		case <-ctx.Done():
			return nil
		case <-c.notify:
			if tables = c.due(); len(tables) == 0 {
				continue
			}
		case <-timer.C:
			timer.Reset(c.cfg.Interval)
		}
		opts := c.cfg.Options
		opts.Tables, opts.Skip = tables, c.cfg.Hold
		// The data files are encoded on this thread too, at its
		// priority.
		opts.Write.Inline = true
		if _, err := c.pass(ctx, opts); err != nil && ctx.Err() == nil {
			c.app.log.Warn("compaction failed; trying again later", "err", err)
		}
	}
}

// due returns the tables the applier added at least MinFiles files to
// since their last pass.
func (c *Compactor) due() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, st := range c.app.Tables() {
		if c.cfg.Hold != nil && c.cfg.Hold(st.Name) {
			continue
		}
		if st.FilesAdded-c.added[st.Name] >= int64(max(c.cfg.Options.MinFiles, 1)) {
			out = append(out, st.Name)
		}
	}
	return out
}

// Compact compacts tables (every table when empty) now, with any bin,
// whatever the threshold: `lakeside compact` through the control socket.
func (c *Compactor) Compact(ctx context.Context, tables []string, dryRun bool) (*CompactReport, error) {
	opts := c.cfg.Options
	opts.Tables, opts.DryRun, opts.MinFiles, opts.Skip = tables, dryRun, 0, nil
	return c.pass(ctx, opts)
}

// pass runs one compaction of opts.Tables, one pass at a time.
func (c *Compactor) pass(ctx context.Context, opts CompactOptions) (*CompactReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := map[string]int64{}
	for _, st := range c.app.Tables() {
		before[st.Name] = st.FilesAdded
	}
	rep, err := Compact(ctx, opts, c.app)
	if rep != nil && !opts.DryRun {
		for _, t := range rep.Tables {
			c.added[t.Name] = before[t.Name]
		}
	}
	return rep, err
}
