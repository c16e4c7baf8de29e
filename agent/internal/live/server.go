package live

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// Config configures the HTTP server.
type Config struct {
	// Listen is the address, e.g. "127.0.0.1:8080".
	Listen string
	// Token, when set, is required as a bearer token or ?token= on every
	// request but /healthz. It must be set when Listen is not loopback.
	Token string
	// AllowedHosts are the host names and addresses, beside the loopback
	// ones, that browsers may use for the page and the API
	// (http.allowed_hosts): without a token only requests to them are
	// answered, and with or without one only pages from them may call the
	// API.
	AllowedHosts []string
	// MaxClients caps the stream clients.
	MaxClients int
	// MaxConnections caps the open connections; at most a quarter of the
	// descriptor limit (and 1024) when zero or larger.
	MaxConnections int
	// ClientQueueBytes bounds what may wait for one stream client; a client
	// that falls further behind is closed as slow. Default 16 MiB.
	ClientQueueBytes int
	// TablesDir holds the local Delta tables, for time travel and history.
	TablesDir string
	Logger    *slog.Logger
}

// Agent is what the server needs from the running agent.
type Agent interface {
	// Status returns the object of `lakeside status --json`.
	Status() (any, error)
	// Ready returns nil when the agent is connected and streaming.
	Ready() error
}

// Server is the live view's HTTP server.
type Server struct {
	cfg      Config
	log      *slog.Logger
	hub      *Hub
	agent    Agent
	metrics  http.Handler
	web      http.Handler
	upgrader websocket.Upgrader
	hosts    hostPolicy
	conns    *connLimiter
	// token is the token in effect: cfg.Token until SetToken changes it.
	token atomic.Pointer[string]
	// streams counts the stream connections being served, from before
	// their upgrade (the cap of MaxClients).
	streams atomic.Int64
}

// MinTokenLength is the fewest characters, not counting whitespace around
// them, of the token a server reachable from the network requires.
const MinTokenLength = 16

// Errors of CheckListen.
var (
	// ErrTokenRequired means a non-loopback listen address has no token.
	ErrTokenRequired = errors.New("http.token is required when http.listen is not a loopback address")
	// ErrWeakToken means a non-loopback listen address has a token shorter
	// than MinTokenLength once the whitespace around it is left out.
	ErrWeakToken = fmt.Errorf("http.token must be at least %d characters, not counting whitespace around them, when http.listen is not a loopback address", MinTokenLength)
	// ErrBadPort means the port of the listen address is not a number from
	// 1 to 65535. Port 0, which asks the system for any free port, is
	// refused too: nobody could find the server.
	ErrBadPort = errors.New("http.listen: the port must be a number from 1 to 65535")
)

// CheckListen reports whether cfg may serve: the address has a port from 1
// to 65535, and a non-loopback address needs a token of at least
// MinTokenLength characters. Its errors never quote the token.
func CheckListen(cfg Config) error {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %q: %w", cfg.Listen, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return ErrBadPort
	}
	if newHostPolicy(nil).allows(host) {
		return nil // loopback
	}
	if cfg.Token == "" {
		return fmt.Errorf("%w (http.listen is %q)", ErrTokenRequired, cfg.Listen)
	}
	if utf8.RuneCountInString(strings.TrimSpace(cfg.Token)) < MinTokenLength {
		return fmt.Errorf("%w (http.listen is %q)", ErrWeakToken, cfg.Listen)
	}
	return nil
}

// NewServer returns the server. metrics serves /metrics; web serves the
// page (nil: no page).
func NewServer(cfg Config, hub *Hub, agent Agent, metrics, web http.Handler) *Server {
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = 64
	}
	if cfg.ClientQueueBytes <= 0 {
		cfg.ClientQueueBytes = 16 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, hub: hub, agent: agent, metrics: metrics, web: web,
		hosts: newHostPolicy(cfg.AllowedHosts), conns: newConnLimiter(connectionCap(cfg.MaxConnections))}
	s.token.Store(&cfg.Token)
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		CheckOrigin:      s.hosts.allowsOrigin,
	}
	return s
}

// Handler returns the routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.auth(s.serveReady))
	if s.metrics != nil {
		mux.Handle("GET /metrics", s.auth(s.metrics.ServeHTTP))
	}
	mux.HandleFunc("GET /api/v1/status", s.auth(s.serveStatus))
	mux.HandleFunc("GET /api/v1/tables", s.auth(s.serveTables))
	mux.HandleFunc("GET /api/v1/tables/{table}/rows", s.auth(s.serveRows))
	mux.HandleFunc("GET /api/v1/tables/{table}/rows/{key}", s.auth(s.serveRow))
	mux.HandleFunc("GET /api/v1/tables/{table}/history", s.auth(s.serveHistory))
	mux.HandleFunc("GET /api/v1/stream", s.auth(s.serveStream))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	if s.web != nil {
		mux.Handle("/", s.web)
	}
	return s.guard(mux)
}

// SetToken replaces the token required from clients, for a configuration
// reload; connected stream clients stay connected.
func (s *Server) SetToken(token string) { s.token.Store(&token) }

// auth checks the token when one is configured. A token given as ?token=
// is taken out of the request before the handler sees it, so that nothing
// a handler logs or echoes about the request can reveal it.
func (s *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got := r.URL.Query().Get("token")
		r = withoutQueryToken(r)
		if token := *s.token.Load(); token != "" {
			if scheme, credentials, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
				got = strings.TrimSpace(credentials)
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="lakeside"`)
				writeError(w, http.StatusUnauthorized, "a valid token is required")
				return
			}
		}
		next(w, r)
	}
}

// withoutQueryToken returns r without the token parameter of its query
// string, or r itself when it has none.
func withoutQueryToken(r *http.Request) *http.Request {
	q := r.URL.Query()
	if !q.Has("token") {
		return r
	}
	q.Del("token")
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = q.Encode()
	r2.RequestURI = r2.URL.RequestURI()
	return r2
}

// Serve listens and serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	if err := CheckListen(s.cfg); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("http listen: %w", err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ConnState:         s.conns.connState,
		ConnContext:       s.conns.connContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.conns.listener(ln)) }()
	s.log.Info("live view listening", "address", ln.Addr().String(), "max_connections", s.conns.cap)
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}

// errorBody is the answer to a request that failed.
type errorBody struct {
	Error string `json:"error"`
}

// writeError answers with {"error": message}.
func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, errorBody{Error: message})
}
