// Package backoff is the capped exponential backoff of the agent's retry
// loops, and a wait for it that ends as soon as its context does.
//
// A Policy says how the waits grow: the first is Min, each one after it
// Factor times the one before, up to Max, and Jitter says how a wait is
// drawn around that step. A Backoff hands out a Policy's waits in turn, for
// a loop that retries until it succeeds; Policy.Delay serves a caller that
// counts its retries itself.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter says how a wait is drawn from its step (see Policy.Step), so that
// agents that failed together do not retry in step.
type Jitter uint8

const (
	// None waits the step itself.
	None Jitter = iota
	// Full draws the wait uniformly from [Min, step): the whole range
	// above the floor; the first wait, whose step is Min, is Min.
	Full
	// Equal draws the wait uniformly from [step/2, step]: half of it is
	// kept, so that the waits still grow.
	Equal
)

// Policy is capped exponential backoff.
//
// Min is the first step and must be positive; Max caps the steps, and is
// taken as Min when below it. Factor is how much each step grows over the
// one before: 2 doubles it; a Factor of 1 or less keeps every step at Min.
// Jitter says how a wait is drawn from its step.
type Policy struct {
	Min, Max time.Duration
	Factor   float64
	Jitter   Jitter
}

// Step returns the step of retry n, counting from 0: Min times Factor to
// the n, at most Max.
func (p Policy) Step(n int) time.Duration {
	limit := max(p.Max, p.Min)
	d := min(p.Min, limit)
	for range n {
		next := float64(d) * p.Factor
		if next >= float64(limit) {
			return limit
		}
		if time.Duration(next) <= d {
			break // no growth: every later step is d too
		}
		d = time.Duration(next)
	}
	return d
}

// Delay returns the wait before retry n, counting from 0: its step, with
// the Policy's jitter.
func (p Policy) Delay(n int) time.Duration {
	step := p.Step(n)
	switch p.Jitter {
	case Full:
		if step > p.Min {
			return p.Min + rand.N(step-p.Min)
		}
	case Equal:
		if step > 1 {
			return step/2 + rand.N(step/2+1)
		}
	}
	return step
}

// Backoff hands out the waits of a Policy in turn: Next returns the wait
// before the next retry, Reset starts over from the first once the retried
// operation succeeded. It is not safe for concurrent use.
type Backoff struct {
	policy Policy
	n      int
}

// New returns a Backoff of p that starts at its first wait.
func New(p Policy) *Backoff { return &Backoff{policy: p} }

// Next returns the wait before the next retry, and counts the retry.
func (b *Backoff) Next() time.Duration {
	d := b.policy.Delay(b.n)
	b.n++
	return d
}

// Reset makes the next wait the first again.
func (b *Backoff) Reset() { b.n = 0 }

// Wait waits the next wait (Next), or returns ctx.Err() as soon as ctx
// ends.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits d, or returns ctx.Err() as soon as ctx ends (at once if it
// has ended already).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
