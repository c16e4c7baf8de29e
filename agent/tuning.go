package agent

import "github.com/lakeside/lakeside/internal/tuning"

// TurnOff turns the stages' performance tricks that off names off (the
// command that runs the agent sees to GC and Threads). Call it before
// Open.
func (a *Agent) TurnOff(off tuning.Off) { a.tuningOff = off }
