// Package applier turns the queue of captured transactions into Delta tables
// on local disk: for every source table an append-only changelog
// "<schema>.<table>_changes" and a mirror "<schema>.<table>" of the current
// rows (see changelog.go and mirror.go).
//
// Exactly once. Every Delta commit carries a txn action whose appId is fixed
// per slot, table and kind (Config.AppIDPrefix + "/" + table + "/" + kind)
// and whose version is the end LSN of the last source transaction in the
// commit. A source transaction is never split: a flush applies whole
// transactions, at most one commit per Delta table. On start the applier
// reads every table's txn version back and skips the queued transactions at
// or below it, so a table that committed a flush before a crash is not
// written twice. Once every table's commit of a flush succeeded, the flush's
// last end LSN is recorded in the state file (store.Writer.SetApplied) and
// the queue is trimmed up to it in the same write transaction: a queue entry
// is deleted only after every table applied it. Data files get unique names,
// so files orphaned by a crash before their commit are never referenced.
package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/internal/tuning"
	"github.com/lakeside/lakeside/store"
)

// Config configures an Applier. Zero values get the defaults listed.
type Config struct {
	// TablesDir holds the Delta tables, one directory per table.
	TablesDir string
	// FlushInterval is the longest time a queued change waits before it is
	// applied (default 1s): counted from its arrival in the queue, and
	// the flush starts early enough to end by then (see schedule.go).
	FlushInterval time.Duration
	// FlushChanges applies at once when that many changes are pending
	// (default 100000). A transaction is never split, so a flush holds at
	// least one whole transaction, whatever its size.
	FlushChanges int
	// SoftDelete keeps deleted rows in the mirror with _deleted = true.
	SoftDelete bool
	// ChangeDataFeed turns the mirrors' change data feed on (cdf.go);
	// false turns it off in a mirror that has it.
	ChangeDataFeed bool
	// AppIDPrefix starts the appId of the txn actions, for example
	// "lakeside-<slot>" (default "lakeside").
	AppIDPrefix string
	// EngineInfo is written in commitInfo, for example "lakeside/1.2.0".
	EngineInfo string
	// TargetFileRows is the number of rows at which data files are split
	// (default 100000).
	TargetFileRows int64
	// Compaction says that the tables' small files are merged by
	// compaction (compact.go): keys above every key of a mirror then go
	// to new files, and its last file is never rewritten to take them.
	Compaction bool
	// DeletionVectors merges the mirrors with deletion vectors
	// (mergedv.go): a flush deletes the old versions of the rows it
	// changes and writes the new ones, rewriting no file. A mirror made
	// without them takes them at its next open.
	DeletionVectors bool
	// RowGroupRows is the most rows a row group of a data file holds
	// (default delta.DefaultRowGroupRows). A file of more rows encodes its full
	// row groups while it fills.
	RowGroupRows int64
	// MergeMemoryBytes bounds the memory that holds a flush's changes to
	// one mirror, encoded, until the merge: past it they are sorted and
	// spilled to a run file on disk (default 8 MiB).
	MergeMemoryBytes int
	// MergeMemoryKeys, when set, also bounds the number of changes held
	// in memory per mirror before a spill (tests use it to force spills).
	MergeMemoryKeys int
	// CheckpointInterval is the least number of versions between
	// checkpoints (default 10).
	CheckpointInterval int64
	// FixedCheckpoints checkpoints every CheckpointInterval versions. By
	// default a table is checkpointed once its commits since the last
	// checkpoint outweigh it (delta.CheckpointPolicy), so that checkpoints
	// of a table with many files do not cost more bytes than the commits.
	FixedCheckpoints bool
	// TableProperties are set in the configuration of every table: when it
	// is created, and in the next commit of one that holds other values
	// (for example the retentions remote engines' VACUUM should keep).
	TableProperties map[string]string
	// Restore, when set, brings a data file that is no longer on local
	// disk (pruned: the replica keeps it) back to dst before a rewrite of
	// every file of a changelog reads it; table is the directory name and
	// path the file's path as the log names it.
	Restore func(ctx context.Context, table, path, dst string) error
	// Compression is delta.CompressionSnappy (default) or CompressionZstd.
	Compression string
	// PollInterval is how often the queue is looked at when Notify is not
	// called (default 200ms).
	PollInterval time.Duration
	// Reader, when set, is the queue's other reader (the live view): the
	// queue is trimmed after a flush no further than it has read, so
	// that it has read a transaction before it is deleted (invariant 5 in
	// docs/architecture.md).
	Reader QueueReader
	// Committed, when set, is told after a flush's commits, so that the
	// uploader and the live view look for the new versions at once.
	Committed Notifier
	// Capture, when set, is asked how capture is doing: while it catches
	// up with PostgreSQL, flushes are held back (for at most MaxDefer),
	// since every byte it is behind is WAL the server keeps; and a batch
	// that starts in the backlog it last caught up with is applied as
	// soon as the queue holds that backlog whole, without waiting to
	// gather more: its changes waited for capture already (see
	// schedule.go).
	Capture  Capture
	MaxDefer time.Duration
	// Off says which performance tricks are off. The applier reads
	// ReadAhead, Adder and Writeback (tuning_readahead.go,
	// tuning_adder.go, delta's tuning_writeback.go): a batch is then read
	// only when its flush is due, a flush adds the changes it reads
	// itself, and a data file is written out by the fsync that closes it
	// (delta.WriteOptions.NoWriteback).
	Off tuning.Off
	// CrashRecord, when set, is the path of the crash record, which
	// quarantines a transaction held at MaxCrashExits abnormal exits in
	// a row (crashloop.go).
	CrashRecord string
	// Logger receives progress and problems; nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxDefer <= 0 {
		c.MaxDefer = time.Minute
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = time.Second
	}
	if c.FlushChanges <= 0 {
		c.FlushChanges = 100_000
	}
	if c.AppIDPrefix == "" {
		c.AppIDPrefix = "lakeside"
	}
	if c.EngineInfo == "" {
		c.EngineInfo = "lakeside"
	}
	if c.TargetFileRows <= 0 {
		c.TargetFileRows = 100_000
	}
	if c.RowGroupRows <= 0 {
		c.RowGroupRows = delta.DefaultRowGroupRows
	}
	if c.MergeMemoryBytes <= 0 {
		c.MergeMemoryBytes = 8 << 20
	}
	if c.MergeMemoryKeys <= 0 {
		c.MergeMemoryKeys = math.MaxInt
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = delta.DefaultCheckpointInterval
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Capture is what the applier asks of capture (source.Source is one).
type Capture interface {
	// CatchingUp reports whether capture drains a backlog.
	CatchingUp() bool
	// BacklogEnd is where the backlog capture last caught up with ends.
	BacklogEnd() store.LSN
	// Copies returns the source tables whose rows capture copies now at
	// full speed (see copywait.go).
	Copies() []string
}

// QueueReader is another reader of the queue (the live view's hub is one).
type QueueReader interface {
	// Offset is the end LSN of the last transaction it has read.
	Offset() store.LSN
}

// Notifier is told that there is something new to look at.
type Notifier interface{ Notify() }

// TableStatus describes one Delta table.
type TableStatus struct {
	// Name is the table's directory name, e.g. "public.orders_changes".
	Name string
	// Kind is KindMirror or KindChangelog.
	Kind    string
	Path    string
	Version int64
	// AppliedLSN is the txn version of the table: the end LSN of the last
	// source transaction it holds.
	AppliedLSN store.LSN
	// Commits, FilesAdded and FilesRemoved count the table's Delta commits
	// and the data files they added and removed since start.
	Commits, FilesAdded, FilesRemoved int64
}

// Applier applies the queue to the Delta tables.
type Applier struct {
	cfg    Config
	db     *store.DB
	log    *slog.Logger
	notify chan struct{}
	tm     *typemap.Map
	scan   batchScan

	// clock, when set, replaces time.Now in commits (tests).
	clock func() time.Time
	// now is the clock of the flush schedule: time.Now, or a fake in tests.
	now func() time.Time
	// arrivals records when changes arrive in the queue (Notify).
	arrivals arrivals
	// failpoint holds the points a crash is simulated at in tests; it is
	// empty unless built with the failpoints tag (failpoints_on.go).
	failpoint failpoints

	// evolved holds the schema versions evolveIdle has brought the Delta
	// tables to.
	evolved map[store.RelationKey]bool
	// tables holds the source tables loaded so far, by qualified name. It
	// is dropped after a failed flush and loaded again from disk.
	tables map[string]*sourceTable
	// lastRel and lastTable are the schema version of the last change
	// routed and its table: changes come in runs of one table.
	lastRel   *store.Relation
	lastTable *sourceTable
	// buffers passes the column buffers of one data file to the next,
	// and of one flush to the next; they are released when the queue is
	// applied or a flush fails.
	buffers delta.ColumnBuffers
	// gate has the flush's data writers encode one row group holding a
	// huge value at a time.
	gate delta.EncodeGate
	// warnings counts values that could not be represented in this flush;
	// warnMu guards it while the flush writes its tables' data at once.
	warnings map[string]int
	warnMu   sync.Mutex
	// read is how far the pending flush has read the queue;
	// readAheadFailed stops reading ahead until the next flush.
	read            queueRead
	readAheadFailed bool
	// readAheadSlice is about how many changes a call of readAhead reads:
	// the constant of that name, lowered by tests.
	readAheadSlice int64
	// adder, while a flush reads the queue, adds what it reads.
	adder *adder
	// crash keeps the crash record (crashloop.go); nil without one.
	crash *crashLoop

	// trimmed is how far the queue was last trimmed (see trimBehind).
	trimmed store.LSN
	// through is how far the tables that are not behind hold the queue,
	// and behind holds the source tables that do not, by name (see
	// failure.go).
	through store.LSN
	behind  map[string]*behindTable
	// backlog is set while the next batch starts in the backlog capture
	// last caught up with (see FlushingBacklog).
	backlog atomic.Bool
	// compactions are compactions written and waiting for Run to commit
	// them between two flushes (compact.go).
	compactions chan *compactRequest

	mu      sync.Mutex
	status  map[string]TableStatus
	applied store.LSN
	// failure is the failure of the last flush, when it failed as a
	// whole; failures is what Failures returns.
	failure  Failure
	failures []Failure
	// waits is what Waiting returns.
	waits map[string]string
	// replaced counts the values stored other than PostgreSQL holds them,
	// by source table (see replaced.go).
	replaced map[string]int64
	// replacedColumns are the columns whose first replacement was logged
	// ("table.column"); warnMu guards it.
	replacedColumns map[string]bool
}

// sourceTable is the state of one source table's two Delta tables.
type sourceTable struct {
	name      string
	cols      *columns
	changelog *changelog
	mirror    *mirror
	// Per flush: what each Delta table received.
	clFlush, mrFlush flushStats
	// held is set for a table that is behind and not retried in this
	// flush: it has no Delta tables open, and its changes are left in
	// the queue (see failure.go).
	held bool
	// waits is the held table's record while it waits for its copy
	// (copywait.go), which counts the changes it holds.
	waits *behindTable
	// err is the first failure of this flush to apply the table's
	// changes; its other changes in the flush are passed over, and
	// nothing of it is committed after it.
	err atomic.Pointer[error]
}

// fail records err as the table's failure in this flush, unless one is
// recorded. It is safe for the flush's goroutines.
func (st *sourceTable) fail(err error) { st.err.CompareAndSwap(nil, &err) }

// failed returns the table's failure in this flush, or nil.
func (st *sourceTable) failed() error {
	if p := st.err.Load(); p != nil {
		return *p
	}
	return nil
}

// abort drops what a flush gave the table's Delta tables.
func (st *sourceTable) abort() {
	if st.changelog != nil {
		st.changelog.abort()
	}
	if st.mirror != nil {
		st.mirror.abort()
	}
}

// flushStats counts what a flush gives one Delta table.
type flushStats struct {
	ci      commitInfo
	lastTxn store.LSN
}

func (f *flushStats) note(h *store.TxnHeader) {
	if f.lastTxn != h.EndLSN {
		f.lastTxn = h.EndLSN
		f.ci.txns++
		if f.ci.first == 0 {
			f.ci.first = h.CommitLSN
		}
	}
	f.ci.changes++
	f.ci.last = h.EndLSN
}

// New returns an applier that reads the queue of db.
func New(cfg Config, db *store.DB) *Applier {
	cfg.defaults()
	return &Applier{
		cfg:      cfg,
		db:       db,
		log:      cfg.Logger,
		notify:   make(chan struct{}, 1),
		tm:       typemap.New(),
		status:   map[string]TableStatus{},
		behind:   map[string]*behindTable{},
		now:      time.Now,
		arrivals: arrivals{epoch: time.Now()},

		compactions:    make(chan *compactRequest),
		readAheadSlice: readAheadSlice,
	}
}

// Notify tells the applier that new transactions are durable in the queue.
// It never blocks; without it the applier polls. The time of the call is
// the transactions' arrival, from which their flush is due (see
// schedule.go).
func (a *Applier) Notify() {
	a.arrivals.note(a.now())
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// Applied returns the position up to which every table applied the queue:
// no further than a table that is behind (see Failures).
func (a *Applier) Applied() store.LSN {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied
}

// FlushingBacklog reports whether the queue holds transactions of the
// backlog capture last caught up with (Config.Capture) that the tables
// do not hold yet: the applier reads and commits them as soon as it can,
// and work that can wait, such as the live view reading the same
// transactions, waits for it rather than share the CPUs.
func (a *Applier) FlushingBacklog() bool { return a.backlog.Load() }

// Tables returns the status of the Delta tables, sorted by name.
func (a *Applier) Tables() []TableStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]TableStatus, 0, len(a.status))
	for _, s := range a.status {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (a *Applier) setStatus(dt *deltaTable) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.status[dt.name]
	a.status[dt.name] = TableStatus{Name: dt.name, Kind: dt.kind, Path: dt.t.Path(), Version: dt.version, AppliedLSN: dt.applied,
		Commits: old.Commits, FilesAdded: old.FilesAdded, FilesRemoved: old.FilesRemoved}
}

