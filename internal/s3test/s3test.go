// Package s3test starts a throwaway S3 server for tests: versitygw with its
// posix backend on a free loopback port and a temporary directory, built into
// the module's bin directory by `make deps`.
//
// The helpers never skip: when versitygw is missing they fail the test with
// a message that says how to build it.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credentials of the server's root account.
const (
	AccessKey = "lakeside-test"
	SecretKey = "lakeside-test-secret"
	Region    = "us-east-1"
)

// Server is a running (or stopped) versitygw.
type Server struct {
	t      testing.TB
	bin    string
	dir    string
	addr   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	output *bytes.Buffer
	done   chan struct{}
}

// FindBinary returns the path of bin/versitygw in the module root, found by
// walking up from the working directory to go.mod.
func FindBinary() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "bin", "versitygw")
			if _, err := os.Stat(bin); err != nil {
				return "", errors.New("versitygw not found: run make deps")
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("versitygw not found: run make deps (no go.mod above the working directory)")
		}
		dir = parent
	}
}

// Start starts versitygw for the test on a free loopback port; it is stopped
// when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an S3 server: not a short test")
	}
	bin, err := FindBinary()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	s.addr = l.Addr().String()
	l.Close()
	t.Cleanup(s.Stop)
	s.Restart()
	return s
}

// Endpoint returns the server's URL, such as "http://127.0.0.1:41234".
func (s *Server) Endpoint() string { return "http://" + s.addr }

// Dir returns the posix backend directory (one subdirectory per bucket).
func (s *Server) Dir() string { return s.dir }

// Restart starts the server again after Stop, on the same port and
// directory. It waits until the server answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	out := &bytes.Buffer{}
	cmd := exec.Command(s.bin, "--port", s.addr, "--access", AccessKey, "--secret", SecretKey,
		"--region", Region, "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("s3test: start versitygw: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			s.t.Fatalf("s3test: versitygw exited: %s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			s.t.Fatalf("s3test: versitygw did not answer on %s: %s", s.addr, out.String())
		}
	}
	s.cmd, s.output, s.done = cmd, out, done
}

// Stop stops the server; the data directory is kept for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Client returns a minio-go client for the server.
func (s *Server) Client() *minio.Client {
	s.t.Helper()
	c, err := minio.New(s.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		Region:       Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		s.t.Fatalf("s3test: %v", err)
	}
	return c
}

// NewBucket creates a bucket with a unique name and returns the name.
func (s *Server) NewBucket() string {
	s.t.Helper()
	var b [4]byte
	rand.Read(b[:])
	name := "test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Client().MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		s.t.Fatalf("s3test: create bucket: %v", err)
	}
	return name
}

// Download copies every object under prefix into dir, keeping the key
// layout below prefix.
func (s *Server) Download(ctx context.Context, bucket, prefix, dir string) error {
	c := s.Client()
	if prefix != "" && prefix[len(prefix)-1] != '/' {
		prefix += "/"
	}
	for obj := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		dst := filepath.Join(dir, filepath.FromSlash(obj.Key[len(prefix):]))
		if err := c.FGetObject(ctx, bucket, obj.Key, dst, minio.GetObjectOptions{}); err != nil {
			return fmt.Errorf("download %s: %w", obj.Key, err)
		}
	}
	return nil
}
