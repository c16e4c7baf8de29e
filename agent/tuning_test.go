package agent

import (
	"strings"
	"testing"
)

func TestParseTuningOff(t *testing.T) {
	for in, want := range map[string]TuningOff{
		"":                   {},
		"gc, adder":          {GC: true, Adder: true},
		"pollconn,readahead": {PollConn: true, ReadAhead: true},
		"chunkmemory":        {ChunkMemory: true},
		"threads,writeback":  {Threads: true, Writeback: true},
		"all":                {GC: true, Threads: true, PollConn: true, ChunkMemory: true, ChunkQuery: true, ReadAhead: true, Adder: true, Writeback: true},
	} {
		got, err := ParseTuningOff(in)
		if err != nil || got != want {
			t.Errorf("ParseTuningOff(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := ParseTuningOff("gc,turbo"); err == nil || !strings.Contains(err.Error(), `LAKESIDE_TUNING_OFF: unknown trick "turbo"`) {
		t.Errorf("an unknown trick: %v", err)
	}
}
