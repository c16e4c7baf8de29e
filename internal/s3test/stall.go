package s3test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// StallingProxy forwards TCP connections to a Server. While it stalls,
// requests still reach the server but no answer comes back and no
// connection is closed: a bucket that accepts a PUT and never answers.
type StallingProxy struct {
	ln     net.Listener
	target string
	stall  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// NewStallingProxy starts a proxy in front of s on a free loopback port,
// closed with the test.
func NewStallingProxy(t testing.TB, s *Server) *StallingProxy {
	t.Helper()
	u, err := url.Parse(s.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &StallingProxy{ln: ln, target: u.Host}
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

// Endpoint returns the proxy's URL, for an S3 client's endpoint.
func (p *StallingProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Stall makes the proxy drop the server's answers (true) or forward them
// again (false).
func (p *StallingProxy) Stall(stall bool) { p.stall.Store(stall) }

func (p *StallingProxy) serve() {
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
				if n > 0 && !p.stall.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			if !p.stall.Load() {
				c.Close()
			}
		}()
	}
}
