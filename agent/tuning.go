package agent

import (
	"fmt"
	"strings"
)

// TuningOff says which of the agent's performance tricks are off. Each
// trick is measured and earns its place (docs/tuning.md lists them
// with their benchmarks), and each has a plain way of doing the same work
// that its switch selects: to measure a trick against, or to rule it out
// when something goes wrong. The zero value leaves every trick on.
type TuningOff struct {
	// GC and Threads are for the command that runs the agent: the
	// garbage collector's settings, and GOMAXPROCS following capture
	// (tuning_threads.go).
	GC, Threads bool
	// PollConn, ChunkMemory, ChunkQuery, ReadAhead, Adder and Writeback
	// are the stages' tricks: the replication connection's private wait,
	// decoding a backfill chunk into the memory of one before it, sending
	// a backfill chunk's statements and its COPY as one query, reading a
	// batch before its flush is due, adding a flush's changes on a
	// goroutine of their own, and writing data files out as they are
	// written.
	PollConn, ChunkMemory, ChunkQuery, ReadAhead, Adder, Writeback bool
}

// TuningOffVariable names the environment variable that lists the tricks
// `lakeside run` turns off.
const TuningOffVariable = "LAKESIDE_TUNING_OFF"

// trickNames are the names ParseTuningOff takes.
const trickNames = "gc, threads, pollconn, chunkmemory, chunkquery, readahead, adder, writeback"

// ParseTuningOff reads a comma-separated list of the tricks to turn off
// (gc, threads, pollconn, chunkmemory, chunkquery, readahead, adder,
// writeback, or all).
func ParseTuningOff(list string) (TuningOff, error) {
	var t TuningOff
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "":
		case "all":
			t = TuningOff{GC: true, Threads: true, PollConn: true, ChunkMemory: true, ChunkQuery: true, ReadAhead: true, Adder: true, Writeback: true}
		case "gc":
			t.GC = true
		case "threads":
			t.Threads = true
		case "pollconn":
			t.PollConn = true
		case "chunkmemory":
			t.ChunkMemory = true
		case "chunkquery":
			t.ChunkQuery = true
		case "readahead":
			t.ReadAhead = true
		case "adder":
			t.Adder = true
		case "writeback":
			t.Writeback = true
		default:
			return TuningOff{}, fmt.Errorf("%s: unknown trick %q (known: %s, all)", TuningOffVariable, name, trickNames)
		}
	}
	return t, nil
}

// TurnOff turns the stages' tricks that t names off. Call it before Open.
func (a *Agent) TurnOff(t TuningOff) { a.tuningOff = t }
