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
	return stepDeferring(a, s, changes, full, false, false, false)
}

// stepDeferring is step while capture is (deferring) or is not catching up,
// for a batch that starts in the last backlog or not, whose end is still
// arriving or not.
func stepDeferring(a *Applier, s *schedule, changes int64, full, deferring, backlog, arriving bool) time.Time {
	if t, ok := a.arrivals.take(); ok {
		s.arrive(t)
	}
	return s.due(a.now(), changes, full, deferring, backlog, arriving)
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
	if due := s.due(clock.now(), 1000, false, false, false, false); !due.Equal(clock.now()) {
		t.Fatalf("a batch of flushChanges changes is due at %v, want now", due.Sub(clock.at(0)))
	}
	if due := s.due(clock.now(), 3, true, false, false, false); !due.Equal(clock.now()) {
		t.Fatalf("a full batch is due at %v, want now", due.Sub(clock.at(0)))
	}
	// After a full batch is flushed, what is left is older still: its
	// deadline stays.
	s.flushed(50*ms, true)
	if due := step(a, s, 1, false); !due.Equal(clock.at(1150 * ms)) {
		t.Fatalf("after a full batch, due at %v, want 1.15s", due.Sub(clock.at(0)))
	}
	// Deferring holds the flush back until maxDefer after the arrival.
	if due := s.due(clock.now(), 1, false, true, false, false); !due.IsZero() {
		t.Fatalf("deferred flush due at %v, want held back", due.Sub(clock.at(0)))
	}
	clock.t = clock.at(2300 * ms)
	if due := s.due(clock.now(), 1, false, true, false, false); !due.Equal(clock.at(1150 * ms)) {
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

// TestBacklogIsFlushedAtOnce: after holding back for capture, the backlog
// waits for its last transactions, which arrive after capture counts as
// caught up, and is then due at once, batch after batch, including what
// arrives during its flushes; batching resumes with the first batch after
// the backlog. Should the backlog's end not arrive, the wait ends half an
// interval after capture caught up.
func TestBacklogIsFlushedAtOnce(t *testing.T) {
	ms := time.Millisecond
	clock := newFakeClock()
	a := newFakeApplier(clock)
	s := &schedule{interval: time.Second, flushChanges: 1000, maxDefer: time.Minute}

	// Held back while capture catches up, 300 ms into the backlog.
	a.Notify()
	clock.advance(300 * ms)
	if due := stepDeferring(a, s, 500, false, true, true, true); !due.IsZero() {
		t.Fatalf("due at %v while capture catches up, want held back", due.Sub(clock.at(0)))
	}
	// Caught up, with the backlog's last transactions still to come: the
	// flush waits for them, half an interval at most.
	caughtUp := clock.now()
	if due := stepDeferring(a, s, 900, false, false, true, true); !due.Equal(caughtUp.Add(500 * ms)) {
		t.Fatalf("backlog due %v after capture caught up, want 500ms while its end arrives", due.Sub(caughtUp))
	}
	// They are durable 40 ms later: due at once, though the first change
	// arrived 340 ms ago.
	clock.advance(40 * ms)
	if due := stepDeferring(a, s, 950, false, false, true, false); !due.Equal(clock.now()) {
		t.Fatalf("backlog due %v after its end arrived, want now", due.Sub(clock.now()))
	}
	// What arrives during its flush and starts in the backlog is due at
	// once too.
	start := clock.now()
	clock.advance(100 * ms)
	a.Notify()
	clock.advance(50 * ms)
	s.flushed(clock.now().Sub(start), false)
	if due := stepDeferring(a, s, 1, false, false, true, false); !due.Equal(clock.now()) {
		t.Fatalf("the backlog's end is due at %v, want now (%v)", due.Sub(clock.at(0)), clock.now().Sub(clock.at(0)))
	}
	// After the backlog, a new change waits for its batch as usual.
	s.flushed(10*ms, false)
	a.Notify()
	if due := step(a, s, 1, false); !due.Equal(clock.now().Add(time.Second - 10*ms)) {
		t.Fatalf("a change after the backlog is due at %v, want in 990ms", due.Sub(clock.now()))
	}

	// A backlog whose end does not arrive is due half an interval after
	// capture caught up.
	s = &schedule{interval: time.Second, flushChanges: 1000, maxDefer: time.Minute}
	a.Notify()
	stepDeferring(a, s, 500, false, true, true, true)
	caughtUp = clock.now()
	stepDeferring(a, s, 500, false, false, true, true)
	clock.advance(400 * ms)
	if due := stepDeferring(a, s, 500, false, false, true, true); !due.Equal(caughtUp.Add(500 * ms)) {
		t.Fatalf("a backlog whose end does not arrive is due %v after capture caught up, want 500ms", due.Sub(caughtUp))
	}
	clock.advance(200 * ms)
	if due := stepDeferring(a, s, 500, false, false, true, true); due.After(clock.now()) {
		t.Fatalf("a backlog whose end does not arrive is due %v after capture caught up, want by 600ms (now)", due.Sub(caughtUp))
	}
}
