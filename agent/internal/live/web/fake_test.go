package web_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lakeside/lakeside/agent/internal/live"
	"github.com/lakeside/lakeside/agent/internal/live/web"
)

// fakeAgent is a small server implementing the stream protocol of
// agent/internal/live/protocol.go over an in-memory state, plus a settable
// /api/v1/status, and the embedded page at /.
type fakeAgent struct {
	t      *testing.T
	srv    *httptest.Server
	tables []live.TableInfo
	token  string

	mu       sync.Mutex
	epoch    string
	lsn      uint64
	rows     map[string]map[string]map[string]json.RawMessage // table -> key -> values
	log      []live.Changes                                   // every changes message of this epoch
	conns    map[*websocket.Conn]bool
	gate     chan struct{} // when set, stream requests wait for it to close
	status   any
	requests chan url.Values // the query of every stream request
}

var upgrader = websocket.Upgrader{}

func newFakeAgent(t *testing.T, tables ...live.TableInfo) *fakeAgent {
	f := &fakeAgent{
		t:        t,
		tables:   tables,
		epoch:    "e1",
		lsn:      1000,
		rows:     map[string]map[string]map[string]json.RawMessage{},
		conns:    map[*websocket.Conn]bool{},
		status:   map[string]any{},
		requests: make(chan url.Values, 100),
	}
	for _, ti := range tables {
		f.rows[ti.Name] = map[string]map[string]json.RawMessage{}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", web.Handler())
	mux.HandleFunc("GET /api/v1/stream", f.serveStream)
	mux.HandleFunc("GET /api/v1/status", f.serveStatus)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.mu.Lock()
		if f.gate != nil {
			close(f.gate)
			f.gate = nil
		}
		for c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.srv.Close()
	})
	return f
}

func (f *fakeAgent) offset() string { return fmt.Sprintf("%s:%d", f.epoch, f.lsn) }

func (f *fakeAgent) info(table string) live.TableInfo {
	for _, ti := range f.tables {
		if ti.Name == table {
			return ti
		}
	}
	f.t.Fatalf("fake agent: no table %s", table)
	return live.TableInfo{}
}

// keyOf is the row key as the agent writes it: the JSON array of the key
// column values.
func (f *fakeAgent) keyOf(table string, values map[string]json.RawMessage) string {
	var parts []string
	for _, k := range f.info(table).Key {
		parts = append(parts, string(values[k]))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// row builds a row from column/value pairs.
func row(kv ...any) map[string]json.RawMessage {
	r := map[string]json.RawMessage{}
	for i := 0; i < len(kv); i += 2 {
		b, err := json.Marshal(kv[i+1])
		if err != nil {
			panic(err)
		}
		r[kv[i].(string)] = b
	}
	return r
}

// load puts rows in a table without a change (the state before clients).
func (f *fakeAgent) load(table string, rows ...map[string]json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range rows {
		f.rows[table][f.keyOf(table, r)] = r
	}
}

// Change constructors: insert or update of a whole row, delete by row.
func (f *fakeAgent) ins(table string, r map[string]json.RawMessage) live.Change {
	return live.Change{Table: table, Op: "insert", Key: f.keyOf(table, r), Row: r}
}

func (f *fakeAgent) upd(table string, r map[string]json.RawMessage) live.Change {
	return live.Change{Table: table, Op: "update", Key: f.keyOf(table, r), Row: r}
}

func (f *fakeAgent) del(table string, r map[string]json.RawMessage) live.Change {
	return live.Change{Table: table, Op: "delete", Key: f.keyOf(table, r)}
}

// commit applies transactions to the state and sends them, as one changes
// message, to every connected client. It returns the message's offset.
func (f *fakeAgent) commit(txns ...[]live.Change) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := live.Changes{Type: live.TypeChanges}
	for _, changes := range txns {
		f.lsn += 100
		for _, c := range changes {
			rows := f.rows[c.Table]
			switch c.Op {
			case "insert", "update":
				if c.OldKey != "" {
					delete(rows, c.OldKey)
				}
				rows[c.Key] = c.Row
			case "delete":
				delete(rows, c.Key)
			case "truncate":
				clear(rows)
			}
		}
		m.Txns = append(m.Txns, live.Txn{
			LSN:        fmt.Sprint(f.lsn),
			Xid:        uint32(f.lsn / 100),
			CommitTime: time.Now().UTC().Format(time.RFC3339Nano),
			Changes:    changes,
		})
	}
	m.Offset = f.offset()
	f.log = append(f.log, m)
	for c := range f.conns {
		f.write(c, m)
	}
	return m.Offset
}

// reset starts a new epoch with new rows; connected clients get a refetch
// and are closed (as the agent does when its state is reset).
func (f *fakeAgent) reset(epoch string, table string, rows ...map[string]json.RawMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch, f.lsn, f.log = epoch, 5000, nil
	for _, ti := range f.tables {
		f.rows[ti.Name] = map[string]map[string]json.RawMessage{}
	}
	for _, r := range rows {
		f.rows[table][f.keyOf(table, r)] = r
	}
	for c := range f.conns {
		f.write(c, live.Refetch{Type: live.TypeRefetch, Reason: "the agent's state was reset"})
		c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "state reset"), time.Now().Add(time.Second))
		c.Close()
		delete(f.conns, c)
	}
}

