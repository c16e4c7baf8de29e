package parquet

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackAfter is how many bytes written to a data file make the kernel
// start writing them out.
const writebackAfter = 8 << 20

// writeback writes a data file and has the kernel start writing out each
// writebackAfter bytes written, without waiting for it (sync_file_range):
// the fsync that closes the file then waits only for the last of them, and
// the disk takes a flush's files as they are written rather than in one
// burst at its end.
//
// A performance trick, measured by BenchmarkApplyLargeTransaction
// (agent/internal/applier) and make bench's end-to-end figures; switched
// off by WriteOptions.NoWriteback (LAKESIDE_TUNING_OFF=writeback for the
// agent), which leaves the whole file to the fsync that closes it.
type writeback struct {
	f                *os.File
	written, started int64
}

// Write writes p to the file, and starts the writeout of what was written
// since the last start once that is writebackAfter bytes.
func (w *writeback) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if w.written-w.started >= writebackAfter {
		// Only a hint, whose failure changes nothing: the fsync at Close
		// is what makes the file durable.
		unix.SyncFileRange(int(w.f.Fd()), w.started, w.written-w.started, unix.SYNC_FILE_RANGE_WRITE)
		w.started = w.written
	}
	return n, err
}
