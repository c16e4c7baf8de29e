package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/agent"
)

// TestVacuumCommand runs `lakeside vacuum` while the agent runs (the agent
// does the vacuum, since it holds the state file) and after it stopped (the
// command does it itself); recent files are never deleted.
func TestVacuumCommand(t *testing.T) {
	t.Parallel()
	e := newE2EWith(t, []string{"public.items"},
		"replica:\n  url: file://"+filepath.Join(t.TempDir(), "replica")+"\n  site: branch-1\n  poll_interval: 100ms\n")
	e.exec(`CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)`,
		`INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.exec(`UPDATE items SET qty = qty + 1`, `UPDATE items SET qty = qty + 1`)
	e.waitApplied(d)

	out, stderr, code := e.lakeside("vacuum", "--config", e.configPath, "--dry-run")
	if code != 0 {
		t.Fatalf("vacuum --dry-run exited %d: %s%s", code, out, stderr)
	}
	if !strings.Contains(out, "vacuum by the running agent") || !strings.Contains(out, "public.items: would delete 0 files") {
		t.Errorf("vacuum --dry-run while the agent runs printed:\n%s", out)
	}
	e.stop(d)

	out, stderr, code = e.lakeside("vacuum", "--config", e.configPath, "--json")
	if code != 0 {
		t.Fatalf("vacuum exited %d: %s%s", code, out, stderr)
	}
	var rep agent.VacuumReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("vacuum --json printed %q: %v", out, err)
	}
	if rep.Agent || rep.DryRun || len(rep.Tables) != 2 || rep.RemoteError != "" {
		t.Errorf("vacuum without an agent: %+v", rep)
	}
	for _, tv := range rep.Tables {
		if tv.Files != 0 || tv.Error != "" || tv.Version < 1 {
			t.Errorf("table %s: %+v", tv.Name, tv)
		}
	}
}
