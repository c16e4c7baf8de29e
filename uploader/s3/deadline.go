package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakeside/lakeside/uploader"
)

// Deadlines.
//
// A bucket that accepts a request and never answers would hold the request,
// and the upload pass waiting on it, for ever: the uploader's backoff and
// poll interval act only between requests. So every attempt of every
// request has a watchdog (deadlineTransport, below the retries): it is
// cancelled when no byte of it has moved for Deadlines.Stall (connecting,
// sending the body, waiting for the answer, reading it), or when it takes
// longer than twice Stall plus its body's size at Deadlines.MinRate, so
// that a trickle cannot hold it either while a large part on a slow uplink
// still completes. A cancelled attempt fails with uploader.ErrStalled, which the
// retries retry and the uploader counts and reports as a stall.

// Deadlines bound each attempt of a request.
type Deadlines struct {
	// Stall is the longest time no byte of a request moves: connecting,
	// sending its body, waiting for the answer or reading it.
	Stall time.Duration
	// MinRate, in bytes per second, bounds the time a request takes in
	// all: twice Stall, plus its body's bytes (and then its answer's) at
	// this rate.
	MinRate int64
}

// DefaultDeadlines returns the deadlines used when Config.Deadlines is
// zero: 30 s without progress, and at least 4 KiB/s.
func DefaultDeadlines() Deadlines {
	return Deadlines{Stall: 30 * time.Second, MinRate: 4 << 10}
}

// deadlineTransport runs each request under a watchdog (see Deadlines).
type deadlineTransport struct {
	next http.RoundTripper
	d    Deadlines
}

func (t deadlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	w := newWatchdog(t.d, cancel, req.ContentLength)
	req = req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &progressBody{ReadCloser: req.Body, w: w}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		w.stop()
		return nil, w.explain(err)
	}
	w.answered(resp.ContentLength)
	resp.Body = &progressBody{ReadCloser: resp.Body, w: w, closes: true}
	return resp, nil
}

// watchdog cancels a request that stalls or is too slow.
type watchdog struct {
	d      Deadlines
	cancel context.CancelFunc
	// last is when a byte last moved, in Unix nanoseconds.
	last atomic.Int64
	// why says why the request was cancelled, once it was.
	why atomic.Pointer[string]

	mu      sync.Mutex
	idle    *time.Timer
	overall *time.Timer
	stopped bool
}

// newWatchdog starts the watchdog of a request whose body has size bytes
// (-1: unknown).
func newWatchdog(d Deadlines, cancel context.CancelFunc, size int64) *watchdog {
	w := &watchdog{d: d, cancel: cancel}
	w.last.Store(time.Now().UnixNano())
	w.idle = time.AfterFunc(d.Stall, w.checkIdle)
	w.overall = time.AfterFunc(w.allowed(size), w.tooSlow)
	return w
}

// tooSlow cancels the request that took longer than it may: a stall when
// nothing moved for Stall, else too slow.
func (w *watchdog) tooSlow() {
	if time.Since(time.Unix(0, w.last.Load())) >= w.d.Stall {
		w.fire(fmt.Sprintf("no progress for %v", w.d.Stall))
		return
	}
	w.fire(fmt.Sprintf("slower than %d bytes/s", w.d.MinRate))
}

// allowed returns how long moving size bytes may take: twice Stall, so
// that a request that stops moving is told by the stall, plus size at
// MinRate.
func (w *watchdog) allowed(size int64) time.Duration {
	d := 2 * w.d.Stall
	if size > 0 && w.d.MinRate > 0 {
		d += time.Duration(size) * time.Second / time.Duration(w.d.MinRate)
	}
	return d
}

// progress records that bytes moved.
func (w *watchdog) progress() { w.last.Store(time.Now().UnixNano()) }

// checkIdle cancels the request when nothing moved for Stall, and looks
// again when something did.
func (w *watchdog) checkIdle() {
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.d.Stall {
		w.fire(fmt.Sprintf("no progress for %v", w.d.Stall))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.idle.Reset(w.d.Stall - quiet)
	}
}

// answered restarts the overall deadline for the answer's body of size
// bytes.
func (w *watchdog) answered(size int64) {
	w.progress()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.overall.Reset(w.allowed(size))
	}
}

// fire cancels the request, saying why.
func (w *watchdog) fire(why string) {
	w.why.CompareAndSwap(nil, &why)
	w.stop()
	w.cancel()
}

// stop ends the watchdog once the request is done.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.idle.Stop()
	w.overall.Stop()
}

// explain returns err, marked as a stall when the watchdog cancelled the
// request.
func (w *watchdog) explain(err error) error {
	if why := w.why.Load(); why != nil {
		return fmt.Errorf("%w: %s: %w", uploader.ErrStalled, *why, err)
	}
	return err
}

// progressBody tells the watchdog of each read of a request's body or an
// answer's; closing an answer's ends the watchdog and the request.
type progressBody struct {
	io.ReadCloser
	w      *watchdog
	closes bool
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.progress()
	}
	if err != nil && err != io.EOF {
		err = b.w.explain(err)
	}
	return n, err
}

func (b *progressBody) Close() error {
	err := b.ReadCloser.Close()
	if b.closes {
		b.w.stop()
		b.w.cancel()
	}
	return err
}
