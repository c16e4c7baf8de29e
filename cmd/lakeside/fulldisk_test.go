package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFullDiskPausesCaptureOnce runs the agent with its state directory on
// a small tmpfs the test fills while rows arrive: capture pauses and says
// so once, resumes and says so once when space is freed, and every row
// reaches the mirror. Filled again, a stop ends the agent at once and
// cleanly, and the next start captures what was not written.
func TestFullDiskPausesCaptureOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("full disk test skipped in -short mode")
	}
	small := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs for the state directory (as root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", small).Run() })
	e := newE2E(t, []string{"public.t"})
	config, err := os.ReadFile(e.configPath)
	if err != nil {
		t.Fatal(err)
	}
	// The queue is on the tmpfs, the Delta tables are not.
	state := filepath.Join(small, "state")
	tables := filepath.Join(t.TempDir(), "tables")
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(tables, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tables, filepath.Join(state, "tables")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, e.configPath, strings.Replace(string(config), "state_dir: "+e.stateDir, "state_dir: "+state, 1))
	e.stateDir = state
	e.exec(`CREATE TABLE t (id int PRIMARY KEY, v text)`, `INSERT INTO t VALUES (0, 'seed')`)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)

	filler := filepath.Join(small, "filler")
	fill := func() {
		t.Helper()
		var st syscall.Statfs_t
		if err := syscall.Statfs(small, &st); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 1<<20)
		for free := int64(st.Bavail) * st.Bsize; free > 0; free -= int64(len(chunk)) {
			if _, err := f.Write(chunk[:min(int64(len(chunk)), free)]); err != nil {
				break // full
			}
		}
	}
	waitLog := func(what string, n int) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); strings.Count(d.log(), what) < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the log does not say %q %d times; log:\n%s", what, n, d.log())
			}
		}
	}
	fill()
	e.exec(`INSERT INTO t SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 5000) g`)
	waitLog("state disk is full", 1)
	// The writer retries every 5 s: two retries later it still said it once.
	time.Sleep(11 * time.Second)
	if n := strings.Count(d.log(), "state disk is full"); n != 1 {
		t.Fatalf("the full disk is logged %d times, want once; log:\n%s", n, d.log())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitLog("state disk has room again; capture resumes", 1)
	e.waitApplied(d)
	e.compareMirror(t, "public.t", `SELECT id, v FROM t`, "id", "v")

	fill()
	e.exec(`INSERT INTO t SELECT g, repeat(md5(g::text), 32) FROM generate_series(5001, 10000) g`)
	waitLog("state disk is full", 2)
	if took := e.stop(d); took > 10*time.Second {
		t.Fatalf("a stop on a full disk took %v", took)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	d = e.start()
	e.waitApplied(d)
	e.compareMirror(t, "public.t", `SELECT id, v FROM t`, "id", "v")
	e.stop(d)
}
