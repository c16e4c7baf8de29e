package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/applier"
	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// fixture runs a real source on a database of its own, a hub over its
// queue, and the server on a loopback test listener.
type fixture struct {
	t    *testing.T
	conn *pgx.Conn
	db   *store.DB
	src  *source.Source
	hub  *Hub
	http *httptest.Server
	cfg  Config
}

type fakeAgent struct{ src *source.Source }

func (a fakeAgent) Status() (any, error) {
	st := a.src.Status()
	return map[string]any{"state": st.State, "confirmed_lsn": st.ConfirmedLSN.String()}, nil
}

func (a fakeAgent) Ready() error {
	if st := a.src.Status(); st.State != "streaming" {
		return errors.New("source is " + st.State)
	}
	return nil
}

func newFixture(t *testing.T, cfg Config, schema ...string) *fixture {
	t.Helper()
	return newFixtureOf(t, cfg, []string{"stock"}, schema...)
}

// shared is the cluster the package's tests share, each in a database of
// its own (pgtest.Shared).
var shared = pgtest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// newFixtureOf returns a fixture that captures the given tables of the
// public schema, which schema creates, from a database of its own on the
// package's shared cluster, through a slot of its own named after it.
func newFixtureOf(t *testing.T, cfg Config, tables []string, schema ...string) *fixture {
	t.Helper()
	c := shared.Cluster(t)
	name := pgtest.NewDatabase(t, c)
	dsn := c.DSN(name)
	f := &fixture{t: t, conn: pgtest.Conn(t, dsn), cfg: cfg}
	for _, s := range schema {
		f.exec(s)
	}
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.db = db
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	captured := make([]source.Table, len(tables))
	configured := []string{"public.later"}
	for i, n := range tables {
		captured[i] = source.Table{Schema: "public", Name: n}
		configured = append(configured, "public."+n)
	}
	f.src = source.New(source.Config{DSN: dsn, Slot: name, Publication: "live", Snapshot: true,
		Tables: captured, StatusInterval: time.Second, Logger: log}, db)
	f.hub = NewHub(db, HubConfig{TablesDir: cfg.TablesDir, SourceTables: configured, Logger: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { f.src.Run(ctx); done <- struct{}{} }()
	go func() { f.hub.Run(ctx); done <- struct{}{} }()
	stages := 2
	if cfg.TablesDir != "" {
		// The applier builds the mirrors the hub falls back on.
		stages++
		app := applier.New(applier.Config{TablesDir: cfg.TablesDir, FlushInterval: 100 * time.Millisecond,
			Reader: f.hub, Logger: log}, db)
		go func() { app.Run(ctx); done <- struct{}{} }()
	}
	srv := NewServer(cfg, f.hub, fakeAgent{f.src}, nil, nil)
	f.http = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		f.http.Close()
		cancel()
		for range stages {
			<-done
		}
		db.Close()
	})
	select {
	case <-f.src.Ready():
	case <-time.After(60 * time.Second):
		t.Fatal("source did not start")
	}
	return f
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.conn.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// waitHub waits until the hub has applied everything committed so far.
func (f *fixture) waitHub() {
	f.t.Helper()
	var xid int64
	if err := f.conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&xid); err != nil {
		f.t.Fatal(err)
	}
	target := store.LSN(xid)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var cp store.LSN
		f.db.View(func(r *store.Reader) error { cp, _ = r.Checkpoint(); return nil })
		if cp >= target {
			// The checkpoint may have moved by a keepalive alone; the hub
			// is caught up once it has read every queued transaction.
			var last store.LSN
			f.db.View(func(r *store.Reader) error { st, _ := r.QueueStats(); last = st.LastLSN; return nil })
			if f.hub.Offset() >= last {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatal("hub did not catch up")
}

func (f *fixture) get(path string, out any) int {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.http.URL+path, nil)
	if f.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			f.t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode
}

// tableRows reads PostgreSQL's rows of stock as the API renders them.
func (f *fixture) tableRows() map[string]string {
	f.t.Helper()
	rows, err := f.conn.Query(context.Background(), `SELECT id, qty, label FROM stock`)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id int64
		var qty int32
		var label *string
		if err := rows.Scan(&id, &qty, &label); err != nil {
			f.t.Fatal(err)
		}
		l := "null"
		if label != nil {
			b, _ := json.Marshal(*label)
			l = string(b)
		}
		out[fmt.Sprintf(`["%d"]`, id)] = fmt.Sprintf(`{"id":"%d","label":%s,"qty":%d}`, id, l, qty)
	}
	return out
}

