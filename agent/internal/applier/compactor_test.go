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
	// The applier does not poll the queue while the pass is measured.
	a := New(Config{TablesDir: tablesDir, TargetFileRows: rows, Compaction: true, PollInterval: time.Hour, Logger: discard}, db)
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

	// Nothing else runs meanwhile, on a loaded machine too, where the
	// niced pass takes longer: the test waits for the passes' log lines.
	compacted := make(chan string, 16)
	c := NewCompactor(CompactorConfig{
		Options: CompactOptions{TargetFileSize: 256 << 20, TargetFileRows: txns * rows, MinFiles: 2,
			Logger: slog.New(compactedHandler(compacted))},
		Interval: 10 * time.Millisecond,
	}, a)
	// The collector's workers run on threads of their own, at normal
	// priority: it does not run while the pass is measured (the pass
	// allocates well under the limit that would start it).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(4 << 30))
	before, threadsBefore := processCPU(t), threadsCPU(t)
	applied, ran := make(chan error, 1), make(chan error, 1)
	go func() { applied <- a.Run(ctx) }()
	go func() { ran <- c.Run(ctx) }()
	for left := map[string]bool{"public.orders": true, "public.orders" + store.ChangelogSuffix: true}; len(left) > 0; {
		select {
		case table := <-compacted:
			delete(left, table)
		case <-time.After(time.Minute):
			t.Fatalf("%v not compacted after a minute", left)
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
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"public.orders", "public.orders" + store.ChangelogSuffix} {
		if len(optimizeVersions(t, filepath.Join(tablesDir, table))) == 0 {
			t.Errorf("%s has no OPTIMIZE version", table)
		}
	}
	t.Logf("compaction of %d rows: %v of CPU at nice %d, %v in the whole process", 2*txns*rows, niced, compactNice, spent)
	if niced < spent*85/100 {
		t.Errorf("the threads at nice %d spent %v of the process's %v of CPU, want at least 85%%", compactNice, niced, spent)
	}
}

// compactedHandler is a log handler that sends the table of each
// "compaction" line, which a pass logs once it has compacted a table, to
// tables, and drops the rest.
type compactedHandler chan<- string

func (h compactedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h compactedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h compactedHandler) WithGroup(string) slog.Handler            { return h }

func (h compactedHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "compaction" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "table" {
				select {
				case h <- a.Value.String():
				default:
				}
			}
			return true
		})
	}
	return nil
}

// processCPU returns the CPU time the test process has spent.
func processCPU(t testing.TB) time.Duration {
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
