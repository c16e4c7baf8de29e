package applier

import (
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct{ start, t time.Time }

func newFakeClock() *fakeClock {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &fakeClock{start: t, t: t}
}

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// at returns the time d after the clock's start.
func (c *fakeClock) at(d time.Duration) time.Time { return c.start.Add(d) }

func newFakeApplier(clock *fakeClock) *Applier {
	a := New(Config{FlushInterval: time.Second, FlushChanges: 1000}, nil)
	a.now = clock.now
	a.arrivals = arrivals{epoch: clock.now()}
	return a
}

// step runs what Run does before it decides: it takes the arrivals, then
// reads the queue, which it finds holding changes.
func step(a *Applier, s *schedule, changes int64, full bool) time.Time {
	return stepDeferring(a, s, changes, full, false)
}

// stepDeferring is step while capture is (deferring) or is not catching up.
func stepDeferring(a *Applier, s *schedule, changes int64, full, deferring bool) time.Time {
	if t, ok := a.arrivals.take(); ok {
		s.arrive(t)
	}
	return s.due(a.now(), changes, full, deferring)
}

func TestFlushDueFromArrivalNotFromWhenTheApplierLooks(t *testing.T) {
	ms := time.Millisecond
	clock := newFakeClock()
	a := newFakeApplier(clock)
	s := &schedule{interval: time.Second, flushChanges: 1000, maxDefer: time.Minute}

	// A change arrives at 0; the applier, busy, looks at 300 ms: the
	// flush is due at 1 s, not at 1.3 s.
	a.Notify()
	clock.advance(300 * ms)
	if due := step(a, s, 1, false); !due.Equal(clock.at(1000 * ms)) {
		t.Fatalf("due at %v, want 1s", due.Sub(clock.at(0)))
	}

	// The flush starts at 1 s and takes 400 ms; a change arrives during
	// it, at 1.1 s. Its flush is due 1 s after its arrival, minus the
	// 400 ms a flush takes: at 1.7 s, so that it ends by 2.1 s.
	clock.advance(700 * ms)
	if t, ok := a.arrivals.take(); ok {
		s.arrive(t)
	}
	start := clock.now()
	clock.advance(100 * ms)
	a.Notify()
	clock.advance(300 * ms)
	s.flushed(clock.now().Sub(start), false)
	if due := step(a, s, 1, false); !due.Equal(clock.at(1700 * ms)) {
		t.Fatalf("due at %v, want 1.7s", due.Sub(clock.at(0)))
	}

	// A flush never starts more than half the interval early, however
	// long the last one took.
	s.flushed(3*time.Second, false)
	clock.t = clock.at(5 * time.Second)
	a.Notify()
	if due := step(a, s, 1, false); !due.Equal(clock.at(5500 * ms)) {
		t.Fatalf("due at %v, want 5.5s", due.Sub(clock.at(0)))
	}
}

func TestFlushDueWithoutNotificationsAndAtLimits(t *testing.T) {
	ms := time.Millisecond
	clock := newFakeClock()
	a := newFakeApplier(clock)
	s := &schedule{interval: time.Second, flushChanges: 1000, maxDefer: 2 * time.Second}

	// Found by polling: arrived when found at the latest.
	clock.advance(200 * ms)
	if due := step(a, s, 1, false); !due.Equal(clock.at(1200 * ms)) {
		t.Fatalf("due at %v, want 1.2s", due.Sub(clock.at(0)))
	}
	// Looking again later does not move the deadline.
	clock.advance(500 * ms)
	if due := step(a, s, 2, false); !due.Equal(clock.at(1200 * ms)) {
		t.Fatalf("due at %v, want 1.2s", due.Sub(clock.at(0)))
	}
	// A batch of flushChanges changes, or one with more queued after it,
	// is due at once.
	if due := s.due(clock.now(), 1000, false, false); !due.Equal(clock.now()) {
		t.Fatalf("a batch of flushChanges changes is due at %v, want now", due.Sub(clock.at(0)))
	}
	if due := s.due(clock.now(), 3, true, false); !due.Equal(clock.now()) {
		t.Fatalf("a full batch is due at %v, want now", due.Sub(clock.at(0)))
	}
	// After a full batch is flushed, what is left is older still: its
	// deadline stays.
	s.flushed(50*ms, true)
	if due := step(a, s, 1, false); !due.Equal(clock.at(1150 * ms)) {
		t.Fatalf("after a full batch, due at %v, want 1.15s", due.Sub(clock.at(0)))
	}
	// Deferring holds the flush back until maxDefer after the arrival.
	if due := s.due(clock.now(), 1, false, true); !due.IsZero() {
		t.Fatalf("deferred flush due at %v, want held back", due.Sub(clock.at(0)))
	}
	clock.t = clock.at(2300 * ms)
	if due := s.due(clock.now(), 1, false, true); !due.Equal(clock.at(1150 * ms)) {
		t.Fatalf("flush deferred past maxDefer due at %v, want 1.15s", due.Sub(clock.at(0)))
	}
	// An empty queue forgets the arrivals: a later change starts its own
	// clock.
	s.idle()
	clock.t = clock.at(10 * time.Second)
	a.Notify()
	clock.advance(100 * ms)
	if due := step(a, s, 1, false); !due.Equal(clock.at(10950 * ms)) {
		t.Fatalf("due at %v, want 10.95s", due.Sub(clock.at(0)))
	}
}

func TestArrivalsKeepTheFirstUntilTaken(t *testing.T) {
	clock := newFakeClock()
	r := arrivals{epoch: clock.now()}
	if _, ok := r.take(); ok {
		t.Fatal("an arrival before any was noted")
	}
	r.note(clock.now())
	clock.advance(time.Second)
	r.note(clock.now())
	if got, ok := r.take(); !ok || !got.Equal(clock.at(0)) {
		t.Fatalf("took %v, %v; want the first arrival", got, ok)
	}
	if _, ok := r.take(); ok {
		t.Fatal("an arrival taken twice")
	}
}

// TestBacklogTailIsFlushedAtOnce: after holding back for capture, the
// changes that arrive during the first flush (the end of the backlog) are
// flushed right after it, and batching resumes after that.
func TestBacklogTailIsFlushedAtOnce(t *testing.T) {
	ms := time.Millisecond
	clock := newFakeClock()
	a := newFakeApplier(clock)
	s := &schedule{interval: time.Second, flushChanges: 1000, maxDefer: time.Minute}

	// Held back while capture catches up.
	a.Notify()
	clock.advance(3 * time.Second)
	if due := stepDeferring(a, s, 500, false, true); !due.IsZero() {
		t.Fatalf("due at %v while capture catches up, want held back", due.Sub(clock.at(0)))
	}
	// Caught up: the backlog is due at once; its flush takes 300 ms, and
	// the backlog's last transaction arrives during it.
	if due := step(a, s, 900, false); due.After(clock.now()) {
		t.Fatalf("backlog due at %v, want by now", due.Sub(clock.at(0)))
	}
	start := clock.now()
	clock.advance(100 * ms)
	a.Notify()
	clock.advance(200 * ms)
	s.flushed(clock.now().Sub(start), false)
	if due := step(a, s, 1, false); !due.Equal(clock.now()) {
		t.Fatalf("the backlog's tail is due at %v, want now (%v)", due.Sub(clock.at(0)), clock.now().Sub(clock.at(0)))
	}
	// After the tail's flush, a new change waits for its batch as usual.
	s.flushed(10*ms, false)
	a.Notify()
	if due := step(a, s, 1, false); !due.Equal(clock.now().Add(time.Second - 10*ms)) {
		t.Fatalf("a change after the backlog is due at %v, want in 990ms", due.Sub(clock.now()))
	}
}
