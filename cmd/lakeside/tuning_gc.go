package main

import (
	"os"
	"runtime/debug"
)

// The agent's garbage collection settings (see setGC).
const (
	gcPercent   = 400
	memoryLimit = 128 << 20
)

// setGC has the garbage collector run less often than by default, within
// a memory limit, unless GOGC or GOMEMLIMIT is in the environment. Capture
// allocates for every change and keeps little of it: a collection each
// time the heap doubles stalls the reading of the stream (collecting at 5x
// captured 10-20% more single-row transactions a second on two cores). The
// memory limit keeps the heap bounded all the same.
//
// A performance trick, measured by TestBenchCapture (make bench) and the
// peak memory of TestLargeTransactionMemory; switched off by GOGC or
// GOMEMLIMIT in the environment, or LAKESIDE_TUNING_OFF=gc, which leave the
// runtime's defaults.
func setGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
}