// countCommit adds a commit of actions to the counts of dt's status.
func (a *Applier) countCommit(dt *deltaTable, actions []delta.Action) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.status[dt.name]
	st.Commits++
	for _, act := range actions {
		switch act.(type) {
		case *delta.Add:
			st.FilesAdded++
		case *delta.Remove:
			st.FilesRemoved++
		}
	}
	a.status[dt.name] = st
}

// Run applies the queue until ctx ends, and returns nil then. A flush that
// fails as a whole is logged and retried with backoff, starting again from
// what the Delta tables and the state file say; a table that fails falls
// behind while the others go on (see failure.go). Both are reported by
// Failures until they apply again. Run returns an error only when the
// state file cannot be read.
func (a *Applier) Run(ctx context.Context) error {
	if err := a.start(ctx); err != nil {
		return err
	}
	defer func() {
		if ctx.Err() != nil {
			a.stopCrashLoop()
		}
	}()
	sched := &schedule{interval: a.cfg.FlushInterval, flushChanges: int64(a.cfg.FlushChanges), maxDefer: a.cfg.MaxDefer}
	// A flush that failed as a whole is tried again after 1 s, doubling
	// to 30 s; retrying says one did.
	retry := backoff.New(backoff.Policy{Min: time.Second, Max: 30 * time.Second, Factor: 2})
	retrying := false
	for {
		if ctx.Err() != nil {
			return nil
		}
		a.serveCompactions(ctx)
		// The arrivals are taken before the queue is read, so that a
		// change the batch misses is recorded for the next one.
		if t, ok := a.arrivals.take(); ok {
			sched.arrive(t)
		}
		upTo, changes, full, err := a.nextBatch()
		if err != nil {
			return err
		}
		wait := a.cfg.PollInterval
		if upTo == 0 && a.yieldToNone() {
			// A table catching up goes on at once.
			continue
		}
		if upTo == 0 {
			// The Parquet column buffers of one flush are lent to the
			// next while flushes follow each other, and let go once
			// the queue is applied.
			a.buffers.Release()
			a.backlog.Store(false)
			sched.idle()
			a.trimBehind()
			a.evolveIdle(ctx)
		} else {
			now := a.now()
			var deferring bool
			var backlogEnd store.LSN
			if a.cfg.Capture != nil {
				deferring, backlogEnd = a.cfg.Capture.CatchingUp(), a.cfg.Capture.BacklogEnd()
			}
			backlog := a.scan.first <= backlogEnd
			a.backlog.Store(backlog)
			// While a table catches up, the other tables' flushes in
			// between wait for no more changes.
			due := sched.due(now, changes, full, deferring, backlog || a.catchingUp(now), backlog && a.scan.durable < backlogEnd)
			switch {
			case due.IsZero():
				// Capture catches up first; the batch is read
				// meanwhile, a slice at a time.
				if a.readAhead(ctx, upTo) {
					continue
				}
			case !now.Before(due):
				err := a.flush(ctx, upTo)
				var failed tableErrors
				switch {
				case err == nil || errors.As(err, &failed):
					// The tables that failed are retried on their
					// own (settle logged them).
					a.failFlush(nil)
					sched.flushed(a.now().Sub(now), full)
					retry.Reset()
					retrying = false
					continue
				case ctx.Err() != nil:
					return nil
				}
				a.failFlush(err)
				wait, retrying = retry.Next(), true
				a.log.Error("apply failed; retrying", "err", err, "retry_in", wait)
			default:
				// Not due yet: what is queued is read meanwhile, so
				// that the flush has only the newest changes left to
				// read. (Once capture has caught up, the last of a
				// backlog arrives in the time before its flush.)
				if a.readAhead(ctx, upTo) {
					continue
				}
				wait = min(wait, due.Sub(now))
			}
		}
		timer := time.NewTimer(wait)
		woken := true
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-a.notify:
		case req := <-a.compactions:
			req.done <- a.applyCompaction(ctx, req)
		case <-timer.C:
			woken = false
		}
		if woken && retrying {
			// A retry waits its backoff out, whatever arrives.
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}
		timer.Stop()
	}
}

