package uploader_test

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/s3"
)

// stallingProxy forwards TCP connections to an S3 server; while it stalls,
// requests still reach the server but no answer comes back: a bucket that
// accepts a PUT and never answers.
type stallingProxy struct {
	ln       net.Listener
	target   string
	stalling atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func newStallingProxy(t *testing.T, target string) *stallingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go p.serve()
	return p
}

func (p *stallingProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *stallingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { io.Copy(s, c); s.Close(); c.Close() }()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				// While stalling, answers are read and dropped, and
				// the client's connection stays open, silent, until
				// the client gives up on it.
				if n > 0 && !p.stalling.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			if !p.stalling.Load() {
				c.Close()
			}
		}()
	}
}

// TestStalledBucketIsAnOfflineReplica makes the bucket stop answering
// while two tables have versions to upload: their requests are cancelled
// by their deadline, counted as stalls and reported as such, and once
// the bucket answers again every table is uploaded.
func TestStalledBucketIsAnOfflineReplica(t *testing.T) {
	srv := s3test.Start(t)
	u, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	px := newStallingProxy(t, u.Host)
	b := s3Backend(t, srv, func(c *s3.Config) {
		c.Endpoint = px.endpoint()
		c.Deadlines = s3.Deadlines{Stall: 500 * time.Millisecond, MinRate: 1 << 20}
	})
	root := t.TempDir()
	db := openDB(t, t.TempDir())
	tables := []*localTable{newLocalTable(t, root, "public.a"), newLocalTable(t, root, "public.b")}
	up := newUploader(t, db, b, root, func(o *uploader.Options) { o.PollInterval = 50 * time.Millisecond })
	stop := runUploader(up)
	defer stop()
	uploaded := func() bool {
		for _, lt := range tables {
			if v, _ := up.RemoteVersion(lt.name); v != lt.version {
				return false
			}
		}
		return true
	}
	for _, lt := range tables {
		lt.commit(3, 20)
	}
	up.Notify()
	waitFor(t, "first versions", 10*time.Second, uploaded)

	px.stalling.Store(true)
	for range 3 {
		for _, lt := range tables {
			lt.commit(3, 20)
		}
		up.Notify()
	}
	waitFor(t, "a stall reported", 30*time.Second, func() bool {
		st := up.Status()
		return !st.Online && st.Stalls > 0 && strings.Contains(st.LastError, "stalled")
	})
	if st := up.Status(); uploaded() || st.Stalls > st.Failures {
		t.Fatalf("while stalled: %+v", st)
	}

	px.stalling.Store(false)
	waitFor(t, "every table uploaded after the bucket answers again", 30*time.Second, uploaded)
	for _, lt := range tables {
		checkRemoteEqualsLocal(t, b, lt, lt.version)
	}
	if st := up.Status(); !st.Online {
		t.Fatalf("after recovery: %+v", st)
	}
}
