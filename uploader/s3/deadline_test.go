package s3

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/uploader"
)

// TestDeadlines sends requests to a server that stalls or trickles: a
// request whose bytes stop moving, or that goes slower than the minimum
// rate, fails with ErrStalled saying which; one that keeps moving at the
// minimum rate or faster completes, however long it takes.
func TestDeadlines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/silent":
			<-r.Context().Done()
		case "/trickle":
			w.Header().Set("Content-Length", "50")
			for range 50 {
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		}
	}))
	defer srv.Close()
	get := func(d Deadlines, path string) (string, error) {
		c := &http.Client{Transport: deadlineTransport{next: http.DefaultTransport, d: d}}
		resp, err := c.Post(srv.URL+path, "text/plain", strings.NewReader("body"))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	_, err := get(Deadlines{Stall: 200 * time.Millisecond, MinRate: 1 << 20}, "/silent")
	if !errors.Is(err, uploader.ErrStalled) || !strings.Contains(err.Error(), "no progress for 200ms") {
		t.Fatalf("a server that never answers: %v", err)
	}
	// 50 bytes over a second, at least 10 bytes/s: twice Stall plus 5 s.
	if body, err := get(Deadlines{Stall: 200 * time.Millisecond, MinRate: 10}, "/trickle"); err != nil || len(body) != 50 {
		t.Fatalf("a slow answer within the minimum rate: %d bytes, %v", len(body), err)
	}
	// At least 1000 bytes/s: twice Stall plus 50 ms.
	_, err = get(Deadlines{Stall: 200 * time.Millisecond, MinRate: 1000}, "/trickle")
	if !errors.Is(err, uploader.ErrStalled) || !strings.Contains(err.Error(), "slower than 1000 bytes/s") {
		t.Fatalf("an answer slower than the minimum rate: %v", err)
	}
}