// start reads the applied position and the status of existing tables, and
// removes spill files left by a crash.
func (a *Applier) start(ctx context.Context) error {
	if err := os.MkdirAll(a.cfg.TablesDir, 0o750); err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	os.RemoveAll(filepath.Join(a.cfg.TablesDir, ".spill"))
	var applied store.LSN
	if err := a.db.View(func(r *store.Reader) (err error) { applied, err = r.Applied(); return err }); err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	a.mu.Lock()
	a.applied = applied
	a.mu.Unlock()
	a.through = applied
	a.scan = batchScan{base: applied}
	a.startCrashLoop()
	entries, err := os.ReadDir(a.cfg.TablesDir)
	if err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		t, err := delta.Open(ctx, filepath.Join(a.cfg.TablesDir, e.Name()))
		if err != nil {
			continue
		}
		snap, err := t.Snapshot(ctx)
		if err != nil {
			a.log.Warn("unreadable table", "table", e.Name(), "err", err)
			continue
		}
		for _, kind := range []string{KindMirror, KindChangelog} {
			if v, ok := snap.AppTransactionVersion(a.cfg.AppIDPrefix + "/" + e.Name() + "/" + kind); ok {
				a.setStatus(&deltaTable{name: e.Name(), kind: kind, t: t, version: snap.Version(), applied: store.LSN(v)})
			}
		}
	}
	return nil
}

