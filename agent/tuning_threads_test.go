package agent

import (
	"io"
	"log/slog"
	"slices"
	"testing"
)

// recordingThreads returns a policy whose GOMAXPROCS settings are recorded
// in the slice returned beside it.
func recordingThreads(catchingUp, otherwise int) (*threads, *[]int) {
	set := &[]int{}
	th := newThreads(slog.New(slog.NewTextHandler(io.Discard, nil)), catchingUp, otherwise, func(n int) int {
		*set = append(*set, n)
		return 0
	})
	return th, set
}

// TestThreadsFollowCapture checks the scheduler threads the agent runs on:
// the catching-up count from the start, all of them once capture has
// caught up, and no change when capture's state does not change.
func TestThreadsFollowCapture(t *testing.T) {
	th, set := recordingThreads(1, 4)
	for _, catchingUp := range []bool{true, false, false, true, false} {
		th.CatchUp(catchingUp)
	}
	if want := []int{1, 4, 1, 4}; !slices.Equal(*set, want) {
		t.Fatalf("GOMAXPROCS set to %v, want %v", *set, want)
	}
	// A machine of one CPU keeps its one thread.
	th, set = recordingThreads(0, 1)
	th.CatchUp(false)
	if want := []int{1}; !slices.Equal(*set, want) {
		t.Fatalf("on one CPU GOMAXPROCS set to %v, want %v", *set, want)
	}
}

// TestThreadsAddOneForAQueueCommit checks that a queue commit while capture
// catches up takes a thread more, up to every thread, and gives it back.
func TestThreadsAddOneForAQueueCommit(t *testing.T) {
	th, set := recordingThreads(1, 2)
	th.CatchUpCommit(true)
	th.CatchUpCommit(false)
	// A commit that ends after capture has caught up leaves every thread.
	th.CatchUpCommit(true)
	th.CatchUp(false)
	th.CatchUpCommit(false)
	th.CatchUpCommit(true)
	th.CatchUpCommit(false)
	if want := []int{1, 2, 1, 2}; !slices.Equal(*set, want) {
		t.Fatalf("GOMAXPROCS set to %v, want %v", *set, want)
	}
	// On one CPU there is no thread more to take.
	th, set = recordingThreads(0, 1)
	th.CatchUpCommit(true)
	th.CatchUpCommit(false)
	if want := []int{1}; !slices.Equal(*set, want) {
		t.Fatalf("on one CPU GOMAXPROCS set to %v, want %v", *set, want)
	}
}
