package applier

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/source"
)

// TestTableWaitsForItsCopy applies while capture copies one table: the
// other table is applied, the copied one keeps its Delta tables as they
// were and its changes queued, and once the copy is queued it catches up,
// in several flushes, to PostgreSQL's rows.
func TestTableWaitsForItsCopy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE x (id int PRIMARY KEY, v text); INSERT INTO x SELECT g, 'snap' FROM generate_series(1, 50) g;
		CREATE TABLE y (id int PRIMARY KEY, v text); INSERT INTO y SELECT g, 'snap' FROM generate_series(1, 50) g;`, "x", "y")
	var copying atomic.Bool
	a := h.applier(func(c *Config) {
		c.FlushChanges = 40
		c.Capture = copyingX(&copying)
	})
	h.apply(a)
	h.checkMirror("x")
	h.checkMirror("y")
	before := h.deltaRows(h.snapshot("public.x"), "x")

	copying.Store(true)
	for range 5 {
		h.exec(`INSERT INTO x SELECT g, 'new' FROM generate_series((SELECT max(id) + 1 FROM x), (SELECT max(id) + 30 FROM x)) g`,
			`UPDATE x SET v = 'upd' WHERE id % 3 = 0`, `INSERT INTO y SELECT max(id) + 1, 'new' FROM y`, `DELETE FROM y WHERE id = (SELECT min(id) FROM y)`)
	}
	h.apply(a)
	h.checkMirror("y")
	h.checkChangelog("y", nil)
	h.compare("x's mirror while it is copied", before, h.deltaRows(h.snapshot("public.x"), "x"))
	if n := len(h.queuedChanges()["x"]); n == 0 {
		t.Fatal("no change of x is queued while it waits for its copy")
	}
	// A copy that Capture.Copies does not report (a paced one) is not
	// waited for: x is applied as it is copied.
	plain := h.applier(func(c *Config) {
		c.Capture = captureFuncs{copies: func() []string { return nil }}
	})
	h.apply(plain)
	h.checkMirror("x")
	h.checkMirror("y")
	h.exec(`UPDATE x SET v = 'plain' WHERE id % 4 = 0`)
	h.apply(plain)
	h.checkMirror("x")
	// The copy reported again, from the queue plain applied.
	a = h.applier(func(c *Config) {
		c.FlushChanges = 40
		c.Capture = copyingX(&copying)
	})
	before = h.deltaRows(h.snapshot("public.x"), "x")
	for range 5 {
		h.exec(`INSERT INTO x SELECT g, 'new' FROM generate_series((SELECT max(id) + 1 FROM x), (SELECT max(id) + 30 FROM x)) g`,
			`UPDATE x SET v = 'upd' WHERE id % 3 = 0`)
	}
	h.apply(a)
	h.compare("x's mirror while it is copied again", before, h.deltaRows(h.snapshot("public.x"), "x"))
	if fs := a.Failures(); len(fs) != 0 {
		t.Fatalf("a table waiting for its copy is reported failing: %+v", fs)
	}

	// The copy is queued, and changes of both follow it: the flushes of
	// y's between those of x catching up hold x's latest changes back.
	copying.Store(false)
	h.exec(`INSERT INTO y VALUES (1000, 'after')`, `INSERT INTO x VALUES (1000, 'after')`, `UPDATE x SET v = 'last' WHERE id % 5 = 0`)
	h.apply(a)
	for _, tb := range []string{"x", "y"} {
		h.checkMirror(tb)
		h.checkChangelog(tb, nil)
	}
	if q := h.queuedChanges(); len(q) != 0 {
		t.Fatalf("the queue still holds changes after every table applied them: %v", q)
	}
}

// TestTableWaitsForItsResync resyncs a table with capture: while the copy
// is reported, its chunks stay queued (passed over after their first
// record) and its Delta tables as they were; then it catches up, its
// changelog holding every copied row once.
func TestTableWaitsForItsResync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, `
		CREATE TABLE x (id int PRIMARY KEY, v text); INSERT INTO x SELECT g, 'snap' FROM generate_series(1, 6000) g;
		CREATE TABLE y (id int PRIMARY KEY, v text);`, "x", "y")
	var copying atomic.Bool
	a := h.applier(func(c *Config) {
		c.FlushChanges = 2500
		c.Capture = copyingX(&copying)
	})
	h.apply(a)
	before := h.deltaRows(h.snapshot("public.x"), "x")

	copying.Store(true)
	h.exec(`UPDATE x SET v = 'before the copy' WHERE id % 10 = 0`)
	h.apply(a)
	if err := h.src.Resync(ctx, "public.x", source.ReasonResync); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if bs := h.src.Backfills(); len(bs) == 1 && bs[0].Done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy of x is not done after 60s: %+v", h.src.Backfills())
		}
	}
	h.exec(`INSERT INTO y VALUES (1, 'while x waits')`)
	h.apply(a)
	h.checkMirror("y")
	h.compare("x's mirror while it waits for its copy", before, h.deltaRows(h.snapshot("public.x"), "x"))
	if b := a.behind["public.x"]; b == nil || !b.waiting || b.waitingChanges < 6000 {
		t.Fatalf("x waits as %+v, want every change held, the 6000 rows copied among them", b)
	}
	if w := a.Waiting(); len(w) != 1 || w["public.x"] != WaitsForCopy {
		t.Fatalf("Waiting() = %v while x waits for its copy", w)
	}

	copying.Store(false)
	h.apply(a)
	h.checkMirror("x")
	if w := a.Waiting(); len(w) != 0 {
		t.Fatalf("Waiting() = %v once x caught up", w)
	}
	h.checkChangelog("x", nil)
	ops := map[string]int{}
	for _, op := range h.changelogKeys("x") {
		ops[op]++
	}
	if ops["snapshot"] != 12000 || ops["truncate"] != 1 || ops["update"] != 600 {
		t.Fatalf("x's changelog holds %v, want the 6000 rows of the snapshot and of the copy, its truncate, and 600 updates", ops)
	}
	if q := h.queuedChanges(); len(q) != 0 {
		t.Fatalf("the queue still holds changes after every table applied them: %v", q)
	}
}

// copyingX is a capture that copies public.x while copying is set.
func copyingX(copying *atomic.Bool) captureFuncs {
	return captureFuncs{copies: func() []string {
		if copying.Load() {
			return []string{"public.x"}
		}
		return nil
	}}
}

// TestTableWaitsNoLongerThanMaxWaitingTime copies a table for longer than
// maxWaitingTime: it catches up while it is still copied, and then waits
// again.
func TestTableWaitsNoLongerThanMaxWaitingTime(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `CREATE TABLE x (id int PRIMARY KEY, v text); INSERT INTO x SELECT g, 'snap' FROM generate_series(1, 50) g;`, "x")
	var copying atomic.Bool
	clock := time.Now()
	a := h.applier(func(c *Config) { c.Capture = copyingX(&copying) })
	a.now = func() time.Time { return clock }
	h.apply(a)
	before := h.deltaRows(h.snapshot("public.x"), "x")
	copying.Store(true)
	h.apply(a)
	if w := a.Waiting(); w["public.x"] != WaitsForCopy {
		t.Fatalf("Waiting() = %v as the copy begins", w)
	}
	h.exec(`UPDATE x SET v = 'upd' WHERE id % 3 = 0`)
	clock = clock.Add(maxWaitingTime - time.Second)
	h.apply(a)
	h.compare("x's mirror before maxWaitingTime", before, h.deltaRows(h.snapshot("public.x"), "x"))
	clock = clock.Add(time.Second)
	h.apply(a)
	h.checkMirror("x")
	if w := a.Waiting(); w["public.x"] != WaitsForCopy {
		t.Fatalf("Waiting() = %v after x caught up, its copy still running", w)
	}
	before = h.deltaRows(h.snapshot("public.x"), "x")
	h.exec(`UPDATE x SET v = 'again' WHERE id % 4 = 0`)
	h.apply(a)
	h.compare("x's mirror waiting again", before, h.deltaRows(h.snapshot("public.x"), "x"))
}
