package applier

import (
	"context"

	"github.com/lakeside/lakeside/store"
)

// readAhead reads the batch that ends at upTo into the pending flush while
// the flush is not due yet: held back for capture to catch up, or waiting
// for its deadline. Capture's pace is the walsender's, and the scheduler
// thread it shares has time left over: reading the queue there, yielding
// often, leaves the flush that follows only the rest of the batch to read
// before it writes and commits. Nothing is committed. It reads about
// readAheadSlice changes and reports whether more of the batch is left to
// read. After a failure, what was read is dropped and reading ahead stops
// until the next flush, which reads the batch again and reports what
// fails.
//
// A performance trick, measured by TestBenchDeltaEndToEnd (make bench) and
// the tests of tuning_readahead_test.go; switched off by
// Config.Off.ReadAhead (LAKESIDE_TUNING_OFF=readahead for the agent).
func (a *Applier) readAhead(ctx context.Context, upTo store.LSN) (more bool) {
	if a.cfg.Off.ReadAhead || a.readAheadFailed || upTo <= a.read.upTo {
		return false
	}
	done, err := a.ingest(ctx, upTo, a.readAheadSlice)
	// What was read waits for the flush: the crash record names only the
	// work under way (crashloop.go).
	a.releaseBatch()
	if err != nil {
		a.reset()
		a.buffers.Release()
		a.readAheadFailed = true
		if ctx.Err() == nil {
			a.log.Debug("reading ahead stopped until the next flush", "err", err)
		}
		return false
	}
	return !done
}
