package applier

import (
	"context"
	"testing"
	"time"
)

// TestTricksOffApplyTheSame runs the applier with its performance tricks
// switched off (no reading ahead, no adder goroutine, no early writeout of
// data files): a snapshot, a large transaction and smaller ones end in a
// mirror equal to PostgreSQL and a changelog holding each change once.
func TestTricksOffApplyTheSame(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE items (id int8 PRIMARY KEY, v int8 NOT NULL, note text);
		INSERT INTO items SELECT g, g, 'snap' FROM generate_series(1, 2000) g;`, "items")
	a := h.applier(func(c *Config) {
		c.Off.ReadAhead, c.Off.Adder, c.Off.Writeback = true, true, true
		c.TargetFileRows, c.RowGroupRows = 5000, 1000
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	h.exec(`INSERT INTO items SELECT g, g, 'bulk' FROM generate_series(2001, 20000) g`,
		`UPDATE items SET v = v + 1, note = 'u' WHERE id % 3 = 0`, `DELETE FROM items WHERE id % 7 = 0`)
	cp := h.caughtUp()
	a.Notify()
	for deadline := time.Now().Add(60 * time.Second); a.Applied() < cp && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.Applied() < cp {
		t.Fatalf("applied %s, want %s", a.Applied(), cp)
	}
	h.checkMirror("items")
	h.checkChangelog("items", nil)
}
