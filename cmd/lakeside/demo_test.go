package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
)

// TestDemo runs `lakeside demo`, what `make demo` runs, for a while: it
// starts its own PostgreSQL and workload, serves the live page, builds the
// Delta tables and replicates them into its local replica, and stops
// cleanly when its time is up.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "demo", "--duration", "8s", "--state-dir", dir, "--listen", addr)
	cmd.Env = append(os.Environ(), "LAKESIDE_TEST_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	// The live page answers while the demo runs.
	var page string
	for deadline := time.Now().Add(15 * time.Second); page == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			page = string(body)
		}
	}
	if !strings.Contains(page, "<html") {
		t.Fatalf("the live page did not answer; log:\n%s", errb.String())
	}

	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo: %v; log:\n%s", err, errb.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("demo ran past its duration; log:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "captured txn") {
		t.Errorf("the demo printed no captured transaction:\n%s", out.String())
	}
	// Each captured table has its changelog and mirror, locally and in
	// the replica, with more than the initial snapshot in them.
	replicas, _ := filepath.Glob(filepath.Join(dir, "replica", "*"))
	replicas = slices.DeleteFunc(replicas, func(p string) bool { return filepath.Base(p) == uploader.LayoutMarker })
	if len(replicas) != 1 {
		t.Fatalf("replica directories %v, want one", replicas)
	}
	for _, table := range []string{"public.stock", "public.stock_changes", "public.products", "public.products_changes"} {
		for _, root := range []string{filepath.Join(dir, "state", "tables"), replicas[0]} {
			tbl, err := delta.Open(context.Background(), filepath.Join(root, table))
			if err != nil {
				t.Fatalf("open %s in %s: %v", table, root, err)
			}
			snap, err := tbl.Snapshot(context.Background())
			if err != nil {
				t.Fatalf("read %s in %s: %v", table, root, err)
			}
			if v := snap.Version(); v < 2 {
				t.Errorf("%s in %s is at version %d, want the workload's commits", table, root, v)
			}
		}
	}
}

// TestDemoCleansUpWhenItsPipeIsGone runs the demo as `lakeside demo | tee`
// would, then does what Ctrl-C does: the pipe's reader goes, and the
// demo's process group gets SIGINT. The demo still stops its PostgreSQL
// and removes every directory it made.
func TestDemoCleansUpWhenItsPipeIsGone(t *testing.T) {
	t.Parallel()
	tmp, err := os.MkdirTemp("", "lakeside-demo-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	// The throwaway cluster runs as postgres when the test runs as root.
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "demo", "--listen", freeAddr(t))
	cmd.Env = append(os.Environ(), "LAKESIDE_TEST_MAIN=1", "TMPDIR="+tmp)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	var seen strings.Builder
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(seen.String(), "captured txn"); {
		r.SetReadDeadline(deadline)
		n, err := r.Read(buf)
		if err != nil {
			t.Fatalf("the demo did not capture a transaction: %v\n%s", err, seen.String())
		}
		seen.Write(buf[:n])
	}
	r.Close()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not stop on SIGINT")
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the demo left %s behind", filepath.Join(tmp, e.Name()))
	}
	out, _ := exec.Command("pgrep", "-f", tmp).Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("processes of the demo still run: %s", out)
		exec.Command("pkill", "-KILL", "-f", tmp).Run()
	}
}