// nextBatch returns the end LSN of the last transaction of the next flush
// (zero when the queue holds nothing after where the batch starts), the
// number of changes up to it, and whether more is queued after it. The
// batch starts where the tables are, or where a table behind is that is
// due for a retry (batchStart).
//
// The scan is incremental: while the batch's start stays put, only
// transactions queued since the last call are read, so a queue that grows
// by many small transactions is not read again from its start each time.
func (a *Applier) nextBatch() (upTo store.LSN, changes int64, full bool, err error) {
	from, retrying := a.batchStart(a.now())
	if sc := &a.scan; from != sc.base || !slices.Equal(retrying, sc.retrying) {
		*sc = batchScan{base: from, retrying: retrying, id: sc.id + 1}
	}
	err = a.db.View(func(r *store.Reader) (err error) {
		sc := &a.scan
		if sc.durable, err = r.Checkpoint(); err != nil {
			return err
		}
		if sc.full {
			return nil
		}
		bounds, err := schemaChanges(r)
		if err != nil {
			return err
		}
		// Batches in the part of the queue the last run was killed
		// working on hold one transaction each (crashloop.go).
		narrow := a.crash != nil && a.crash.narrow(sc.base)
		return r.Txns(max(sc.base, sc.upTo), func(h *store.TxnHeader, _ *store.TxnCursor) error {
			if sc.upTo != 0 && narrow {
				sc.full = true
				return store.ErrStopScan
			}
			if sc.upTo != 0 && sc.changes+h.Changes > int64(a.cfg.FlushChanges) {
				sc.full = true
				return store.ErrStopScan
			}
			if sc.upTo != 0 && changedBetween(bounds, sc.upTo, h.EndLSN) {
				// A new schema version: the batch ends before it, and
				// the next starts with the tables following it.
				sc.full = true
				return store.ErrStopScan
			}
			if sc.first == 0 {
				sc.first = h.EndLSN
			}
			sc.upTo = h.EndLSN
			sc.changes += h.Changes
			sc.txns++
			return nil
		})
	})
	if err != nil {
		return 0, 0, false, fmt.Errorf("applier: read queue: %w", err)
	}
	return a.scan.upTo, a.scan.changes, a.scan.full, nil
}

