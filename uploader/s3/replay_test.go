package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/uploader"
)

// gatedReader gives gate bytes, then waits until the server has started to
// receive the body: a client that read the whole body into memory before
// sending it would wait for ever, and fails instead.
type gatedReader struct {
	r       io.Reader
	gate    int
	sent    int
	started <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.sent >= g.gate {
		select {
		case <-g.started:
		case <-time.After(5 * time.Second):
			return 0, errors.New("the body was read ahead of sending it")
		}
	}
	n, err := g.r.Read(p)
	g.sent += n
	return n, err
}

// TestRetriedPutIsNotBufferedAndSendsTheSameBytes: a put whose first
// attempt fails with 503 is sent again with the same bytes, read again from
// its source; the body is streamed as it is read, not held in memory first.
func TestRetriedPutIsNotBufferedAndSendsTheSameBytes(t *testing.T) {
	data := make([]byte, 8<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var (
		mu      sync.Mutex
		bodies  [][]byte
		started = make(chan struct{})
		once    sync.Once
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		var buf bytes.Buffer
		first := make([]byte, 1)
		if _, err := io.ReadFull(r.Body, first); err == nil {
			buf.Write(first)
			once.Do(func() { close(started) })
		}
		io.Copy(&buf, r.Body)
		mu.Lock()
		bodies = append(bodies, buf.Bytes())
		attempt := len(bodies)
		mu.Unlock()
		if attempt == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("ETag", `"etag"`)
	}))
	defer srv.Close()

	c, err := New(Config{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", Bucket: "bucket",
		Retry: RetryPolicy{MaxRetries: 2, MinWait: time.Millisecond, MaxWait: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	reopened := 0
	body := uploader.Body{
		R:      &gatedReader{r: bytes.NewReader(data), gate: 1 << 20, started: started},
		Size:   int64(len(data)),
		SHA256: sum[:],
		Reopen: func() io.Reader { reopened++; return bytes.NewReader(data) },
	}
	if err := c.PutObject(context.Background(), "k", body, uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || reopened != 1 {
		t.Fatalf("%d attempts, body reopened %d times; want 2 and 1", len(bodies), reopened)
	}
	for i, b := range bodies {
		if !bytes.Equal(b, data) {
			t.Fatalf("attempt %d sent %d bytes that differ from the body", i+1, len(b))
		}
	}
}

// TestConditionalPutConflictIsRetried answers a conditional put with 409
// ConditionalRequestConflict, as S3 does while a conflicting request for
// the key is in flight, then with 412: the put is sent again and fails
// its condition, as the uploader expects of a key taken.
func TestConditionalPutConflictIsRetried(t *testing.T) {
	var mu sync.Mutex
	var attempts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		attempts = append(attempts, r.Header.Get("If-None-Match"))
		n := len(attempts)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		if n == 1 {
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `<Error><Code>ConditionalRequestConflict</Code><Message>retry</Message></Error>`)
			return
		}
		w.WriteHeader(http.StatusPreconditionFailed)
		io.WriteString(w, `<Error><Code>PreconditionFailed</Code><Message>exists</Message></Error>`)
	}))
	defer srv.Close()
	c, err := New(Config{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", Bucket: "bucket",
		Retry: RetryPolicy{MaxRetries: 2, MinWait: time.Millisecond, MaxWait: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("commit")
	sum := sha256.Sum256(data)
	err = c.PutObject(context.Background(), "_delta_log/00000000000000000001.json",
		uploader.Body{R: bytes.NewReader(data), Size: int64(len(data)), SHA256: sum[:]}, uploader.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, uploader.ErrPreconditionFailed) {
		t.Fatalf("put: %v, want ErrPreconditionFailed after a retry", err)
	}
	if len(attempts) != 2 || attempts[0] != "*" || attempts[1] != "*" {
		t.Fatalf("attempts with If-None-Match %q, want two conditional puts", attempts)
	}
}
