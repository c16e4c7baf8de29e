package live

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The guards of the HTTP server: which Host and Origin headers it answers
// (against DNS rebinding and cross-site pages), how long a connection may
// take or idle, and how many may be open at once (so that a flood of
// connections cannot take the descriptors the pipeline needs).

// Timeouts of the HTTP server. A WebSocket stream is not subject to them
// once upgraded: it has its own ping and write deadlines (stream.go).
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = 60 * time.Second
	idleTimeout       = 60 * time.Second
)

// maxConnections is the most connections the server keeps open when the
// descriptor limit allows it (see connectionCap).
const maxConnections = 1024

// connectionCap returns how many connections the server may keep open:
// configured (when positive), at most maxConnections, and at most a
// quarter of the process's descriptor limit, which leaves the rest to the
// state file, the Delta tables, the replication and database connections
// and the uploader.
func connectionCap(configured int) int {
	limit := maxConnections
	if configured > 0 {
		limit = min(limit, configured)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur > 0 {
		limit = int(min(uint64(limit), max(lim.Cur/4, 16)))
	}
	return limit
}

// hostPolicy decides which Host and Origin headers are answered.
type hostPolicy struct {
	// allowed holds the lowercased host names and addresses, without
	// ports: the loopback names and the configured ones.
	allowed map[string]bool
}

// newHostPolicy returns the policy of a server whose configuration allows
// the hosts given (http.allowed_hosts), beside the loopback names.
func newHostPolicy(hosts []string) hostPolicy {
	p := hostPolicy{allowed: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	for _, h := range hosts {
		p.allowed[strings.ToLower(strings.Trim(h, "[]"))] = true
	}
	return p
}

// allows reports whether hostport (a Host header, or the host of an
// Origin) names an allowed host, on any port.
func (p hostPolicy) allows(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return p.allowed[host]
}

// allowsOrigin reports whether a request's Origin may use the API: no
// Origin (a tool, not a browser), or an http(s) origin on an allowed host.
// It is never compared with the Host header, which the page that sends
// the request chooses as much as the Origin.
func (p hostPolicy) allowsOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	return p.allows(u.Host)
}

// guard answers only requests whose Host is allowed (unless a token is
// required, which a rebound page cannot know) and whose Origin is allowed,
// and marks every answer nosniff. A request it sees has its header: its
// connection is serving, and not closed to make room (connLimiter).
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.conns.serving(r.Context())
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path != "/healthz" {
			if *s.token.Load() == "" && !s.hosts.allows(r.Host) {
				writeError(w, http.StatusMisdirectedRequest, "host not allowed: open the page as localhost or 127.0.0.1, or list the name in http.allowed_hosts")
				return
			}
			if !s.hosts.allowsOrigin(r) {
				writeError(w, http.StatusForbidden, "origin not allowed: list its host in http.allowed_hosts")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// connLimiter keeps at most cap connections open. When a connection
// arrives at the cap, one that is not serving a request is closed to make
// room: first the one waiting longest for a complete request header (a
// client that connects and sends nothing, or half a header, would
// otherwise hold its slot until the header timeout, and a few thousand of
// them would lock every client out), then the longest-idle keep-alive
// connection. A connection serving a request (a WebSocket stream too) is
// never closed; with every one serving, the new one is closed at once.
type connLimiter struct {
	cap  int
	open atomic.Int64

	mu sync.Mutex
	// waiting are the connections that have not sent a complete request
	// header since they opened or were last idle, since when; idle the
	// keep-alive connections waiting for a request, since when.
	waiting map[net.Conn]time.Time
	idle    map[net.Conn]time.Time
}

func newConnLimiter(cap int) *connLimiter {
	return &connLimiter{cap: cap, waiting: map[net.Conn]time.Time{}, idle: map[net.Conn]time.Time{}}
}

// listener returns ln with the cap applied.
func (l *connLimiter) listener(ln net.Listener) net.Listener { return &limitedListener{ln, l} }

// connKey is the request context key of the connection a request came on.
type connKey struct{}

// connContext is the server's ConnContext hook: requests know their
// connection, for serving.
func (l *connLimiter) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connState is the server's ConnState hook: a new connection, or one that
// starts reading a request, waits for its header; an idle one waits for a
// request.
func (l *connLimiter) connState(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, c)
	delete(l.idle, c)
	switch state {
	case http.StateNew, http.StateActive:
		l.waiting[c] = time.Now()
	case http.StateIdle:
		l.idle[c] = time.Now()
	}
}

// serving records that the connection of a request's context has sent its
// header: it serves the request now.
func (l *connLimiter) serving(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		l.mu.Lock()
		delete(l.waiting, c)
		l.mu.Unlock()
	}
}

// makeRoom closes the connection waiting longest for a request header, or
// else the longest-idle one; it reports false when every one is serving.
func (l *connLimiter) makeRoom() bool {
	l.mu.Lock()
	oldest := oldestConn(l.waiting)
	if oldest == nil {
		oldest = oldestConn(l.idle)
	}
	delete(l.waiting, oldest)
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	oldest.Close()
	return true
}

// oldestConn returns the connection of conns with the earliest time, or nil.
func oldestConn(conns map[net.Conn]time.Time) net.Conn {
	var oldest net.Conn
	var since time.Time
	for c, t := range conns {
		if oldest == nil || t.Before(since) {
			oldest, since = c, t
		}
	}
	return oldest
}

type limitedListener struct {
	net.Listener
	l *connLimiter
}

func (ll *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ll.l.open.Load() >= int64(ll.l.cap) && !ll.l.makeRoom() {
			c.Close()
			continue
		}
		ll.l.open.Add(1)
		return &limitedConn{Conn: c, l: ll.l}, nil
	}
}

type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}