// schemaChanges returns the positions of the schema history's versions
// that follow an earlier version of their table (by the name it is
// captured as: a re-created table's first version follows the old
// table's), sorted.
func schemaChanges(r *store.Reader) ([]store.LSN, error) {
	rels, err := r.Relations()
	if err != nil {
		return nil, err
	}
	first := map[string]store.LSN{}
	for k, rel := range rels {
		if f, ok := first[rel.TableName()]; !ok || k.LSN < f {
			first[rel.TableName()] = k.LSN
		}
	}
	var out []store.LSN
	for k, rel := range rels {
		if k.LSN != first[rel.TableName()] {
			out = append(out, k.LSN)
		}
	}
	slices.Sort(out)
	return out, nil
}

// changedBetween reports whether a schema version of bounds (sorted) is
// after from and at or before to.
func changedBetween(bounds []store.LSN, from, to store.LSN) bool {
	i, _ := slices.BinarySearch(bounds, from+1)
	return i < len(bounds) && bounds[i] <= to
}

// batchScan remembers how far nextBatch has read the queue past base, the
// position the batch starts from, where the first transaction it found
// ends, and the queue's checkpoint when it last looked (durable). retrying
// are the tables behind that the batch retries, sorted; id tells one scan
// from the next, so that what was read ahead of one is not taken for the
// next (queueRead).
type batchScan struct {
	base, first, upTo, durable store.LSN
	changes                    int64
	txns                       int
	full                       bool
	retrying                   []string
	id                         uint64
}

