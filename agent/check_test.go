package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/replica"
)

// TestCheckReplicaFindsIgnoredConditionalPuts runs the replica checks
// against an S3 server that honours If-None-Match and one that ignores it:
// only the second fails the check that a commit cannot be overwritten.
func TestCheckReplicaFindsIgnoredConditionalPuts(t *testing.T) {
	for _, honours := range []bool{true, false} {
		s := newMemoryS3(honours)
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		cfg := &config.Config{Replica: uploader.Config{URL: "s3://bucket/lake", Site: "branch1", Endpoint: srv.URL,
			Region: "us-east-1", AccessKeyID: "key", SecretAccessKey: "secret"}}
		var conditional *Check
		for _, c := range CheckReplica(context.Background(), cfg) {
			if strings.Contains(c.Name, "conditional put") {
				conditional = &c
			} else if !c.OK {
				t.Fatalf("honours If-None-Match %v: %s: %s", honours, c.Name, c.Problem)
			}
		}
		switch {
		case conditional == nil:
			t.Fatal("no check of conditional puts")
		case conditional.OK != honours:
			t.Errorf("honours If-None-Match %v: the check says OK %v (%s)", honours, conditional.OK, conditional.Problem)
		case !honours && !strings.Contains(conditional.Fix, "If-None-Match"):
			t.Errorf("the fix does not name If-None-Match: %s", conditional.Fix)
		}
		if n := s.len(); n != 0 {
			t.Errorf("honours If-None-Match %v: the check left %d objects", honours, n)
		}
	}
}

// memoryS3 is an S3 server in memory for a few objects, which checks no
// signature and, unless honours, ignores If-None-Match.
type memoryS3 struct {
	honours bool
	mu      sync.Mutex
	objects map[string][]byte
}

func newMemoryS3(honours bool) *memoryS3 {
	return &memoryS3{honours: honours, objects: map[string][]byte{}}
}

func (s *memoryS3) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

func (s *memoryS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := r.URL.Path
	switch r.Method {
	case http.MethodPut:
		if _, exists := s.objects[key]; exists && s.honours && r.Header.Get("If-None-Match") == "*" {
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, `<Error><Code>PreconditionFailed</Code><Message>exists</Message></Error>`)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.objects[key] = body
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
	case http.MethodGet, http.MethodHead:
		body, ok := s.objects[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `<Error><Code>NoSuchKey</Code><Message>none</Message></Error>`)
			return
		}
		w.Header().Set("ETag", `"0123456789abcdef0123456789abcdef"`)
		w.Header().Set("Last-Modified", "Mon, 07 Dec 2026 00:00:00 GMT")
		w.Write(body)
	case http.MethodDelete:
		delete(s.objects, key)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// TestCheckReplicaLayout checks the replica's layout marker: none yet and
// the configured one pass, another fails with the key to change.
func TestCheckReplicaLayout(t *testing.T) {
	srv := httptest.NewServer(newMemoryS3(true))
	t.Cleanup(srv.Close)
	cfg := &config.Config{Replica: uploader.Config{URL: "s3://bucket/lake", Site: "branch1", Endpoint: srv.URL,
		Region: "us-east-1", AccessKeyID: "key", SecretAccessKey: "secret"}}
	layoutCheck := func() Check {
		for _, c := range CheckReplica(context.Background(), cfg) {
			if strings.Contains(c.Name, "layout") {
				return c
			}
		}
		t.Fatal("no layout check")
		return Check{}
	}
	if c := layoutCheck(); !c.OK || !strings.Contains(c.Name, "no layout yet") {
		t.Errorf("an empty replica: %+v", c)
	}
	root, err := replica.OpenRoot(cfg.Replica, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := uploader.ClaimLayout(context.Background(), root, uploader.LayoutFleet); err != nil {
		t.Fatal(err)
	}
	if c := layoutCheck(); c.OK || !strings.Contains(c.Fix, "replica.layout: fleet") {
		t.Errorf("a fleet replica, site configured: %+v", c)
	}
	cfg.Replica.Layout = uploader.LayoutFleet
	if c := layoutCheck(); !c.OK {
		t.Errorf("a fleet replica, fleet configured: %+v", c)
	}
}
