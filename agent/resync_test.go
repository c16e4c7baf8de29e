package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/internal/source"
)

// fakeBackfills is a list of copies that changes as the source's does:
// each change closes the channel changed returned before it.
type fakeBackfills struct {
	mu      sync.Mutex
	list    []source.BackfillStatus
	changes chan struct{}
}

func (f *fakeBackfills) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes
}

func (f *fakeBackfills) backfills() []source.BackfillStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]source.BackfillStatus(nil), f.list...)
}

func (f *fakeBackfills) note(b source.BackfillStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = []source.BackfillStatus{b}
	close(f.changes)
	f.changes = make(chan struct{})
}

// TestAwaitBackfillAnswersWhenTheCopyEnds follows a copy: the answer comes
// as soon as the copy is noted done, not when the wait is over; a copy
// still running is answered as it is once the wait is over, and one that
// began before the resync, or of another table, is not the one followed.
func TestAwaitBackfillAnswersWhenTheCopyEnds(t *testing.T) {
	since := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	f := &fakeBackfills{changes: make(chan struct{})}
	f.note(source.BackfillStatus{Table: "public.a", Since: since.Add(-time.Second), Done: true})

	got := awaitBackfill(t.Context(), f.changed, f.backfills, "public.a", since, 50*time.Millisecond)
	if got != nil {
		t.Fatalf("a copy that began before the resync was followed: %+v", got)
	}

	f.note(source.BackfillStatus{Table: "public.a", Since: since, Running: true, Rows: 10, Chunks: 1})
	got = awaitBackfill(t.Context(), f.changed, f.backfills, "public.b", since, 50*time.Millisecond)
	if got != nil {
		t.Fatalf("the copy of another table was followed: %+v", got)
	}
	got = awaitBackfill(t.Context(), f.changed, f.backfills, "public.a", since, 50*time.Millisecond)
	if got == nil || got.State != BackfillRunning || got.RowsCopied != 10 {
		t.Fatalf("a running copy after the wait: %+v, want it running with 10 rows", got)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	answered := make(chan *BackfillStatus)
	go func() { answered <- awaitBackfill(ctx, f.changed, f.backfills, "public.a", since, time.Hour) }()
	f.note(source.BackfillStatus{Table: "public.a", Since: since, Running: true, Rows: 20, Chunks: 2})
	time.Sleep(10 * time.Millisecond)
	f.note(source.BackfillStatus{Table: "public.a", Since: since, Done: true, Rows: 30, Chunks: 3, Finished: since.Add(time.Second)})
	got = <-answered
	if ctx.Err() != nil || got == nil || got.State != BackfillDone || got.RowsCopied != 30 {
		t.Fatalf("a copy followed for an hour that ends: %+v (%v), want it done with 30 rows before the test's minute", got, ctx.Err())
	}
}
