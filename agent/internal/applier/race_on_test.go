//go:build race

package applier

// raceEnabled reports whether the tests run under the race detector, whose
// instrumentation allocates memory of its own.
const raceEnabled = true
