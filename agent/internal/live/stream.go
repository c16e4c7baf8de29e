package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Limits of one stream client. Its queue of messages not yet written is
// bounded by count here and by size in Config.ClientQueueBytes.
const (
	sendQueueLen   = 1024
	pingInterval   = 20 * time.Second
	pongWait       = 40 * time.Second
	writeWait      = 10 * time.Second
	maxClientBytes = 4096
)

// subscriber is one stream client: a bounded queue of encoded messages
// drained by its own writer, so a slow client never slows the hub.
type subscriber struct {
	tables map[string]bool
	// tablesKey names the set of tables, so that subscribers of the same
	// tables share one encoding of each message.
	tablesKey string
	send      chan []byte

	limit int // bytes the queue may hold

	mu     sync.Mutex
	queued int // bytes in send
	closed bool
	code   int
	reason string
	done   chan struct{}
}

func newSubscriber(limit int) *subscriber {
	return &subscriber{send: make(chan []byte, sendQueueLen), done: make(chan struct{}), limit: limit}
}

// enqueue queues a message; a full queue closes the client as slow.
func (s *subscriber) enqueue(m any) {
	data, err := json.Marshal(m)
	if err != nil {
		return
	}
	s.enqueueEncoded(data)
}

// enqueueEncoded queues an encoded message, which may be shared with other
// subscribers and is never modified.
func (s *subscriber) enqueueEncoded(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.queued+len(data) > s.limit {
		s.closeLocked(CloseSlowClient, "slow client: send queue full")
		return
	}
	select {
	case s.send <- data:
		s.queued += len(data)
	default:
		s.closeLocked(CloseSlowClient, "slow client: send queue full")
	}
}

// sent accounts for a message the writer took from the queue.
func (s *subscriber) sent(data []byte) {
	s.mu.Lock()
	s.queued -= len(data)
	s.mu.Unlock()
}

func (s *subscriber) close(code int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked(code, reason)
}

func (s *subscriber) closeLocked(code int, reason string) {
	if s.closed {
		return
	}
	s.closed, s.code, s.reason = true, code, reason
	close(s.done)
}

// changesFor filters transactions down to the subscriber's tables.
func (s *subscriber) changesFor(offset string, batch []retainedTxn) (Changes, bool) {
	m := Changes{Type: TypeChanges, Offset: offset}
	for _, rt := range batch {
		var t Txn
		for i := range rt.changes {
			if c := &rt.changes[i]; s.tables[c.Table] {
				// Rendered in place: the hub's lock is held, and the
				// next subscriber or resume finds it done.
				c.render()
				t.Changes = append(t.Changes, *c)
			}
		}
		if len(t.Changes) > 0 {
			t.LSN, t.Xid, t.CommitTime = rt.lsn.String(), rt.xid, rt.commitTime.UTC().Format(time.RFC3339Nano)
			m.Txns = append(m.Txns, t)
		}
	}
	return m, len(m.Txns) > 0
}

// encodeChanges returns the encoded message of batch for the subscriber's
// tables, or nil when none of them changed.
func (s *subscriber) encodeChanges(offset string, batch []retainedTxn) []byte {
	m, ok := s.changesFor(offset, batch)
	if !ok {
		return nil
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return data
}

// refetch tells the client to drop its rows and closes the connection; the
// client reconnects without an offset and takes a new snapshot.
func (s *subscriber) refetch(reason string) {
	s.enqueue(Refetch{Type: TypeRefetch, Reason: reason})
	s.close(websocket.CloseNormalClosure, "refetch")
}

// serveStream upgrades the request and streams to it.
func (srv *Server) serveStream(w http.ResponseWriter, r *http.Request) {
	tables, err := parseTables(r.URL.Query()["tables"])
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	offset := r.URL.Query().Get("offset")
	// A place is taken before the upgrade, so that clients upgrading at
	// once cannot pass the cap together.
	if srv.streams.Add(1) > int64(srv.cfg.MaxClients) {
		srv.streams.Add(-1)
		writeError(w, http.StatusServiceUnavailable, "too many stream clients")
		return
	}
	defer srv.streams.Add(-1)
	conn, err := srv.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer conn.Close()
	conn.SetReadLimit(maxClientBytes)

	sub := newSubscriber(srv.cfg.ClientQueueBytes)
	first, snap, snapshot, err := srv.hub.subscribe(sub, tables, offset)
	if err != nil {
		code := CloseBadRequest
		if errors.Is(err, errNotCaptured) {
			code = websocket.CloseTryAgainLater
		}
		conn.SetWriteDeadline(time.Now().Add(writeWait))
		conn.WriteJSON(ErrorMessage{Type: TypeError, Message: err.Error()})
		conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, err.Error()), time.Now().Add(writeWait))
		return
	}
	defer srv.hub.unsubscribe(sub)

	// The reader only keeps the connection's pongs and close coming.
	conn.SetReadDeadline(time.Now().Add(pongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(pongWait)) })
	go func() {
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				sub.close(websocket.CloseNormalClosure, "")
				return
			}
		}
	}()

	write := func(data []byte) bool {
		conn.SetWriteDeadline(time.Now().Add(writeWait))
		return conn.WriteMessage(websocket.TextMessage, data) == nil
	}
	for _, m := range first {
		data, err := json.Marshal(m)
		if err != nil || !write(data) {
			return
		}
	}
	// The rows in memory, encoded once for every client of these tables
	// at this offset.
	for _, data := range snap {
		if !write(data) {
			return
		}
	}
	// Tables too large to keep in memory are sent from their mirrors; the
	// changes since are queued meanwhile.
	if snapshot {
		for _, table := range srv.hub.mirrorTables(sub.tableNames()) {
			sent := true
			err := srv.hub.mirrorSnapshot(r.Context(), table, helloOffset(first), func(data []byte) bool {
				sent = write(data)
				return sent
			})
			if err != nil {
				srv.log.Warn("live view: mirror snapshot failed", "table", table, "err", err)
				conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseInternalServerErr, "snapshot failed"), time.Now().Add(writeWait))
				return
			}
			if !sent {
				return
			}
		}
	}
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	for {
		select {
		case data := <-sub.send:
			sub.sent(data)
			if !write(data) {
				return
			}
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
				return
			}
		case <-sub.done:
			sub.mu.Lock()
			code, reason := sub.code, sub.reason
			sub.mu.Unlock()
			if code == CloseSlowClient {
				conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(writeWait))
				return
			}
			// Send what is queued, then say why the connection ends.
			for {
				select {
				case data := <-sub.send:
					if !write(data) {
						return
					}
					continue
				default:
				}
				break
			}
			if code != 0 {
				conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(writeWait))
			}
			return
		}
	}
}

// tableNames returns the subscriber's tables.
func (s *subscriber) tableNames() []string {
	out := make([]string, 0, len(s.tables))
	for n := range s.tables {
		out = append(out, n)
	}
	return out
}

// helloOffset returns the offset of the hello message.
func helloOffset(first []any) string {
	if h, ok := first[0].(Hello); ok {
		return h.Offset
	}
	return ""
}

// maxStreamTables caps the tables a stream client names.
const maxStreamTables = 1000

// parseTables reads the ?tables= parameters (comma-separated names, which
// may repeat): each name once, in order, at most maxStreamTables; nil
// means every table.
func parseTables(params []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range params {
		for _, n := range strings.Split(p, ",") {
			if n == "" || seen[n] {
				continue
			}
			if len(out) == maxStreamTables {
				return nil, fmt.Errorf("more than %d tables in ?tables=", maxStreamTables)
			}
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}
