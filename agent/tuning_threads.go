package agent

import (
	"log/slog"
	"runtime"
	"sync"
)

// threads sets how many threads run the agent's Go code at once
// (GOMAXPROCS) by what capture does. While it drains a backlog, the
// walsender on the other end works as hard as the agent does, and the
// agent keeps to fewer threads so that it has CPUs of its own. Once
// capture has caught up, the walsender has little to do, and the agent
// takes every thread: a flush then writes its Delta tables side by side.
//
// While capture catches up, a commit of the queue takes one thread more
// (up to every thread): bbolt writes its pages and fsyncs them, and a
// fsync keeps the thread that makes it for its whole length, about 1.5 ms.
// Meanwhile capture reads on; with one thread it waited, and the walsender
// with it once its socket's buffer (about 2 ms of a backlog) was full.
//
// A performance trick, measured by TestBenchCapture and
// TestBenchDeltaEndToEnd (make bench); switched off by not calling
// Agent.ShareCPUs (LAKESIDE_TUNING_OFF=threads, or GOMAXPROCS set, for
// lakeside run), which leaves GOMAXPROCS to the runtime.
type threads struct {
	log                   *slog.Logger
	catchingUp, otherwise int
	// set sets GOMAXPROCS (runtime.GOMAXPROCS; a fake in tests).
	set func(int) int

	mu sync.Mutex
	// behind is what capture last said: catching up or not.
	behind bool
	// committing is set while the queue writer commits.
	committing bool
	// now is the count set last.
	now int
}

// newThreads returns the policy and applies its catching-up count: capture
// counts as catching up until the server has said where its WAL ends.
func newThreads(log *slog.Logger, catchingUp, otherwise int, set func(int) int) *threads {
	if set == nil {
		set = runtime.GOMAXPROCS
	}
	t := &threads{log: log, catchingUp: max(1, catchingUp), otherwise: max(1, otherwise), set: set}
	t.CatchUp(true)
	return t
}

// CatchUp sets the count for capture catching up, or not. The source's
// capture goroutine calls it (source.Threads).
func (t *threads) CatchUp(catchingUp bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.behind = catchingUp
	if t.applyLocked() {
		t.log.Debug("scheduler threads", "count", t.now, "catching_up", catchingUp)
	}
}

// CatchUpCommit notes that the queue writer starts (true) or ends (false)
// a commit while capture catches up. The writer's goroutine calls it
// (source.Threads).
func (t *threads) CatchUpCommit(committing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.committing = committing
	t.applyLocked()
}

// applyLocked sets the count the state calls for and reports whether it
// changed; t.mu is held.
func (t *threads) applyLocked() bool {
	n := t.otherwise
	if t.behind {
		n = t.catchingUp
		if t.committing {
			n = min(n+1, t.otherwise)
		}
	}
	if n == t.now {
		return false
	}
	t.now = n
	t.set(n)
	return true
}
