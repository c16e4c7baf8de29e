package applier

import (
	"errors"
	"slices"
	"time"
)

// A table whose rows capture copies at full speed (a backfill: a table
// added or re-created, a resync, a rewrite) waits while the copy runs: the
// applier holds its changes in the queue, as it does a failing table's
// (failure.go), and applies the other tables' as they come. On a machine
// of few cores, writing the copied rows to the table's Delta tables as
// they are queued takes the CPU that the copy and PostgreSQL need. A flush
// reads a chunk of copied rows of a waiting table no further than its
// first record (TxnHeader.Copied). Once the copy is queued (or once
// maxWaitingChanges of the table's changes wait, or maxWaitingTime has
// passed), the table catches up, flush after flush from where it waits,
// each followed by a flush of the other tables' new changes, which so
// stay fresh. Meanwhile its Delta tables stay as they were before the
// copy began, whole.
//
// A copy paced by source.backfill_rows_per_second is not waited for: its
// table is applied as it is copied.
//
// This is how the applier applies a copy, and it has no off switch: the
// queue marks each chunk of copied rows for it (TxnHeader.Copied), and the
// failure path holds and resumes a waiting table as it does a failing one
// (Applier.batchStart, Applier.settle). make bench's TestBenchBackfill
// measures it: the copy's speed against COPY TO STDOUT, and the time
// until the copied rows are in the mirror.

// maxWaitingChanges is how many changes of a table may wait for its copy,
// which bounds the queue it grows, and maxWaitingTime how long its Delta
// tables may lag. Past either, the table catches up while its copy goes
// on, and waits again once it has.
const (
	maxWaitingChanges = 4_000_000
	maxWaitingTime    = 30 * time.Second
)

// errPassOver ends the reading of a transaction whose rest a flush passes
// over.
var errPassOver = errors.New("pass over the rest of the transaction")

// waitForCopies moves the tables capture copies now behind, to wait for
// their copies, and has those whose copy is queued, or that hold
// maxWaitingChanges changes waiting, catch up. It is called as each batch
// starts (batchStart).
func (a *Applier) waitForCopies(now time.Time) {
	if a.cfg.Capture == nil {
		return
	}
	copies := a.cfg.Capture.Copies()
	for _, name := range copies {
		if _, ok := a.behind[name]; ok {
			continue
		}
		// Changes of the table read ahead for the batch under way are
		// dropped with its state, and read again when it catches up.
		if st := a.tables[name]; st != nil {
			st.abort()
			delete(a.tables, name)
			a.lastRel, a.lastTable = nil, nil
		}
		a.behind[name] = &behindTable{at: a.through, waiting: true, since: now}
		a.log.Info("table waits while its rows are copied; its changes stay queued", "table", name, "at", a.through)
	}
	for name, b := range a.behind {
		if !b.waiting {
			continue
		}
		copying := slices.Contains(copies, name)
		if copying && b.waitingChanges < maxWaitingChanges && now.Sub(b.since) < maxWaitingTime {
			continue
		}
		b.waiting, b.retry = false, now
		a.log.Info("table catches up", "table", name, "at", b.at, "changes_waiting", b.waitingChanges, "copy_queued", !copying)
	}
	a.setWaits()
}

// What Waiting says of a table.
const (
	WaitsForCopy = "waiting for the copy"
	CatchingUp   = "catching up"
)

// setWaits publishes for Waiting the tables behind that do not fail.
func (a *Applier) setWaits() {
	waits := map[string]string{}
	for name, b := range a.behind {
		switch {
		case b.waiting:
			waits[name] = WaitsForCopy
		case b.err == nil:
			waits[name] = CatchingUp
		}
	}
	a.mu.Lock()
	a.waits = waits
	a.mu.Unlock()
}

// Waiting returns the source tables whose Delta tables are behind the
// others with no failure, by name: WaitsForCopy while the table waits for
// its copy, CatchingUp once it catches up.
func (a *Applier) Waiting() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waits
}

// catchingUp reports whether a table behind is due to catch up, with no
// failure: the flushes of the other tables in between are not held back
// for more changes (Run).
func (a *Applier) catchingUp(now time.Time) bool {
	for _, b := range a.behind {
		if !b.waiting && b.err == nil && !now.Before(b.retry) {
			return true
		}
	}
	return false
}

// yieldToNone ends the yields of the tables catching up (see
// behindTable.yield) when the other tables have nothing to flush, and
// reports whether there were any.
func (a *Applier) yieldToNone() bool {
	yielded := false
	for _, b := range a.behind {
		yielded = yielded || b.yield
		b.yield = false
	}
	return yielded
}
