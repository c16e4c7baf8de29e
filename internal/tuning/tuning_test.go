package tuning

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Off{
		"":                   {},
		"gc, adder":          {GC: true, Adder: true},
		"pollconn,readahead": {PollConn: true, ReadAhead: true},
		"chunkmemory":        {ChunkMemory: true},
		"chunkquery,":        {ChunkQuery: true},
		"threads,writeback":  {Threads: true, Writeback: true},
		"all":                {GC: true, Threads: true, PollConn: true, ChunkMemory: true, ChunkQuery: true, ReadAhead: true, Adder: true, Writeback: true},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	// copywait was a name once; it is design now, and unknown.
	for _, in := range []string{"gc,turbo", "copywait"} {
		_, err := Parse(in)
		want := `LAKESIDE_TUNING_OFF: unknown trick "` + in[strings.LastIndex(in, ",")+1:] + `" (known: gc, threads, pollconn, chunkmemory, chunkquery, readahead, adder, writeback, all)`
		if err == nil || err.Error() != want {
			t.Errorf("Parse(%q): %v; want %s", in, err, want)
		}
	}
}
