package main

import (
	"context"
	"crypto/md5"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/pgtest"
)

// TestHugeValuesUnderMemoryMax runs the agent, live view on, in a memory
// cgroup of the shipped unit's MemoryMax while one table receives a
// 100 MiB value (an update), one of 256 MiB (an insert, the default
// source.max_value_size) and one of 300 MiB (an insert, over it), and a
// second table receives rows throughout. The agent is never killed, the
// second table's mirror equals PostgreSQL, the 100 and 256 MiB values
// reach both Delta tables exactly, and the 300 MiB one is null in both,
// listed in _replaced and logged.
func TestHugeValuesUnderMemoryMax(t *testing.T) {
	if testing.Short() {
		t.Skip("huge values test skipped in -short mode")
	}
	limit := unitMemoryMax(t)
	cg := newMemoryCgroup(t, limit)
	e := newE2EWith(t, []string{"public.big", "public.small"}, "http:\n  listen: "+freeAddr(t)+"\n")
	e.exec(`CREATE TABLE big (id int PRIMARY KEY, v text)`, `INSERT INTO big VALUES (1, 'a')`,
		`CREATE TABLE small (id serial PRIMARY KEY, v text)`)
	d := e.start()
	cg.add(t, d.cmd.Process.Pid)
	waitState(t, e, d, "streaming")
	e.waitApplied(d)

	// The second table's writer.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := pgtest.Conn(t, e.dsn)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Exec(context.Background(), `INSERT INTO small (v) VALUES (repeat('s', 100))`); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	const mib = 1 << 20
	e.exec(fmt.Sprintf(`UPDATE big SET v = repeat('y', %d) WHERE id = 1`, 100*mib))
	e.waitApplied(d)
	e.exec(fmt.Sprintf(`INSERT INTO big VALUES (3, repeat('x', %d))`, 256*mib))
	e.waitApplied(d)
	e.exec(fmt.Sprintf(`INSERT INTO big VALUES (2, repeat('z', %d))`, 300*mib))
	e.waitApplied(d)
	close(stop)
	wg.Wait()
	e.waitApplied(d)
	select {
	case <-d.exited:
		t.Fatalf("the agent exited (%s); log:\n%s", d.cmd.ProcessState, d.log())
	default:
	}
	if n := cg.oomKills(t); n != 0 {
		t.Fatalf("the kernel killed %d processes for want of memory", n)
	}
	hwm, err := peakRSS(d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("under %d MiB: the agent's peak RSS %d MiB, the cgroup's peak %d MiB (page cache included)", limit/mib, hwm/mib, cg.peak(t)/mib)

	e.compareMirror(t, "public.small", `SELECT id, v FROM small`, "id", "v")
	want := fmt.Sprintf("%x", md5.Sum([]byte(strings.Repeat("y", 100*mib))))
	want256 := fmt.Sprintf("%x", md5.Sum([]byte(strings.Repeat("x", 256*mib))))
	got := map[int32]any{}
	if err := e.scanDelta("public.big", func(r map[string]any) {
		if s, ok := r["v"].(string); ok {
			got[r["id"].(int32)] = fmt.Sprintf("%x", md5.Sum([]byte(s)))
		} else {
			got[r["id"].(int32)] = r["v"]
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1] != want || got[3] != want256 || got[2] != nil {
		t.Fatalf("mirror of public.big: %v, want id 1 the 100 MiB value (md5 %s), id 3 the 256 MiB one (md5 %s) and id 2 null", got, want, want256)
	}
	var update, insert, insert256 map[string]any
	if err := e.scanDelta("public.big_changes", func(r map[string]any) {
		switch {
		case r["_op"] == "update" && r["id"] == int32(1):
			update = r
		case r["_op"] == "insert" && r["id"] == int32(2):
			insert = r
		case r["_op"] == "insert" && r["id"] == int32(3):
			insert256 = r
		}
	}); err != nil {
		t.Fatal(err)
	}
	if s, _ := update["v"].(string); update == nil || fmt.Sprintf("%x", md5.Sum([]byte(s))) != want || update["_replaced"] != nil {
		t.Fatal("the changelog does not hold the 100 MiB update exactly")
	}
	if s, _ := insert256["v"].(string); insert256 == nil || fmt.Sprintf("%x", md5.Sum([]byte(s))) != want256 || insert256["_replaced"] != nil {
		t.Fatal("the changelog does not hold the 256 MiB insert exactly")
	}
	if insert == nil || insert["v"] != nil || fmt.Sprint(insert["_replaced"]) != "[v]" {
		t.Fatalf("the changelog's 300 MiB insert: %v, want v null and listed in _replaced", insert)
	}
	if log := d.log(); !strings.Contains(log, "a value larger than capture keeps") || !strings.Contains(log, fmt.Sprintf("bytes=%d", 300*mib)) {
		t.Fatalf("the value over the limit is not logged with its size; log:\n%s", log)
	}
	e.stop(d)
}