// applyAll applies everything queued now, in flushes of at most
// FlushChanges changes.
func (a *Applier) applyAll(ctx context.Context) error {
	for {
		upTo, _, _, err := a.nextBatch()
		if err != nil {
			return err
		}
		if upTo == 0 && a.yieldToNone() {
			continue
		}
		if upTo == 0 {
			a.buffers.Release()
			a.evolveIdle(ctx)
			return nil
		}
		if err := a.flush(ctx, upTo); err != nil {
			return err
		}
	}
}

// fail calls the failpoint, if any: only tests built with the failpoints
// tag have one.
func (a *Applier) fail(point, table string) error {
	return a.failpoint.fail(point, table)
}

// warn counts a value problem; flush logs the counts once per flush. It is
// safe for the concurrent writes of a flush (writeData).
func (a *Applier) Warn(where, problem string) {
	a.warnMu.Lock()
	defer a.warnMu.Unlock()
	if a.warnings == nil {
		a.log.Warn(problem, "where", where)
		return
	}
	a.warnings[where+": "+problem]++
}

// writeOptions are the options of a data file that is expected to get
// expectRows rows (a hint; zero when not known), of which it holds
// TargetFileRows at most.
func (a *Applier) writeOptions(expectRows int64) delta.WriteOptions {
	return delta.WriteOptions{Compression: a.cfg.Compression, CreatedBy: a.cfg.EngineInfo, Buffers: &a.buffers, EncodeGate: &a.gate,
		RowGroupRows: a.cfg.RowGroupRows, ExpectedRows: min(expectRows, a.cfg.TargetFileRows), NoWriteback: a.cfg.Off.Writeback}
}

// changesAhead is how many changes of the transaction of h are still to
// be added, counting the one at seq (which counts from 1): at most the
// rows a data file opened for it gets from it.
func changesAhead(h *store.TxnHeader, seq int64) int64 {
	return h.Changes - seq + 1
}

// errNoRelation reports a change whose schema version is not in the history.
var errNoRelation = errors.New("change refers to an unknown schema version")

// errFileRows reports a mirror data file that does not hold as many rows as
// its stats in the Delta log say: the merge that would rewrite it stops
// rather than drop rows.
var errFileRows = errors.New("data file and its stats disagree")

// errVersionBoundary stops a table's flush at a change of a schema
// version the flush met after changes of an earlier one (a version
// recorded at a position the batch was read past, as the catalog watcher
// may while capture catches up): the table is not failing, it continues
// from there in a flush of its own at once (settle).
var errVersionBoundary = errors.New("schema version met inside a flush")

// errSchemaMismatch reports a change whose values do not match its schema
// version: the schema history is wrong, and nothing is guessed.
var errSchemaMismatch = errors.New("change does not match its schema version")
