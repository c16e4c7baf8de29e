package applier

import (
	"sync/atomic"
	"time"
)

// When a flush is due. FlushInterval is the longest a committed change
// waits before it is in the Delta tables, so the clock of a change starts
// when it arrives in the queue, not when the applier gets round to looking
// (it may be busy with the previous flush then), and a flush is started
// early enough to end by the deadline: FlushInterval after the oldest
// waiting change arrived, minus as long as the last flush took (at most
// half the interval, so that a slow flush still leaves time to batch).
// Until a flush is due, its batch is read ahead (see readAhead).
//
// A backlog is the exception. While capture catches up the flushes are held
// back (the first batch is read ahead meanwhile). Capture counts as caught
// up with the backlog's last megabyte still to come; the backlog is what
// the server's WAL held then (Config.Capture). Its changes have waited
// for capture already, so once its last transactions are durable in the
// queue (or half an interval after capture caught up, should they not
// come), the backlog is applied at once, in as many batches as it takes.
//
// Arrival times are taken on this process's monotonic clock: Notify, which
// capture calls once a transaction is durable in the queue, records the
// first arrival since the applier last looked; a change the applier finds
// without having been told arrived at the latest when it is found. The
// commit time PostgreSQL records is not used, as that server's clock need
// not agree with this one: a change reaches the queue milliseconds after
// its commit.

// arrivals records when the first change arrived in the queue since the
// applier last took the record. It is safe for concurrent use.
type arrivals struct {
	epoch time.Time
	first atomic.Int64 // nanoseconds since epoch, plus one; zero: none
}

// note records an arrival at now, unless an earlier one is recorded.
func (r *arrivals) note(now time.Time) {
	r.first.CompareAndSwap(0, int64(now.Sub(r.epoch))+1)
}

// take returns the recorded arrival, if any, and forgets it.
func (r *arrivals) take() (time.Time, bool) {
	n := r.first.Swap(0)
	if n == 0 {
		return time.Time{}, false
	}
	return r.epoch.Add(time.Duration(n - 1)), true
}

// schedule decides when the changes waiting in the queue are flushed.
type schedule struct {
	interval time.Duration
	// flushChanges flushes at once when that many changes wait.
	flushChanges int64
	// maxDefer bounds how long deferring holds a flush back.
	maxDefer time.Duration
	// arrived is when the oldest change not yet flushed arrived; zero
	// when none is known to wait.
	arrived time.Time
	// lastFlush is how long the last flush took.
	lastFlush time.Duration
	// caughtUp is when a batch of the backlog was first found with the
	// backlog's end still to come; zero when none waits.
	caughtUp time.Time
}

// arrive records that changes arrived at t.
func (s *schedule) arrive(t time.Time) {
	if s.arrived.IsZero() || t.Before(s.arrived) {
		s.arrived = t
	}
}

// due returns when to flush the batch the applier found at now: changes
// in all, full when more is queued after it (a batch is bounded by
// flushChanges), deferring when capture asks the later stages to hold back,
// backlog when the batch starts with a transaction of the backlog capture
// last caught up with, and arriving when, besides, the rest of that backlog
// is not durable in the queue yet.
func (s *schedule) due(now time.Time, changes int64, full, deferring, backlog, arriving bool) time.Time {
	s.arrive(now) // found now, so arrived by now at the latest
	if deferring && now.Sub(s.arrived) < s.maxDefer {
		s.caughtUp = time.Time{}
		return time.Time{} // not before capture has caught up (see Run)
	}
	if !arriving {
		s.caughtUp = time.Time{}
	} else if s.caughtUp.IsZero() {
		s.caughtUp = now
	}
	switch {
	case full || changes >= s.flushChanges:
		return now
	case arriving && now.Sub(s.caughtUp) < s.interval/2:
		return s.caughtUp.Add(s.interval / 2)
	case backlog:
		return now
	}
	lead := min(s.lastFlush, s.interval/2)
	return s.arrived.Add(s.interval - lead)
}

// idle records that nothing waits in the queue: every change that arrived
// before the queue was read is applied.
func (s *schedule) idle() {
	s.arrived = time.Time{}
}

// flushed records a flush that took took. When the batch was full, changes
// at least as old as the flushed ones still wait, and their arrival stays.
func (s *schedule) flushed(took time.Duration, full bool) {
	s.lastFlush = took
	if !full {
		s.arrived = time.Time{}
	}
}
