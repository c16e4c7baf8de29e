package s3

import (
	"net/http"
	"testing"
	"time"
)

// TestJitterBackoff checks the waits between HTTP retries: the first is
// MinWait, each later one is drawn from [MinWait, MinWait doubled per
// retry), capped at MaxWait, and a Retry-After of a 429 or 503 replaces
// it, capped too.
func TestJitterBackoff(t *testing.T) {
	const minWait, maxWait = 200 * time.Millisecond, 5 * time.Second
	if d := jitterBackoff(minWait, maxWait, 0, nil); d != minWait {
		t.Fatalf("first retry waits %v, want %v", d, minWait)
	}
	for attempt := 1; attempt < 40; attempt++ {
		ceil := min(minWait<<min(attempt, 30), maxWait)
		for range 200 {
			if d := jitterBackoff(minWait, maxWait, attempt, nil); d < minWait || d >= ceil {
				t.Fatalf("retry %d waits %v, outside [%v, %v)", attempt, d, minWait, ceil)
			}
		}
	}
	for _, c := range []struct {
		status int
		after  string
		want   time.Duration
	}{
		{http.StatusTooManyRequests, "2", 2 * time.Second},
		{http.StatusServiceUnavailable, "60", maxWait},
	} {
		resp := &http.Response{StatusCode: c.status, Header: http.Header{"Retry-After": {c.after}}}
		if d := jitterBackoff(minWait, maxWait, 0, resp); d != c.want {
			t.Errorf("status %d with Retry-After %s: waits %v, want %v", c.status, c.after, d, c.want)
		}
	}
}
