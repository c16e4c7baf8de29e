package applier

import (
	"bytes"
	"context"

	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestBackgroundCompactionRunsAtLowPriority checks that a background pass
// spends its CPU on its thread of nice compactNice, encoding its data files
// there too, so that capture and the applier get the cores first.
func TestBackgroundCompactionRunsAtLowPriority(t *testing.T) {
	// Enough rows that the pass's CPU is not lost in the clock ticks
	// /proc counts threads' time in.
	txns, rows := int64(10), int64(40_000)
	if raceEnabled {
		rows = 10_000
	}
	db, dir := openRelations(t, ordersRelation())
	tablesDir := filepath.Join(dir, "tables")
	discard := slog.New(slog.DiscardHandler)
	a := New(Config{TablesDir: tablesDir, TargetFileRows: rows, Compaction: true, Logger: discard}, db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range txns {
		spoolInserts(t, db, uint32(1000+i), i*rows+1, (i+1)*rows, store.LSN(0x10000*(i+1)))
		if err := a.applyAll(ctx); err != nil {
			t.Fatal(err)
		}
	}

	c := NewCompactor(CompactorConfig{
		Options:  CompactOptions{TargetFileSize: 256 << 20, TargetFileRows: txns * rows, MinFiles: 2, Logger: discard},
		Interval: 10 * time.Millisecond,
	}, a)
	// The collector's workers run on threads of their own: as the agent
	// does (cmd/lakeside/tuning_gc.go), it runs less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	before, threadsBefore := processCPU(t), threadsCPU(t)
	applied, compacted := make(chan error, 1), make(chan error, 1)
	go func() { applied <- a.Run(ctx) }()
	go func() { compacted <- c.Run(ctx) }()
	for _, table := range []string{"public.orders", "public.orders" + store.ChangelogSuffix} {
		for deadline := time.Now().Add(time.Minute); len(optimizeVersions(t, filepath.Join(tablesDir, table))) == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not compacted", table)
			}
		}
	}
	// The niced thread ends with the compactor: it is read first.
	var niced time.Duration
	for tid, th := range threadsCPU(t) {
		if th.nice == compactNice {
			niced += th.cpu - threadsBefore[tid].cpu
		}
	}
	spent := processCPU(t) - before
	cancel()
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	t.Logf("compaction of %d rows: %v of CPU at nice %d, %v in the whole process", 2*txns*rows, niced, compactNice, spent)
	if niced < spent*8/10 {
		t.Errorf("the threads at nice %d spent %v of the process's %v of CPU, want at least 80%%", compactNice, niced, spent)
	}
}

// processCPU returns the CPU time the test process has spent.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU is a thread's nice value and the CPU time it has spent.
type threadCPU struct {
	nice int
	cpu  time.Duration
}

// threadsCPU returns the test process's threads by thread ID, read from
// /proc (CPU time in clock ticks of 10 ms).
func threadsCPU(t *testing.T) map[string]threadCPU {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]threadCPU{}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		// The fields after the command's closing parenthesis, from the
		// state (field 3): utime and stime are fields 14 and 15, nice
		// field 19.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		nice, _ := strconv.Atoi(f[19-3])
		u, _ := strconv.ParseInt(f[14-3], 10, 64)
		s, _ := strconv.ParseInt(f[15-3], 10, 64)
		out[task.Name()] = threadCPU{nice: nice, cpu: time.Duration(u+s) * 10 * time.Millisecond}
	}
	return out
}
