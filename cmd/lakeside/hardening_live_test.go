package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// liveAgent is the real agent with its live view on a loopback address.
type liveAgent struct {
	*e2e
	d    *daemon
	addr string
}

// startLiveAgent starts the agent on public.stock and public.prices (and
// public.big when the schema makes it) with the live view on, the http
// section's extra keys added, and waits until the view has every row.
func startLiveAgent(t *testing.T, httpKeys string, schema ...string) *liveAgent {
	t.Helper()
	addr := freeAddr(t)
	tables := []string{"public.stock", "public.prices"}
	if strings.Contains(strings.Join(schema, ";"), "CREATE TABLE big") {
		tables = append(tables, "public.big")
	}
	e := newE2EWith(t, tables, "http:\n  listen: "+addr+"\n"+httpKeys)
	e.exec(schema...)
	la := &liveAgent{e2e: e, d: e.start(), addr: addr}
	e.waitApplied(la.d)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if code, _ := la.get("/api/v1/tables/public.stock/rows?limit=1", nil); code == http.StatusOK {
			return la
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the live view did not serve public.stock; log:\n%s", la.d.log())
	return nil
}

// request sends a GET to the live view with the given extra headers and
// returns the status and body.
func (la *liveAgent) request(path string, header http.Header) (int, []byte) {
	la.t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+la.addr+path, nil)
	if err != nil {
		la.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		la.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// get is request without extra headers, decoding the body into out.
func (la *liveAgent) get(path string, out any) (int, []byte) {
	la.t.Helper()
	code, body := la.request(path, nil)
	if out != nil && code == http.StatusOK {
		if err := json.Unmarshal(body, out); err != nil {
			la.t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return code, body
}

// openFiles returns how many descriptors the agent has open.
func (la *liveAgent) openFiles() int {
	la.t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", la.d.cmd.Process.Pid))
	if err != nil {
		la.t.Fatal(err)
	}
	return len(entries)
}

const hardeningSchema = `CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL);
INSERT INTO stock SELECT g, g FROM generate_series(1, 100) g;
CREATE TABLE prices (id numeric PRIMARY KEY, p int);
INSERT INTO prices SELECT g, g FROM generate_series(1, 2000) g;`

// TestLiveViewRefusesRebindingAndForeignOrigins: without a token, a
// request addressed to another host name (a DNS-rebound page) gets no
// rows, and neither a page on another origin nor one whose Host and Origin
// agree on a foreign name may open the stream; the loopback names and
// http.allowed_hosts may.
func TestLiveViewRefusesRebindingAndForeignOrigins(t *testing.T) {
	t.Parallel()
	la := startLiveAgent(t, "  allowed_hosts: [branch-17.example]\n", hardeningSchema)
	_, port, _ := net.SplitHostPort(la.addr)
	rows := "/api/v1/tables/public.stock/rows"
	for host, want := range map[string]int{
		"attacker.example:" + port:   http.StatusMisdirectedRequest,
		"attacker.example":           http.StatusMisdirectedRequest,
		"localhost:" + port:          http.StatusOK,
		"127.0.0.1:" + port:          http.StatusOK,
		"branch-17.example:" + port:  http.StatusOK,
		"BRANCH-17.example:" + port:  http.StatusOK,
		"branch-17.example.evil:80":  http.StatusMisdirectedRequest,
		"127.0.0.1.attacker.example": http.StatusMisdirectedRequest,
	} {
		code, body := la.request(rows, http.Header{"Host": {host}})
		if code != want {
			t.Errorf("Host %s: status %d (%s), want %d", host, code, body, want)
		}
		if code != http.StatusOK && strings.Contains(string(body), `"qty"`) {
			t.Errorf("Host %s: refused, yet the answer holds rows: %s", host, body)
		}
	}
	for origin, want := range map[string]int{
		"http://attacker.example":           http.StatusForbidden,
		"null":                              http.StatusForbidden,
		"http://127.0.0.1:" + port:          http.StatusOK,
		"http://branch-17.example:" + port:  http.StatusOK,
		"https://attacker.example:" + port:  http.StatusForbidden,
		"http://localhost.attacker.example": http.StatusForbidden,
	} {
		if code, body := la.request(rows, http.Header{"Origin": {origin}}); code != want {
			t.Errorf("Origin %s: status %d (%s), want %d", origin, code, body, want)
		}
	}
	dial := func(host, origin string) (int, error) {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, NetDial: func(network, _ string) (net.Conn, error) {
			return net.Dial(network, la.addr)
		}}
		ws, resp, err := d.Dial("ws://"+host+"/api/v1/stream", http.Header{"Origin": {origin}})
		if err == nil {
			ws.Close()
			return http.StatusSwitchingProtocols, nil
		}
		if resp != nil {
			return resp.StatusCode, err
		}
		return 0, err
	}
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"attacker.example:" + port, "http://attacker.example:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1:" + port, "http://attacker.example", http.StatusForbidden},
		{"127.0.0.1:" + port, "http://127.0.0.1:" + port, http.StatusSwitchingProtocols},
		{"branch-17.example:" + port, "http://branch-17.example:" + port, http.StatusSwitchingProtocols},
	} {
		if code, err := dial(c.host, c.origin); code != c.want {
			t.Errorf("stream with Host %s, Origin %s: status %d (%v), want %d", c.host, c.origin, code, err, c.want)
		}
	}
	code, _ := la.request(rows, nil)
	_, body := la.request("/api/v1/tables", nil)
	if code != http.StatusOK || !strings.Contains(string(body), "public.stock") {
		t.Fatalf("plain request: status %d, %s", code, body)
	}
	if code, _ := la.request("/healthz", http.Header{"Host": {"monitor.example"}}); code != http.StatusOK {
		t.Errorf("/healthz by another name: status %d, want 200 (it tells nothing)", code)
	}
}

// TestLiveViewKeysAreBounded: a numeric key a client gives is read with
// PostgreSQL's syntax and limits, so 1e999999 is refused at once instead
// of holding the live view while it is compared with every row, and an
// exponent within the range finds its row.
func TestLiveViewKeysAreBounded(t *testing.T) {
	t.Parallel()
	la := startLiveAgent(t, "", hardeningSchema)
	for _, path := range []string{
		"/api/v1/tables/public.prices/rows?after=1e999999",
		"/api/v1/tables/public.prices/rows/1e999999",
		"/api/v1/tables/public.prices/rows?after=-1e-999999",
		"/api/v1/tables/public.prices/rows/" + url.PathEscape(`["1e131073"]`),
	} {
		code, body := la.request(path, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "out of numeric's range") {
			t.Errorf("GET %s: status %d, %s; want 400, out of numeric's range", path, code, body)
		}
	}
	var row struct{ Values map[string]json.RawMessage }
	if code, body := la.get("/api/v1/tables/public.prices/rows/1.5e3", &row); code != http.StatusOK || string(row.Values["p"]) != "1500" {
		t.Errorf("row 1.5e3: status %d, %s; want the row of 1500", code, body)
	}
	var page struct {
		Rows []struct{ Key string }
		Next string
	}
	if code, body := la.get("/api/v1/tables/public.prices/rows?limit=3&after=1999.5", &page); code != http.StatusOK ||
		len(page.Rows) != 1 || page.Rows[0].Key != `["2000"]` {
		t.Errorf("rows after 1999.5: status %d, %s; want the row of 2000", code, body)
	}
}

// TestLiveViewFloatKeysPageInPostgreSQLsOrder pages a table keyed by
// float8 holding NaN, ±Infinity, -0 and numbers five rows at a time: every
// row comes once, in PostgreSQL's order (NaN last).
func TestLiveViewFloatKeysPageInPostgreSQLsOrder(t *testing.T) {
	t.Parallel()
	la := startLiveAgent(t, "", `CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL);
INSERT INTO stock VALUES (1, 1);
CREATE TABLE prices (id float8 PRIMARY KEY, p int);
INSERT INTO prices VALUES ('NaN', 1), ('Infinity', 2), ('-Infinity', 3), ('-0', 4);
INSERT INTO prices SELECT (g - 14) * 1.25, g FROM generate_series(1, 28) g WHERE g <> 14;
INSERT INTO prices VALUES (1e300, 5)`)
	var want []string
	rows, err := la.conn.Query(context.Background(), `SELECT id::text FROM prices ORDER BY prices.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, canonFloat(t, s))
	}
	if rows.Err() != nil || len(want) != 32 {
		t.Fatalf("PostgreSQL holds %d rows (%v), want 32", len(want), rows.Err())
	}
	var got []string
	after := ""
	for range 100 {
		var page struct {
			Rows []struct{ Key string }
			Next string
		}
		code, body := la.get("/api/v1/tables/public.prices/rows?limit=5&after="+url.QueryEscape(after), &page)
		if code != http.StatusOK {
			t.Fatalf("rows after %q: status %d, %s", after, code, body)
		}
		for _, r := range page.Rows {
			var key []any
			if err := json.Unmarshal([]byte(r.Key), &key); err != nil || len(key) != 1 {
				t.Fatalf("key %s: %v", r.Key, err)
			}
			got = append(got, canonFloat(t, fmt.Sprint(key[0])))
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("paged five at a time:\n got  %v\n want %v", got, want)
	}
}

// canonFloat returns the float a text holds (PostgreSQL's, or the live
// view's JSON) in one form.
func canonFloat(t *testing.T, s string) string {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// TestLiveViewConnectionsAreCapped: idle keep-alive connections past
// http.max_connections do not take descriptors: the longest-idle ones are
// closed to make room, a new client is still served, and capture and the
// Delta tables keep working.
func TestLiveViewConnectionsAreCapped(t *testing.T) {
	la := startLiveAgent(t, "  max_connections: 64\n", hardeningSchema)
	before := la.openFiles()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 300 {
		c, err := net.Dial("tcp", la.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		// A request answered leaves the connection idle, kept alive.
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil && i < 64 {
			t.Fatalf("connection %d: %v", i, err)
		}
		_ = line
	}
	time.Sleep(200 * time.Millisecond)
	if open := la.openFiles(); open > before+64+8 {
		t.Errorf("the agent holds %d descriptors after 300 idle connections (%d before, cap 64)", open, before)
	}
	if code, _ := la.request("/api/v1/tables/public.stock/rows?limit=1", nil); code != http.StatusOK {
		t.Errorf("a new client at the cap: status %d", code)
	}
	la.exec(`INSERT INTO stock SELECT g, g FROM generate_series(101, 200) g`)
	la.waitApplied(la.d)
	var page struct{ Rows []any }
	if code, _ := la.get("/api/v1/tables/public.stock/rows?limit=1000", &page); code != http.StatusOK || len(page.Rows) != 200 {
		t.Errorf("after more rows: status %d, %d rows, want 200", code, len(page.Rows))
	}
}

// TestLiveViewSilentConnectionsAreEvicted holds 3000 connections that
// send nothing and 500 that send half a request header, three times the
// agent's cap: a fresh client's /healthz, /api/v1/status and WebSocket
// stream are answered all the same (the connections waiting longest for a
// header make room), and the Delta tables keep committing.
func TestLiveViewSilentConnectionsAreEvicted(t *testing.T) {
	la := startLiveAgent(t, "", hardeningSchema)
	holdConnections(t, la.addr, 3000, "")
	holdConnections(t, la.addr, 500, "GET /healthz HTTP/1.1\r\nHost: 127.0.")
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/healthz", "/api/v1/status"} {
		start := time.Now()
		resp, err := client.Get("http://" + la.addr + path)
		if err != nil {
			t.Fatalf("GET %s beside 3500 silent connections: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s beside 3500 silent connections: status %d", path, resp.StatusCode)
		}
		t.Logf("GET %s answered in %v", path, time.Since(start).Round(time.Millisecond))
	}
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := dialer.Dial("ws://"+la.addr+"/api/v1/stream?tables=public.stock", nil)
	if err != nil {
		t.Fatalf("a WebSocket stream beside 3500 silent connections: %v", err)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(time.Minute))
	var hello struct{ Type string }
	if err := ws.ReadJSON(&hello); err != nil || hello.Type != "hello" {
		t.Fatalf("stream hello: %+v, %v", hello, err)
	}
	// More silent connections come while the stream serves: it is never
	// the one closed.
	holdConnections(t, la.addr, 1500, "")
	la.exec(`INSERT INTO stock SELECT g, g FROM generate_series(101, 200) g`)
	la.waitApplied(la.d)
	var page struct{ Rows []any }
	if code, _ := la.get("/api/v1/tables/public.stock/rows?limit=1000", &page); code != http.StatusOK || len(page.Rows) != 200 {
		t.Errorf("after more rows: status %d, %d rows, want 200", code, len(page.Rows))
	}
	for {
		var msg struct {
			Type string
			Last bool
		}
		if err := ws.ReadJSON(&msg); err != nil {
			t.Fatalf("the stream was cut beside the silent connections: %v", err)
		}
		if msg.Type == "changes" || msg.Type == "refetch" {
			break
		}
	}
}

// holdConnections opens n connections to addr that send what, and nothing
// more, until the test ends.
func holdConnections(t *testing.T, addr string, n int, what string) {
	t.Helper()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		if what != "" {
			fmt.Fprint(c, what)
		}
	}
}

// TestLiveViewStreamTablesAreDeduplicated: ?tables= naming a table 3000
// times subscribes to it once; more distinct names than the cap are
// refused.
func TestLiveViewStreamTablesAreDeduplicated(t *testing.T) {
	t.Parallel()
	la := startLiveAgent(t, "", hardeningSchema)
	names := strings.TrimSuffix(strings.Repeat("public.stock,", 3000), ",")
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+la.addr+"/api/v1/stream?tables="+names, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(time.Minute))
	var hello struct {
		Type   string
		Tables []struct{ Name string }
	}
	if err := ws.ReadJSON(&hello); err != nil || hello.Type != "hello" || len(hello.Tables) != 1 {
		t.Fatalf("hello: %+v, %v; want one table", hello, err)
	}
	rows := 0
	for {
		var snap struct {
			Type string
			Rows []any
			Last bool
		}
		if err := ws.ReadJSON(&snap); err != nil {
			t.Fatal(err)
		}
		rows += len(snap.Rows)
		if snap.Last {
			break
		}
	}
	if rows != 100 {
		t.Errorf("the snapshot sent %d rows, want the table's 100 once", rows)
	}
	var many []string
	for i := range 1001 {
		many = append(many, fmt.Sprintf("public.t%d", i))
	}
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+la.addr+"/api/v1/stream?tables="+strings.Join(many, ","), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("1001 tables: %v, want 400", err)
	}
}

// TestLiveViewTimeTravelAndHistoryAreBounded: as_of before the first
// version is "no version at that time", not the latest; history is paged
// newest first; answers are nosniff.
func TestLiveViewTimeTravelAndHistoryAreBounded(t *testing.T) {
	t.Parallel()
	la := startLiveAgent(t, "", hardeningSchema)
	for i := range 3 {
		la.exec(fmt.Sprintf(`UPDATE stock SET qty = qty + 1 WHERE id = %d`, i+1))
		la.waitApplied(la.d)
	}
	if code, body := la.request("/api/v1/tables/public.stock/rows?as_of=0001-01-01T00:00:00Z", nil); code != http.StatusNotFound {
		t.Errorf("as_of year 1: status %d, %s; want 404", code, body)
	}
	var h struct {
		History []struct{ Version int64 }
		Next    *int64 `json:"next_before"`
	}
	code, _ := la.get("/api/v1/tables/public.stock/history?limit=2", &h)
	if code != http.StatusOK || len(h.History) != 2 || h.Next == nil || h.History[0].Version <= h.History[1].Version {
		t.Fatalf("history, limit 2: status %d, %+v", code, h)
	}
	first, before := h.History, *h.Next
	h.History, h.Next = nil, nil
	code, _ = la.get(fmt.Sprintf("/api/v1/tables/public.stock/history?limit=1000&before=%d", before), &h)
	if code != http.StatusOK || len(h.History) == 0 || h.History[0].Version != first[1].Version-1 || h.History[len(h.History)-1].Version != 0 || h.Next != nil {
		t.Errorf("history before %d: status %d, %+v", first[1].Version, code, h)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+la.addr+"/api/v1/status", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("X-Content-Type-Options: %q", resp.Header.Get("X-Content-Type-Options"))
	}
}

// TestLiveViewMemoryHoldsWithManyClients: a table over the in-memory limit
// is served from its mirror a file at a time within a budget: 16 stream
// clients and 16 row pagers reading it at once leave the agent's memory
// bounded, and every client gets every row.
func TestLiveViewMemoryHoldsWithManyClients(t *testing.T) {
	la := startLiveAgent(t, "", hardeningSchema,
		`CREATE TABLE big (id int PRIMARY KEY, pad text)`,
		`INSERT INTO big SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 60000) g`)
	la.waitApplied(la.d)
	base, err := peakRSS(la.d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 16 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			ws, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+la.addr+"/api/v1/stream?tables=public.big", nil)
			if err != nil {
				errs <- err
				return
			}
			defer ws.Close()
			ws.SetReadDeadline(time.Now().Add(4 * time.Minute))
			rows := 0
			for {
				var m struct {
					Type string
					Rows []any
					Last bool
				}
				if err := ws.ReadJSON(&m); err != nil {
					errs <- fmt.Errorf("stream: %w after %d rows", err, rows)
					return
				}
				if m.Type == "snapshot" {
					rows += len(m.Rows)
					if m.Last {
						break
					}
				}
			}
			if rows != 60000 {
				errs <- fmt.Errorf("stream snapshot: %d rows, want 60000", rows)
			}
		}()
		go func() {
			defer wg.Done()
			rows, after := 0, ""
			for {
				var page struct {
					Rows []any
					Next string
				}
				code, body := la.get("/api/v1/tables/public.big/rows?limit=10000&after="+url.QueryEscape(after), &page)
				if code != http.StatusOK {
					errs <- fmt.Errorf("rows: status %d, %s", code, body)
					return
				}
				rows += len(page.Rows)
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			if rows != 60000 {
				errs <- fmt.Errorf("rows: %d, want 60000", rows)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	peak, err := peakRSS(la.d.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peak RSS %d MiB before the clients, %d MiB after", base>>20, peak>>20)
	if peak-base > 640<<20 {
		t.Errorf("32 clients of a 60000-row table took the agent from %d MiB to %d MiB", base>>20, peak>>20)
	}
}

// TestLiveViewTokenSchemeIsCaseInsensitive: with a token, the Bearer
// scheme is matched as HTTP says (any case), a wrong token is refused, and
// a Host other than the loopback names is answered (the token, which a
// rebound page cannot know, guards it) while a foreign Origin still is not.
func TestLiveViewTokenSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-live-token"
	la := startLiveAgentWithToken(t, token)
	for auth, want := range map[string]int{
		"Bearer " + token:        http.StatusOK,
		"bearer " + token:        http.StatusOK,
		"BEARER " + token:        http.StatusOK,
		"Bearer  " + token + " ": http.StatusOK,
		"Bearer wrong":           http.StatusUnauthorized,
		"Basic " + token:         http.StatusUnauthorized,
		"":                       http.StatusUnauthorized,
	} {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		if code, body := la.request("/api/v1/status", h); code != want {
			t.Errorf("Authorization %q: status %d (%s), want %d", auth, code, body, want)
		}
	}
	h := http.Header{"Authorization": {"bearer " + token}, "Host": {"branch-17.example"}}
	if code, body := la.request("/api/v1/tables", h); code != http.StatusOK {
		t.Errorf("with the token by another name: status %d (%s)", code, body)
	}
	h.Set("Origin", "http://attacker.example")
	if code, _ := la.request("/api/v1/tables", h); code != http.StatusForbidden {
		t.Errorf("with the token from a foreign origin: status %d, want 403", code)
	}
}

// startLiveAgentWithToken starts the agent on public.stock with the live
// view on a loopback address guarded by token.
func startLiveAgentWithToken(t *testing.T, token string) *liveAgent {
	t.Helper()
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.stock"}, "http:\n  listen: "+addr+"\n  token: "+token+"\n")
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO stock VALUES (1, 1)`)
	la := &liveAgent{e2e: e, d: e.start(), addr: addr}
	e.waitApplied(la.d)
	return la
}
