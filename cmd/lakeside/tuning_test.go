package main

import (
	"strings"
	"testing"
	"time"
)

// TestTricksOff runs the agent with every performance trick switched off
// (LAKESIDE_TUNING_OFF=all): it says so, and captures and applies as
// always, the mirror equal to PostgreSQL. An unknown trick stops the start
// with an error naming the variable.
func TestTricksOff(t *testing.T) {
	t.Parallel()
	e := newE2E(t, []string{"public.stock"})
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO stock SELECT g, g FROM generate_series(1, 500) g`)

	bad := e.start("LAKESIDE_TUNING_OFF=gc,turbo")
	select {
	case <-bad.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent started with an unknown trick to turn off")
	}
	if code := bad.cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(bad.log(), `LAKESIDE_TUNING_OFF: unknown trick "turbo"`) {
		t.Fatalf("exit code %d; log:\n%s", code, bad.log())
	}

	d := e.start("LAKESIDE_TUNING_OFF=all")
	waitState(t, e, d, "streaming")
	e.exec(`UPDATE stock SET qty = qty * 2 WHERE id % 3 = 0`, `DELETE FROM stock WHERE id % 10 = 0`,
		`INSERT INTO stock SELECT g, g FROM generate_series(501, 20000) g`)
	e.waitApplied(d)
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
	if !strings.Contains(d.log(), "performance tricks turned off") {
		t.Errorf("the log does not say the tricks are off:\n%s", d.log())
	}
	e.stop(d)
}
