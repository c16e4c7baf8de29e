package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/pgtest"
)

// TestStuckCopyGivesWay resyncs a table without a key while writers
// keep changing it, so that its copy starts over after every chunk, then
// resyncs another table: the stuck copy gives way, the other table's copy
// ends while the writers still run (it waited for ever behind a copy that
// cannot progress) and its mirror equals PostgreSQL, and once the writers stop the
// first copy resumes and ends too.
func TestStuckCopyGivesWay(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.nokey", "public.other"})
	e.exec(`CREATE TABLE nokey (n int, v text)`, `ALTER TABLE nokey REPLICA IDENTITY FULL`,
		`INSERT INTO nokey SELECT g, 'v' FROM generate_series(1, 300) g`,
		`CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO other SELECT g, 'o' FROM generate_series(1, 100) g`)
	e.setSourceKey("backfill_chunk_rows", "10")
	// Paced, the copy leaves the writers time to change the table
	// between any two chunks, however busy the machine.
	e.setSourceKey("backfill_rows_per_second", "20")
	d := e.start()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)

	// Two writers update random rows without a pause: every chunk's
	// window sees a change, and the copy of a table without a key starts
	// over.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			conn := pgtest.Conn(t, e.dsn)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Exec(context.Background(), `UPDATE nokey SET v = $1 WHERE n = $2`, time.Now().String(), rand.IntN(300)+1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	stuck := make(chan string, 1)
	go func() {
		out, stderr, _ := e.lakeside("resync", "--config", e.configPath, "public.nokey")
		stuck <- out + stderr
	}()
	waitLog(t, d, "backfill starts over")
	other := make(chan string, 1)
	go func() {
		out, stderr, _ := e.lakeside("resync", "--config", e.configPath, "public.other")
		other <- out + stderr
	}()
	select {
	case out := <-other:
		if !strings.Contains(out, "public.other (resync) done") {
			t.Fatalf("resync of public.other behind a stuck copy:\n%s\nlog:\n%s", out, d.log())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the copy of public.other waits behind the stuck one; log:\n%s", d.log())
	}
	if !strings.Contains(d.log(), "backfill gives way to the other tables' copies") {
		t.Errorf("the log does not say the stuck copy gave way:\n%s", d.log())
	}
	close(stop)
	wg.Wait()
	if out := <-stuck; !strings.Contains(out, "public.nokey (resync) done") {
		t.Fatalf("resync of public.nokey once the writer stopped:\n%s\nlog:\n%s", out, d.log())
	}
	e.waitApplied(d)
	e.compareMirror(t, "public.other", `SELECT id, v FROM other`, "id", "v")
	e.stop(d)
}