// drop breaks every connection without a close frame.
func (f *fakeAgent) drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// hold makes new stream requests wait until release.
func (f *fakeAgent) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate == nil {
		f.gate = make(chan struct{})
	}
}

func (f *fakeAgent) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *fakeAgent) setStatus(st any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = st
}

// nextRequest waits for the query of the next stream request.
func (f *fakeAgent) nextRequest(timeout time.Duration) url.Values {
	f.t.Helper()
	select {
	case q := <-f.requests:
		return q
	case <-time.After(timeout):
		f.t.Fatalf("no stream request within %s", timeout)
		return nil
	}
}

// write sends one message; f.mu is held, so writes never interleave.
func (f *fakeAgent) write(c *websocket.Conn, m any) {
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteJSON(m); err != nil {
		c.Close()
		delete(f.conns, c)
	}
}

func (f *fakeAgent) serveStatus(w http.ResponseWriter, r *http.Request) {
	if f.token != "" && r.URL.Query().Get("token") != f.token {
		http.Error(w, "token", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	b, err := json.Marshal(f.status)
	f.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func (f *fakeAgent) serveStream(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	select {
	case f.requests <- q:
	default:
	}
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	if f.token != "" && q.Get("token") != f.token {
		http.Error(w, "token", http.StatusUnauthorized)
		return
	}
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()

	f.mu.Lock()
	f.write(c, live.Hello{Type: live.TypeHello, Epoch: f.epoch, Offset: f.offset(), Tables: f.tables})
	off := q.Get("offset")
	switch {
	case off == "":
		f.snapshot(c)
	case off == f.offset():
	default:
		i := slices.IndexFunc(f.log, func(m live.Changes) bool { return m.Offset == off })
		if i < 0 {
			f.write(c, live.Refetch{Type: live.TypeRefetch, Reason: "offset " + off + " is not retained"})
			f.snapshot(c)
		} else {
			for _, m := range f.log[i+1:] {
				f.write(c, m)
			}
		}
	}
	f.conns[c] = true
	f.mu.Unlock()

	for {
		if _, _, err := c.ReadMessage(); err != nil {
			break
		}
	}
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// snapshot sends every table in pages of 1000 rows, in map order (the page
// must sort them itself); an empty table gets one empty last page.
func (f *fakeAgent) snapshot(c *websocket.Conn) {
	const page = 1000
	for _, ti := range f.tables {
		keys := slices.Collect(maps.Keys(f.rows[ti.Name]))
		for start := 0; start == 0 || start < len(keys); start += page {
			part := keys[start:min(start+page, len(keys))]
			rows := make([]live.Row, len(part))
			for i, k := range part {
				rows[i] = live.Row{Key: k, Values: f.rows[ti.Name][k]}
			}
			f.write(c, live.Snapshot{Type: live.TypeSnapshot, Offset: f.offset(), Table: ti.Name, Rows: rows, Last: start+page >= len(keys)})
		}
	}
}
