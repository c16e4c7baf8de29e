package applier

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/store"
)

// A source table whose changes cannot be applied (a value its Delta
// tables cannot take, a data file that cannot be written, a commit that
// fails) does not hold up the other tables. A flush commits every table it
// can; a table that failed falls behind: the applier remembers the
// position up to which it holds the queue, and the state file's applied
// position, below which the queue is trimmed, goes no further than it. Its
// changes so stay queued, nothing is dropped, and the queue grows until the
// table is fixed (or the disk is full, which pauses capture). The table is
// retried with backoff: a retry reads the queue again from the table's
// position, the other tables passing over what they hold (their txn
// versions), and once it holds the queue up to where the others are, it is
// no longer behind. After a restart every table is read again from the
// applied position, and a table still failing falls behind again.

// Failure is what the applier cannot apply: one source table, or, with no
// table, every table (the queue cannot be read, say).
type Failure struct {
	// Table is the source table, "schema.table"; empty when every table
	// is stopped.
	Table string
	// Err is the last failure.
	Err error
	// Since is when the failures began.
	Since time.Time
	// Applied is how far the table holds the queue.
	Applied store.LSN
}

// behindTable is a source table that does not hold the queue up to where
// the applier's other tables are (through).
type behindTable struct {
	// at is the end LSN up to which the table holds the queue.
	at store.LSN
	// err is its last failure; nil once a retry succeeded while it
	// catches up.
	err error
	// since is when it first failed, or began to wait for its copy;
	// retry is when it is tried again, after tableBackoff of failures,
	// the failures since it last applied.
	since, retry time.Time
	failures     int
	// waiting is set while the table waits for its copy
	// (copywait.go), and waitingChanges counts the changes it
	// held meanwhile.
	waiting        bool
	waitingChanges int64
	// yield is set once the table caught up in a flush without reaching
	// the others: the next batch is theirs, then its own again.
	yield bool
}

// Backoff of a failing table's retries.
const (
	minTableBackoff = time.Second
	maxTableBackoff = time.Minute
)

// tableBackoff returns the wait before a failing table is retried after
// its nth failure in a row, counting from 0: minTableBackoff doubling to
// maxTableBackoff.
func tableBackoff(n int) time.Duration {
	return backoff.Policy{Min: minTableBackoff, Max: maxTableBackoff, Factor: 2}.Delay(n)
}

// tableErrors reports the source tables a flush could not apply, by name;
// the flush committed the others.
type tableErrors map[string]error

func (e tableErrors) Error() string {
	names := make([]string, 0, len(e))
	for name := range e {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + ": " + e[name].Error()
	}
	return "cannot apply " + strings.Join(parts, "; ")
}

func (e tableErrors) Unwrap() []error {
	out := make([]error, 0, len(e))
	for _, err := range e {
		out = append(out, err)
	}
	return out
}

// batchStart returns where the next batch starts reading the queue, and
// the tables behind that it retries: from through, where the tables that
// are not behind are, or from the lowest position of a table behind whose
// retry is due.
func (a *Applier) batchStart(now time.Time) (from store.LSN, retrying []string) {
	a.waitForCopies(now)
	from = a.through
	for name, b := range a.behind {
		if !b.waiting && !b.yield && !now.Before(b.retry) {
			retrying = append(retrying, name)
			from = min(from, b.at)
		} else if st := a.tables[name]; st != nil && !st.held {
			// Open since its last retry, which left it behind: the
			// batch holds its changes, not the state it had then.
			st.abort()
			delete(a.tables, name)
			a.lastRel, a.lastTable = nil, nil
		}
	}
	slices.Sort(retrying)
	return from, retrying
}

// held reports whether the changes of the source table name are left in
// the queue in this flush: it is behind, and not retried now.
func (a *Applier) held(name string) bool {
	if _, ok := a.behind[name]; !ok {
		return false
	}
	_, retried := slices.BinarySearch(a.scan.retrying, name)
	return !retried
}

// settle records what a flush that read the queue up to upTo did to the
// tables behind: those it retried with success are at upTo (and no longer
// behind once that is where the others are), those in failed fall or stay
// behind. through moves to upTo. It returns the lowest position every
// table holds, which the applied position becomes.
func (a *Applier) settle(upTo store.LSN, failed tableErrors) store.LSN {
	now := a.now()
	old := a.through
	a.through = max(a.through, upTo)
	for name, b := range a.behind {
		if _, retried := slices.BinarySearch(a.scan.retrying, name); !retried {
			// The others had their flush.
			b.yield = false
		}
	}
	for _, name := range a.scan.retrying {
		b := a.behind[name]
		if b == nil || failed[name] != nil {
			continue
		}
		if b.at = max(b.at, upTo); b.at >= a.through {
			delete(a.behind, name)
			if b.err != nil {
				a.log.Info("table applies again", "table", name, "failing_since", b.since, "up_to", upTo)
			}
			continue
		}
		if b.err != nil {
			a.log.Info("table applies again; catching up", "table", name, "failing_since", b.since, "at", b.at, "through", a.through)
		}
		b.err, b.failures, b.retry, b.yield = nil, 0, now, true
	}
	for name, err := range failed {
		b := a.behind[name]
		if b == nil {
			b = &behindTable{at: old}
			a.behind[name] = b
		}
		if errors.Is(err, errVersionBoundary) {
			// Not a failure: the table goes on from there at once.
			b.retry, b.failures, b.yield = now, 0, false
			a.log.Info("table continues in a flush of its own at a schema version met inside a flush", "table", name, "err", err, "at", b.at)
			continue
		}
		if b.err == nil {
			b.since = now
		}
		b.err = err
		wait := tableBackoff(b.failures)
		b.failures++
		b.retry = now.Add(wait)
		a.log.Error("table cannot be applied; its changes stay queued and it is retried", "table", name, "err", err,
			"failing_since", b.since, "at", b.at, "retry_in", wait)
	}
	floor := a.through
	for _, b := range a.behind {
		floor = min(floor, b.at)
	}
	// The next batch starts where the tables now are (nextBatch moves
	// it back for a retry that is due).
	a.scan = batchScan{base: a.through, id: a.scan.id + 1}
	a.setFailures()
	a.setWaits()
	return floor
}

// setFailures publishes the failures for Failures.
func (a *Applier) setFailures() {
	var out []Failure
	for name, b := range a.behind {
		if b.err != nil {
			out = append(out, Failure{Table: name, Err: b.err, Since: b.since, Applied: b.at})
		}
	}
	slices.SortFunc(out, func(x, y Failure) int { return strings.Compare(x.Table, y.Table) })
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failure.Err != nil {
		out = append([]Failure{a.failure}, out...)
	}
	a.failures = out
}

// failFlush records that a flush failed as a whole with err; nil records
// one that did not.
func (a *Applier) failFlush(err error) {
	a.mu.Lock()
	switch {
	case err == nil:
		a.failure = Failure{}
	case a.failure.Err == nil:
		a.failure = Failure{Err: err, Since: a.now(), Applied: a.applied}
	default:
		a.failure.Err = err
	}
	a.mu.Unlock()
	a.setFailures()
}

// Failures returns what the applier cannot apply now: first the failure of
// every table, if the last flush failed as a whole, then each table that
// failed, by name. It is empty while everything applies.
func (a *Applier) Failures() []Failure {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.failures)
}
