// Package tuning names the agent's performance tricks that can be switched
// off, one name each, for every package that has one: the command that
// runs the agent (GC, Threads), capture (PollConn), its backfill
// (ChunkMemory, ChunkQuery) and the applier (ReadAhead, Adder, Writeback).
// Each trick is measured and earns its place (docs/tuning.md lists them
// with their benchmarks), and each has a plain way of doing the same work
// that its switch selects: to measure the trick against, or to rule it
// out when something goes wrong.
//
// An Off value says which tricks are off. The agent hands the one value to
// each stage's configuration, and each stage reads the fields of its own
// tricks. Parse reads the list that `lakeside run` takes from the
// environment variable Variable.
package tuning

import (
	"fmt"
	"strings"
)

// Off says which of the agent's performance tricks are off; each field is
// named after the trick's name in the list Parse reads. The zero value
// leaves every trick on.
type Off struct {
	// GC and Threads are for the command that runs the agent: the
	// garbage collector's settings, and GOMAXPROCS following capture.
	GC, Threads bool
	// PollConn is capture's: the replication connection's private wait
	// (source's tuning_pollconn.go).
	PollConn bool
	// ChunkMemory and ChunkQuery are the backfill's: decoding a chunk
	// into the memory of one before it, and sending a chunk's statements
	// and its COPY as one query (backfill's tuning_chunk_memory.go and
	// tuning_chunk_query.go).
	ChunkMemory, ChunkQuery bool
	// ReadAhead, Adder and Writeback are the applier's: reading a batch
	// before its flush is due, adding a flush's changes on a goroutine of
	// their own, and writing data files out as they are written
	// (applier's tuning_readahead.go and tuning_adder.go, delta's
	// tuning_writeback.go).
	ReadAhead, Adder, Writeback bool
}

// Variable names the environment variable that lists the tricks
// `lakeside run` turns off.
const Variable = "LAKESIDE_TUNING_OFF"

// names are the names Parse takes, besides all.
const names = "gc, threads, pollconn, chunkmemory, chunkquery, readahead, adder, writeback"

// Parse reads a comma-separated list of the tricks to turn off (gc,
// threads, pollconn, chunkmemory, chunkquery, readahead, adder, writeback,
// or all, which turns every one off). Spaces around a name and empty names
// are ignored. An unknown name is an error that names Variable and the
// known names.
func Parse(list string) (Off, error) {
	var off Off
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "":
		case "all":
			off = Off{GC: true, Threads: true, PollConn: true, ChunkMemory: true, ChunkQuery: true, ReadAhead: true, Adder: true, Writeback: true}
		case "gc":
			off.GC = true
		case "threads":
			off.Threads = true
		case "pollconn":
			off.PollConn = true
		case "chunkmemory":
			off.ChunkMemory = true
		case "chunkquery":
			off.ChunkQuery = true
		case "readahead":
			off.ReadAhead = true
		case "adder":
			off.Adder = true
		case "writeback":
			off.Writeback = true
		default:
			return Off{}, fmt.Errorf("%s: unknown trick %q (known: %s, all)", Variable, name, names)
		}
	}
	return off, nil
}
