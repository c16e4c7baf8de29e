//go:build bench

package main

import (
	"fmt"
	"testing"
	"time"
)

// TestBenchHugeValueMemory measures the agent's peak memory, live view on,
// while it captures and applies one update of a value of 1, 16, 64, 128,
// 256 and 384 MiB (source.max_value_size off), each update of the last,
// each in an agent started for it: its peak anonymous memory (what
// the kernel cannot reclaim, and kills for at MemoryMax) above its own
// before the update (the baseline, measured in the same run), that excess
// as a multiple of the value's size, which says the largest value a
// MemoryMax holds, and the peak of the state file's pages it had mapped
// (page cache, which the kernel reclaims first).
func TestBenchHugeValueMemory(t *testing.T) {
	e := newE2EAlone(t, []string{"public.big"}, "http:\n  listen: "+freeAddr(t)+"\n")
	e.setSourceKey("max_value_size", "0")
	e.exec(`CREATE TABLE big (id int PRIMARY KEY, v text)`, `INSERT INTO big VALUES (1, 'a')`)
	const mib = 1 << 20
	t.Logf("%-8s %10s %14s %16s %8s %14s %10s", "value", "baseline", "peak anonymous", "peak - baseline", "x value", "peak mapped", "applied in")
	for _, size := range []int{1, 16, 64, 128, 256, 384} {
		d := e.start()
		waitState(t, e, d, "streaming")
		e.waitApplied(d)
		baseline, _, err := rss(d.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		mem := sampleMemory(d.cmd.Process.Pid, "")
		start := time.Now()
		e.exec(fmt.Sprintf(`UPDATE big SET v = repeat(chr(%d), %d) WHERE id = 1`, 'a'+size%26, size*mib))
		e.waitApplied(d)
		took := time.Since(start)
		anon, file := mem.stop()
		e.stop(d)
		excess := anon[""] - baseline
		t.Logf("%-8s %6d MiB %10d MiB %12d MiB %8.1f %10d MiB %10v", fmt.Sprintf("%d MiB", size), baseline/mib, anon[""]/mib, excess/mib,
			float64(excess)/float64(size*mib), file[""]/mib, took.Round(time.Millisecond))
	}
}
