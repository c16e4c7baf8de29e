package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// memoryCgroup is a memory cgroup a test made, holding the agent under a
// memory limit the way the unit's MemoryMax does: at the limit the
// kernel reclaims page cache, then kills.
type memoryCgroup struct {
	dir string
	// v2 is set for a cgroup v2 hierarchy, unset for the v1 memory
	// controller.
	v2 bool
}

// newMemoryCgroup makes a memory cgroup with the given limit. The test
// fails when the machine has no memory controller it may use: the limit
// is what it proves.
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("lakeside-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var cg *memoryCgroup
	if data, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(string(data), "memory") {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	} else if own, err := ownV1MemoryCgroup(); err == nil {
		cg = &memoryCgroup{dir: filepath.Join("/sys/fs/cgroup/memory", own, name)}
	} else {
		t.Fatalf("no memory cgroup controller to limit the agent with (cgroup v2 with memory at the root, or v1's memory controller): %v", err)
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatalf("make a memory cgroup (as root): %v", err)
	}
	t.Cleanup(func() {
		// A cgroup goes once its processes have; the test's cleanups
		// that kill the agent ran before this one.
		for range 50 {
			if err := os.Remove(cg.dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("memory cgroup %s not removed", cg.dir)
	})
	limitFile := "memory.limit_in_bytes"
	if cg.v2 {
		limitFile = "memory.max"
	}
	cg.write(t, limitFile, strconv.FormatInt(limit, 10))
	if cg.v2 {
		cg.write(t, "memory.swap.max", "0")
	} else if _, err := os.Stat(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes")); err == nil {
		cg.write(t, "memory.memsw.limit_in_bytes", strconv.FormatInt(limit, 10))
	}
	return cg
}

// ownV1MemoryCgroup returns this process's cgroup in the v1 memory
// controller, below which a test's cgroup goes.
func ownV1MemoryCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && parts[1] == "memory" {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")); err != nil {
				return "", err
			}
			return parts[2], nil
		}
	}
	return "", errors.New("no memory controller in /proc/self/cgroup")
}

func (cg *memoryCgroup) write(t *testing.T, file, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(value), 0o644); err != nil {
		t.Fatalf("cgroup %s: %v", file, err)
	}
}

// add moves process pid into the cgroup.
func (cg *memoryCgroup) add(t *testing.T, pid int) {
	t.Helper()
	cg.write(t, "cgroup.procs", strconv.Itoa(pid))
}

// peak returns the most memory the cgroup's processes used, page cache
// included.
func (cg *memoryCgroup) peak(t *testing.T) int64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if cg.v2 {
		file = "memory.peak"
	}
	data, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// oomKills returns how many processes the kernel killed in the cgroup for
// want of memory.
func (cg *memoryCgroup) oomKills(t *testing.T) int64 {
	t.Helper()
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	t.Fatalf("%s says nothing of OOM kills:\n%s", file, data)
	return 0
}

// unitMemoryMax returns the MemoryMax of the shipped systemd unit, in
// bytes.
func unitMemoryMax(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("../../systemd/lakeside.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "MemoryMax=")
		if !ok {
			continue
		}
		mult := int64(1)
		switch v[len(v)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			v = v[:len(v)-1]
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("MemoryMax=%s in the unit: %v", v, err)
		}
		return n * mult
	}
	t.Fatal("the unit sets no MemoryMax")
	return 0
}
