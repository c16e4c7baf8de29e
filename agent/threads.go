package agent

import (
	"log/slog"
	"runtime"
)

// threads sets how many threads run the agent's Go code at once
// (GOMAXPROCS) by what capture does. While it drains a backlog, the
// walsender on the other end works as hard as the agent does, and the
// agent keeps to fewer threads so that it has CPUs of its own. Once
// capture has caught up, the walsender has little to do, and the agent
// takes every thread: a flush then writes its Delta tables side by side.
type threads struct {
	log                   *slog.Logger
	catchingUp, otherwise int
	// set sets GOMAXPROCS (runtime.GOMAXPROCS; a fake in tests).
	set func(int) int
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
	t.follow(true)
	return t
}

// follow sets the count for capture catching up, or not. It is called by
// one goroutine at a time: newThreads, then the source's capture goroutine
// (source.Config.OnCatchUp).
func (t *threads) follow(catchingUp bool) {
	n := t.otherwise
	if catchingUp {
		n = t.catchingUp
	}
	if n == t.now {
		return
	}
	t.now = n
	t.set(n)
	t.log.Debug("scheduler threads", "count", n, "catching_up", catchingUp)
}