const stockSchema = `CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL, label text)`

// client is a stream client that keeps the rows it was sent.
type client struct {
	t      *testing.T
	ws     *websocket.Conn
	offset string
	rows   map[string]string
	epoch  string
	// received counts changes received since connecting.
	received int
	refetch  bool
	// awaitSnapshot is set while snapshots are due (a new client, or
	// after refetch).
	awaitSnapshot bool
}

func (f *fixture) dial(query string) *client {
	f.t.Helper()
	return f.dialWith(websocket.DefaultDialer, query)
}

// smallBufferDialer dials with a small socket receive buffer, so that a
// client that stops reading is felt by the server at once rather than after
// the kernel has buffered tens of megabytes.
var smallBufferDialer = &websocket.Dialer{NetDial: func(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	c.(*net.TCPConn).SetReadBuffer(16 << 10)
	return c, nil
}}

func (f *fixture) dialWith(d *websocket.Dialer, query string) *client {
	f.t.Helper()
	u := "ws" + strings.TrimPrefix(f.http.URL, "http") + "/api/v1/stream" + query
	ws, resp, err := d.Dial(u, nil)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		f.t.Fatalf("dial %s: %v (status %d)", u, err, status)
	}
	c := &client{t: f.t, ws: ws, rows: map[string]string{}, awaitSnapshot: !strings.Contains(query, "offset=")}
	f.t.Cleanup(func() { ws.Close() })
	return c
}

// read applies one message; it returns its type.
func (c *client) read() string {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, data, err := c.ws.ReadMessage()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var head struct{ Type string }
	json.Unmarshal(data, &head)
	switch head.Type {
	case TypeHello:
		var m Hello
		json.Unmarshal(data, &m)
		c.epoch = m.Epoch
		if c.offset == "" {
			c.offset = m.Offset
		}
	case TypeSnapshot:
		var m Snapshot
		json.Unmarshal(data, &m)
		for _, r := range m.Rows {
			b, _ := json.Marshal(r.Values)
			c.rows[r.Key] = string(b)
		}
		c.offset = m.Offset
		if m.Last {
			c.awaitSnapshot = false
		}
	case TypeChanges:
		var m Changes
		json.Unmarshal(data, &m)
		for _, txn := range m.Txns {
			if at, err := time.Parse(time.RFC3339Nano, txn.CommitTime); err != nil || time.Since(at) > time.Hour || txn.Xid == 0 || !strings.Contains(txn.LSN, "/") {
				c.t.Fatalf("transaction with lsn %q, xid %d, commit time %q", txn.LSN, txn.Xid, txn.CommitTime)
			}
			for _, ch := range txn.Changes {
				c.received++
				switch ch.Op {
				case "insert", "update":
					if ch.OldKey != "" {
						delete(c.rows, ch.OldKey)
					}
					b, _ := json.Marshal(ch.Row)
					c.rows[ch.Key] = string(b)
				case "delete":
					delete(c.rows, ch.Key)
				case "truncate":
					clear(c.rows)
				}
			}
		}
		c.offset = m.Offset
	case TypeRefetch:
		c.refetch = true
		c.awaitSnapshot = true
		clear(c.rows)
	case TypeError:
		c.t.Fatalf("server error: %s", data)
	}
	return head.Type
}

// readUntil reads until the client's offset reaches the hub's.
func (c *client) readUntil(h *Hub) {
	c.t.Helper()
	want := h.offsetString(h.Offset())
	for c.offset != want || c.awaitSnapshot {
		c.read()
	}
}

func equalRows(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, PostgreSQL has %d", what, len(got), len(want))
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%s: row %s is %s, PostgreSQL has %s", what, k, got[k], w)
		}
	}
}
