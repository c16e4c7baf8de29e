package backoff

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// waits returns the first n waits of b.
func waits(b *Backoff, n int) []time.Duration {
	var out []time.Duration
	for range n {
		out = append(out, b.Next())
	}
	return out
}

func TestBackoffGrowsToItsCap(t *testing.T) {
	b := New(Policy{Min: time.Second, Max: 30 * time.Second, Factor: 2})
	want := []time.Duration{1e9, 2e9, 4e9, 8e9, 16e9, 30e9, 30e9, 30e9}
	if got := waits(b, len(want)); !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

func TestBackoffResetStartsOver(t *testing.T) {
	b := New(Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Factor: 2})
	waits(b, 10)
	b.Reset()
	want := []time.Duration{100e6, 200e6, 400e6}
	if got := waits(b, len(want)); !slices.Equal(got, want) {
		t.Fatalf("waits after Reset %v, want %v", got, want)
	}
}

func TestPolicyStepEdges(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first", Policy{Min: time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}, 0, time.Millisecond},
		{"below the cap", Policy{Min: time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}, 6, 64 * time.Millisecond},
		{"capped", Policy{Min: time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}, 7, 100 * time.Millisecond},
		{"far past the cap", Policy{Min: time.Second, Max: time.Minute, Factor: 2}, 1 << 40, time.Minute},
		{"no overflow near the largest duration", Policy{Min: time.Hour, Max: time.Duration(1<<63 - 1), Factor: 2}, 200, time.Duration(1<<63 - 1)},
		{"factor one", Policy{Min: time.Second, Max: time.Minute, Factor: 1}, 1 << 40, time.Second},
		{"zero factor", Policy{Min: time.Second, Max: time.Minute}, 5, time.Second},
		{"max below min", Policy{Min: time.Second, Max: time.Millisecond, Factor: 2}, 3, time.Second},
		{"factor one and a half", Policy{Min: 2 * time.Second, Max: time.Minute, Factor: 1.5}, 2, 4500 * time.Millisecond},
	} {
		if got := c.p.Step(c.n); got != c.want {
			t.Errorf("%s: Step(%d) = %v, want %v", c.name, c.n, got, c.want)
		}
	}
}

func TestJitterStaysInItsRange(t *testing.T) {
	full := Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Jitter: Full}
	if d := full.Delay(0); d != full.Min {
		t.Fatalf("full jitter: first wait %v, want Min %v", d, full.Min)
	}
	equal := Policy{Min: time.Second, Max: time.Minute, Factor: 2, Jitter: Equal}
	for n := range 12 {
		step := full.Step(n)
		lo, hi, seen := step, time.Duration(0), map[time.Duration]bool{}
		for range 2000 {
			d := full.Delay(n)
			if d < full.Min || (step > full.Min && d >= step) {
				t.Fatalf("full jitter: retry %d waits %v, outside [%v, %v)", n, d, full.Min, step)
			}
			lo, hi, seen[d] = min(lo, d), max(hi, d), true
		}
		if n > 1 && (len(seen) < 100 || lo > full.Min+(step-full.Min)/4 || hi < step-(step-full.Min)/4) {
			t.Fatalf("full jitter: retry %d waits from %v to %v (%d values) for [%v, %v)", n, lo, hi, len(seen), full.Min, step)
		}

		step = equal.Step(n)
		lo, hi = step, 0
		for range 2000 {
			d := equal.Delay(n)
			if d < step/2 || d > step {
				t.Fatalf("equal jitter: retry %d waits %v, outside [%v, %v]", n, d, step/2, step)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo > step/2+step/8 || hi < step-step/8 {
			t.Fatalf("equal jitter: retry %d waits from %v to %v for [%v, %v]", n, lo, hi, step/2, step)
		}
	}
}

func TestWaitWaitsTheNextWait(t *testing.T) {
	b := New(Policy{Min: 20 * time.Millisecond, Max: time.Second, Factor: 2})
	start := time.Now()
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 60*time.Millisecond {
		t.Fatalf("two waits of 20ms and 40ms took %v", took)
	}
}

// TestWaitEndsWithItsContext cancels a wait of an hour: it returns the
// context's error at once, not after the hour.
func TestWaitEndsWithItsContext(t *testing.T) {
	b := New(Policy{Min: time.Hour, Max: time.Hour, Factor: 2})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- b.Wait(ctx) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not end with its context")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Wait took %v after its context ended", took)
	}

	// A context that ended already: no wait at all.
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sleep on an ended context: %v, want context.DeadlineExceeded", err)
	}
}
