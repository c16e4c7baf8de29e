package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lakeside/lakeside/store"
)

// writeStock runs n random changes on stock, one per transaction.
func (f *fixture) writeStock(n int, firstID int64) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		id := firstID + int64(rand.IntN(200))
		switch rand.IntN(4) {
		case 0:
			f.exec(`DELETE FROM stock WHERE id = $1`, id)
		default:
			f.exec(`INSERT INTO stock VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET qty = stock.qty + 1, label = EXCLUDED.label`,
				id, rand.IntN(100), "item "+strings.Repeat("x", rand.IntN(5)))
		}
	}
}

func TestStreamSnapshotThenChangesEqualsTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 500) g`)
	f.waitHub()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.writeStock(300, 1) }()
	c := f.dial("?tables=public.stock")
	if c.read() != TypeHello {
		t.Fatal("first message is not hello")
	}
	wg.Wait()
	f.waitHub()
	c.readUntil(f.hub)
	equalRows(t, "snapshot + stream", c.rows, f.tableRows())
	if c.received == 0 {
		t.Fatal("the client received no change after its snapshot")
	}
}

func TestStreamResumeGetsExactlyWhatWasMissed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema)
	f.exec(`INSERT INTO stock SELECT g, 0, 'seed' FROM generate_series(1, 100) g`)
	f.waitHub()
	c := f.dial("?tables=public.stock")
	c.read()
	c.readUntil(f.hub)
	offset := c.offset
	rows := c.rows
	c.ws.Close()

	// 500 changes while the client is away.
	for i := 0; i < 500; i++ {
		f.exec(`UPDATE stock SET qty = qty + 1 WHERE id = $1`, 1+i%100)
	}
	f.waitHub()
	c2 := f.dial("?tables=public.stock&offset=" + offset)
	c2.rows = rows
	c2.offset = offset
	if c2.read() != TypeHello {
		t.Fatal("first message is not hello")
	}
	c2.readUntil(f.hub)
	if c2.refetch {
		t.Fatal("a retained offset was answered with refetch")
	}
	if c2.received != 500 {
		t.Fatalf("the resumed client received %d changes, want exactly 500", c2.received)
	}
	equalRows(t, "resumed client", c2.rows, f.tableRows())
}

func TestStreamStaleOffsetGetsRefetch(t *testing.T) {
	t.Parallel()
	checkStaleOffsetGetsRefetch(t, func(h *Hub) { h.retain = 10 }, `UPDATE stock SET qty = qty + 1 WHERE id = 1`)
}

// TestStreamOffsetPastRetainedBytesGetsRefetch: the hub keeps recent
// transactions up to a size too (32 kB here), so that wide rows are not
// kept by the hundred thousand; an offset before them gets a refetch.
func TestStreamOffsetPastRetainedBytesGetsRefetch(t *testing.T) {
	t.Parallel()
	f := checkStaleOffsetGetsRefetch(t, func(h *Hub) { h.retainBytes = 32 << 10 }, `UPDATE stock SET qty = qty + 1, label = repeat(md5(qty::text), 64) WHERE id = 1`)
	f.hub.mu.Lock()
	defer f.hub.mu.Unlock()
	if f.hub.retainedBytes > f.hub.retainBytes || len(f.hub.retained) == 0 {
		t.Fatalf("the hub retains %d transactions of %d bytes, want some and at most %d bytes", len(f.hub.retained), f.hub.retainedBytes, f.hub.retainBytes)
	}
}

// checkStaleOffsetGetsRefetch has a client read the stream, then runs
// update 50 times on a hub that bound set up: clients resuming from the
// client's offset, or another epoch's, are told to refetch.
func checkStaleOffsetGetsRefetch(t *testing.T, bound func(h *Hub), update string) *fixture {
	t.Helper()
	f := newFixture(t, Config{}, stockSchema)
	f.hub.mu.Lock()
	bound(f.hub)
	f.hub.mu.Unlock()
	f.exec(`INSERT INTO stock VALUES (1, 1, 'a')`)
	f.waitHub()
	c := f.dial("")
	c.read()
	c.readUntil(f.hub)
	offset := c.offset
	c.ws.Close()
	for i := 0; i < 50; i++ {
		f.exec(update)
	}
	f.waitHub()
	for _, stale := range []string{offset, "another-epoch:1"} {
		c2 := f.dial("?offset=" + stale)
		c2.read() // hello
		if c2.read() != TypeRefetch {
			t.Fatalf("offset %s: no refetch", stale)
		}
		c2.readUntil(f.hub)
		equalRows(t, "after refetch", c2.rows, f.tableRows())
	}
	return f
}

func TestSlowClientIsDroppedOthersKeepReceiving(t *testing.T) {
	// The stuck client is sent 24 MB: past its 16 MiB queue. The reading
	// client may fall behind by a few MB while the machine is busy (other
	// packages' tests run beside this one) without being taken for slow.
	f := newFixture(t, Config{ClientQueueBytes: 16 << 20}, stockSchema)
	f.exec(`INSERT INTO stock VALUES (1, 1, 'a')`)
	f.waitHub()
	// A client that never reads: its send queue fills and it is closed.
	stuck := f.dialWith(smallBufferDialer, "")
	good := f.dial("")
	good.read()
	// The good client reads all along, until the sentinel row written last.
	const sentinel = `["-1"]`
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			good.read()
			if _, ok := good.rows[sentinel]; ok {
				return
			}
		}
	}()
	payload := strings.Repeat("p", 3000)
	start := time.Now()
	for i := 0; i < 40; i++ {
		f.exec(`INSERT INTO stock SELECT g, g, $1 FROM generate_series($2::int8, $2::int8 + 199) g`, payload, 1000+i*200)
	}
	f.waitHub()
	capture := time.Since(start)
	// The stuck client now reads what reached it, and finds its connection
	// closed as slow.
	stuck.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	var closeErr *websocket.CloseError
	for {
		_, _, err := stuck.ws.ReadMessage()
		if err == nil {
			continue
		}
		if !errors.As(err, &closeErr) || closeErr.Code != CloseSlowClient {
			t.Fatalf("stuck client: %v, want close code %d", err, CloseSlowClient)
		}
		break
	}
	f.exec(`INSERT INTO stock VALUES (-1, 0, 'sentinel')`)
	wg.Wait()
	good.readUntil(f.hub)
	equalRows(t, "reading client", good.rows, f.tableRows())
	if f.hub.Clients() != 1 {
		t.Fatalf("%d clients registered, want 1", f.hub.Clients())
	}
	t.Logf("8000 rows (24 MB) captured and streamed in %v with a stuck client attached", capture)
}

func TestAPIRowsAndErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema)
	f.exec(`INSERT INTO stock SELECT g, g * 10, 'item ' || g FROM generate_series(1, 25) g`)
	f.exec(`DELETE FROM stock WHERE id = 7`)
	f.waitHub()

	var got []string
	after := ""
	for {
		var page struct {
			Rows []Row
			Next string
		}
		if code := f.get("/api/v1/tables/public.stock/rows?limit=10&after="+url.QueryEscape(after), &page); code != http.StatusOK {
			t.Fatalf("rows: status %d", code)
		}
		for _, r := range page.Rows {
			got = append(got, r.Key)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if len(got) != 24 || got[0] != `["1"]` || got[6] != `["8"]` || got[23] != `["25"]` {
		t.Fatalf("paged rows in key order = %v", got)
	}
	var row Row
	if code := f.get("/api/v1/tables/public.stock/rows/12", &row); code != http.StatusOK || string(row.Values["qty"]) != "120" || string(row.Values["id"]) != `"12"` {
		t.Fatalf("row 12: status %d, %+v", code, row)
	}
	var tables struct{ Tables []tableListing }
	if code := f.get("/api/v1/tables", &tables); code != http.StatusOK || len(tables.Tables) != 1 || tables.Tables[0].Key[0] != "id" {
		t.Fatalf("tables: %d %+v", code, tables)
	}
	// A configured table of which nothing was captured yet (the fixture
	// configures public.later) is not unknown: clients are told to retry.
	var e struct{ Error string }
	for path, want := range map[string]int{
		"/api/v1/tables/public.later/rows":                 http.StatusServiceUnavailable,
		"/api/v1/tables/public.later/rows/1":               http.StatusServiceUnavailable,
		"/api/v1/tables/public.later/history":              http.StatusServiceUnavailable,
		"/api/v1/tables/public.stock/rows/7":               http.StatusNotFound,
		"/api/v1/tables/public.nope/rows":                  http.StatusNotFound,
		"/api/v1/tables/public.nope/rows/1":                http.StatusNotFound,
		"/api/v1/tables/public.stock/rows?limit=0":         http.StatusBadRequest,
		"/api/v1/tables/public.stock/rows?limit=x":         http.StatusBadRequest,
		"/api/v1/tables/public.stock/rows/abc":             http.StatusBadRequest,
		"/api/v1/tables/public.stock/rows?version=-1":      http.StatusBadRequest,
		"/api/v1/tables/public.stock/rows?as_of=yesterday": http.StatusBadRequest,
		"/api/v1/tables/public.stock/rows?version=0":       http.StatusNotFound, // no Delta mirror yet
		"/api/v1/nothing":                                  http.StatusNotFound,
	} {
		e.Error = ""
		if code := f.get(path, &e); code != want || e.Error == "" {
			t.Errorf("GET %s: status %d (error %q), want %d with a JSON error", path, code, e.Error, want)
		}
	}
	var ready map[string]string
	if code := f.get("/readyz", &ready); code != http.StatusOK {
		t.Fatalf("readyz: %d %v", code, ready)
	}
	for query, want := range map[string]int{"?tables=public.later": websocket.CloseTryAgainLater, "?tables=public.nope": CloseBadRequest} {
		c := f.dial(query)
		c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		var msg ErrorMessage
		if err := c.ws.ReadJSON(&msg); err != nil || msg.Type != TypeError {
			t.Fatalf("stream %s: first message %+v, %v; want an error", query, msg, err)
		}
		_, _, err := c.ws.ReadMessage()
		if ce, ok := err.(*websocket.CloseError); !ok || ce.Code != want {
			t.Fatalf("stream %s: closed with %v, want code %d", query, err, want)
		}
	}
}

func TestTokenAndOrigin(t *testing.T) {
	t.Parallel()
	if err := CheckListen(Config{Listen: "0.0.0.0:8080"}); !errors.Is(err, ErrTokenRequired) {
		t.Fatalf("non-loopback without token: %v", err)
	}
	for _, ok := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:8080"} {
		if err := CheckListen(Config{Listen: ok}); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	f := newFixture(t, Config{Token: "s3cret"}, stockSchema)
	resp, err := http.Get(f.http.URL + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status without token: %d", resp.StatusCode)
	}
	if code := f.get("/api/v1/status", nil); code != http.StatusOK {
		t.Fatalf("status with token: %d", code)
	}
	u := "ws" + strings.TrimPrefix(f.http.URL, "http") + "/api/v1/stream?token=s3cret"
	hdr := http.Header{"Origin": {"http://evil.example"}}
	if _, resp, err := websocket.DefaultDialer.Dial(u, hdr); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin stream: err %v", err)
	}
	ws, _, err := websocket.DefaultDialer.DialContext(context.Background(), u, nil)
	if err != nil {
		t.Fatalf("stream with token: %v", err)
	}
	ws.Close()
}

// newOverflowedFixture returns a fixture whose stock table has more rows
// (200) than the hub keeps in memory (50): it is served from its mirror.
func newOverflowedFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOverflowedBy(t, func(h *Hub) { h.maxRows = 50 }, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 200) g`)
}

// newFixtureOverflowedBy returns a fixture whose hub's bounds bound sets,
// and whose stock table, once insert ran, is past them: it is served from
// its mirror.
func newFixtureOverflowedBy(t *testing.T, bound func(h *Hub), insert string) *fixture {
	t.Helper()
	f := newFixture(t, Config{TablesDir: t.TempDir()}, stockSchema)
	f.hub.mu.Lock()
	bound(f.hub)
	f.hub.mu.Unlock()
	f.exec(insert)
	f.waitHub()
	if !f.hub.overflowed("public.stock") {
		t.Fatal("the table did not overflow the hub's memory bound")
	}
	return f
}

// TestLargeTableServedFromMirror: a table with more rows than the hub keeps
// in memory is snapshotted and listed from its Delta mirror, while its
// changes keep streaming.
func TestLargeTableServedFromMirror(t *testing.T) {
	t.Parallel()
	checkServedFromMirror(t, newOverflowedFixture(t), 200)
}

// TestWideTableServedFromMirror: a table of few rows whose values take more
// bytes than the hub keeps in memory (2000 character labels, 64 kB at
// most) is served from its mirror too, as a table of many rows is.
func TestWideTableServedFromMirror(t *testing.T) {
	t.Parallel()
	f := newFixtureOverflowedBy(t, func(h *Hub) { h.maxBytes = 64 << 10 },
		`INSERT INTO stock SELECT g, g, repeat(md5(g::text), 63) FROM generate_series(1, 40) g`)
	checkServedFromMirror(t, f, 40)
}

// checkServedFromMirror checks that the overflowed stock table of f, of
// rows rows, is snapshotted and listed from its Delta mirror, while its
// changes keep streaming.
func checkServedFromMirror(t *testing.T, f *fixture, rows int) {
	t.Helper()
	// Wait until the mirror holds every row.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page struct{ Rows []Row }
		if f.get("/api/v1/tables/public.stock/rows?limit=1000", &page) == http.StatusOK && len(page.Rows) == rows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mirror did not catch up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := f.dial("?tables=public.stock")
	c.read()
	c.readUntil(f.hub)
	f.exec(`UPDATE stock SET qty = -qty WHERE id <= 5`)
	f.exec(fmt.Sprintf(`DELETE FROM stock WHERE id = %d`, rows))
	f.waitHub()
	c.readUntil(f.hub)
	equalRows(t, "client of a mirror-served table", c.rows, f.tableRows())
	var row Row
	if code := f.get("/api/v1/tables/public.stock/rows/7", &row); code != http.StatusOK || string(row.Values["qty"]) != "7" {
		t.Fatalf("row 7 from the mirror: %d %+v", code, row)
	}
}

// secondHub starts another hub on f's state, which setup (if not nil)
// adjusts first, waits until it has caught up with f's, and has f's
// requests served by it.
func (f *fixture) secondHub(setup func(h *Hub)) *Hub {
	t := f.t
	t.Helper()
	h2 := NewHub(f.db, HubConfig{TablesDir: f.cfg.TablesDir, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if setup != nil {
		setup(h2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = h2.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for h2.Offset() < f.hub.Offset() {
		select {
		case <-done:
			t.Fatalf("the second hub stopped: %v", runErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second hub did not catch up: at %s, the first at %s", h2.Offset(), f.hub.Offset())
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv := httptest.NewServer(NewServer(f.cfg, h2, fakeAgent{f.src}, nil, nil).Handler())
	t.Cleanup(srv.Close)
	f.http = srv
	return h2
}

// TestRestartedHubOverflowsAWideTable: a hub that starts again keeps the
// rows it loads from a table's mirror only up to its bound of bytes; past
// it, the table is served from its mirror.
func TestRestartedHubOverflowsAWideTable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{TablesDir: t.TempDir()}, stockSchema, `INSERT INTO stock SELECT g, g, repeat(md5(g::text), 63) FROM generate_series(1, 40) g`)
	f.waitHub()
	f.waitApplied()
	h2 := f.secondHub(func(h *Hub) { h.maxBytes = 64 << 10 })
	if !h2.overflowed("public.stock") {
		t.Fatal("the restarted hub keeps the rows of a table past its bound of bytes")
	}
	var page struct{ Rows []Row }
	if code := f.get("/api/v1/tables/public.stock/rows?limit=1000", &page); code != http.StatusOK || len(page.Rows) != 40 {
		t.Fatalf("rows after the restart: status %d, %d rows, want 40", code, len(page.Rows))
	}
	c := f.dial("?tables=public.stock")
	c.read()
	c.readUntil(h2)
	equalRows(t, "client after the restart", c.rows, f.tableRows())
}

// TestRestartedHubLoadsRowsFromMirrors: the applier trims from the queue
// what the mirrors hold, so a hub that starts again, as after an agent
// restart, takes the rows from the mirrors. A client that resumes from an
// offset whose changes were trimmed is told to refetch.
func TestRestartedHubLoadsRowsFromMirrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{TablesDir: t.TempDir()}, stockSchema, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 300) g`)
	f.waitHub()
	c := f.dial("?tables=public.stock")
	c.read()
	c.readUntil(f.hub)
	offset, rows := c.offset, c.rows
	c.ws.Close()
	f.writeStock(200, 1)
	f.waitHub()
	f.waitTrimmedPast(offset)
	f.waitApplied()

	// A second hub starts on the same state. No transaction is written
	// from here on: the applier trims as the first hub reads.
	h2 := f.secondHub(nil)

	var page struct{ Rows []Row }
	if code := f.get("/api/v1/tables/public.stock/rows?limit=1000", &page); code != http.StatusOK || len(page.Rows) != len(f.tableRows()) {
		t.Fatalf("rows after the restart: status %d, %d rows, PostgreSQL has %d", code, len(page.Rows), len(f.tableRows()))
	}
	c2 := f.dial("?tables=public.stock")
	c2.read()
	c2.readUntil(h2)
	equalRows(t, "new client after the restart", c2.rows, f.tableRows())

	c3 := f.dial("?tables=public.stock&offset=" + offset)
	c3.offset, c3.rows = offset, rows
	c3.read() // hello
	c3.readUntil(h2)
	if !c3.refetch {
		t.Fatal("an offset whose changes were trimmed before the restart was resumed, not refetched")
	}
	equalRows(t, "client resuming from before the restart", c3.rows, f.tableRows())
}

// TestRestartedHubOnAnEmptyQueueIsAtTheAppliedPosition: when the applier
// has trimmed the whole queue, a hub that starts again has its rows from the
// mirrors and reports their position, not the start of time.
func TestRestartedHubOnAnEmptyQueueIsAtTheAppliedPosition(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{TablesDir: t.TempDir()}, stockSchema, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 30) g`)
	f.writeStock(5, 1)
	f.waitHub()
	f.waitApplied()
	var applied store.LSN
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		queued := 0
		f.db.View(func(r *store.Reader) error {
			var err error
			if applied, err = r.Applied(); err != nil {
				return err
			}
			return r.Txns(0, func(*store.TxnHeader, *store.TxnCursor) error { queued++; return nil })
		})
		if queued == 0 && applied > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue still holds %d transactions", queued)
		}
	}

	h2 := NewHub(f.db, HubConfig{TablesDir: f.cfg.TablesDir, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h2.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); h2.Offset() != applied; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted hub is at %s, want the applied position %s", h2.Offset(), applied)
		}
	}
	want := f.tableRows()
	if rows, _, err := (memRows{h: h2, table: "public.stock"}).page(context.Background(), nil, 1000); err != nil || len(rows) != len(want) {
		t.Fatalf("the restarted hub has %d rows of public.stock, PostgreSQL %d (%v)", len(rows), len(want), err)
	}
}

// waitTrimmedPast waits until the applier has trimmed the queue past the
// offset: the queue's oldest transaction is newer.
func (f *fixture) waitTrimmedPast(offset string) {
	f.t.Helper()
	_, lsn, err := parseOffset(offset)
	if err != nil {
		f.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var oldest store.LSN
		f.db.View(func(r *store.Reader) error {
			return r.Txns(0, func(h *store.TxnHeader, _ *store.TxnCursor) error {
				oldest = h.EndLSN
				return store.ErrStopScan
			})
		})
		if oldest > lsn {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the queue was not trimmed past %s", offset)
		}
		f.writeStock(10, 1000) // the applier trims when it flushes
		f.waitHub()
	}
}

// waitApplied waits until the applier has applied every queued
// transaction: with nothing written, it neither flushes nor trims again.
func (f *fixture) waitApplied() {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var applied, last store.LSN
		f.db.View(func(r *store.Reader) error {
			applied, _ = r.Applied()
			st, _ := r.QueueStats()
			last = st.LastLSN
			return nil
		})
		if applied >= last {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("applied up to %s of %s", applied, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHubFarBehindHasClientsRefetch: a hub that finds more changes queued
// than it streams (it held back while capture caught up) applies them and
// has its clients refetch, once, instead of sending them change by change:
// the current rows follow the refetch on the same connection.
func TestHubFarBehindHasClientsRefetch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 50) g`)
	f.waitHub()
	c := f.dial("?tables=public.stock")
	c.read()
	c.readUntil(f.hub)
	offset := c.offset
	f.hub.mu.Lock()
	f.hub.farBehind = 0 // any change is a backlog
	f.hub.mu.Unlock()
	f.writeStock(20, 1)
	f.waitHub()
	for !c.refetch {
		c.read()
	}
	if c.received != 0 {
		t.Fatalf("the client was sent %d changes of the backlog before the refetch", c.received)
	}
	// The current rows follow on the same connection.
	c.readUntil(f.hub)
	equalRows(t, "client after the refetch", c.rows, f.tableRows())
	// A client that connects anew takes the rows too.
	c2 := f.dial("?tables=public.stock")
	c2.read()
	c2.readUntil(f.hub)
	equalRows(t, "client after the backlog", c2.rows, f.tableRows())
	// A client that resumes from before the backlog is told to refetch.
	c3 := f.dial("?tables=public.stock&offset=" + offset)
	c3.read() // hello
	if typ := c3.read(); typ != TypeRefetch {
		t.Fatalf("a client resuming from before the backlog got %s, want refetch", typ)
	}
	c3.readUntil(f.hub)
	equalRows(t, "client resuming from before the backlog", c3.rows, f.tableRows())
}

// TestClientsOfTheSameTablesShareTheSnapshotEncoding connects clients of the
// same tables at one offset: they are given the same encoded snapshot pages,
// not one encoding each, and a client connecting after a change gets the
// rows with the change.
func TestClientsOfTheSameTablesShareTheSnapshotEncoding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{}, stockSchema, `INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 1500) g`)
	f.waitHub()
	subscribe := func() [][]byte {
		t.Helper()
		s := newSubscriber(1 << 20)
		_, snap, snapshot, err := f.hub.subscribe(s, []string{"public.stock"}, "")
		if err != nil || !snapshot {
			t.Fatalf("subscribe: snapshot %v, err %v", snapshot, err)
		}
		f.hub.unsubscribe(s)
		return snap
	}
	a, b := subscribe(), subscribe()
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("%d and %d snapshot pages, want 2 pages of 1500 rows each", len(a), len(b))
	}
	for i := range a {
		if &a[i][0] != &b[i][0] {
			t.Fatalf("page %d was encoded again for the second client", i)
		}
	}
	f.exec(`UPDATE stock SET label = 'changed' WHERE id = 1500`)
	f.waitHub()
	c := subscribe()
	if &c[1][0] == &a[1][0] || !strings.Contains(string(c[1]), `"changed"`) || strings.Contains(string(a[1]), `"changed"`) {
		t.Fatalf("the snapshot after a change is not encoded anew with it:\n%s", c[1])
	}
	// Clients on the wire get the same rows as the table.
	cl := f.dial("?tables=public.stock")
	cl.readUntil(f.hub)
	equalRows(t, "snapshot", cl.rows, f.tableRows())
}

func TestClientsAndOffsetDoNotWaitForAPoll(t *testing.T) {
	t.Parallel()
	// A poll holds the hub's lock while it applies a transaction, for
	// about half a second on a transaction of a million rows. Neither the
	// agent's status (the client count) nor the applier's trimming (the
	// hub's offset) may wait for it.
	f := newFixture(t, Config{}, stockSchema)
	f.exec(`INSERT INTO stock VALUES (1, 1, 'a')`)
	f.waitHub()
	c := f.dial("")
	c.read()
	// The hub has applied the queue's last transaction.
	var wantOffset store.LSN
	f.db.View(func(r *store.Reader) error {
		return r.Txns(0, func(h *store.TxnHeader, _ *store.TxnCursor) error { wantOffset = h.EndLSN; return nil })
	})
	f.hub.mu.Lock()
	type answer struct {
		clients int
		offset  store.LSN
	}
	answered := make(chan answer, 1)
	go func() { answered <- answer{f.hub.Clients(), f.hub.Offset()} }()
	select {
	case got := <-answered:
		f.hub.mu.Unlock()
		if got.clients != 1 || got.offset != wantOffset || wantOffset == 0 {
			t.Fatalf("Clients() = %d, Offset() = %s; want 1 and %s", got.clients, got.offset, wantOffset)
		}
	case <-time.After(10 * time.Second):
		f.hub.mu.Unlock()
		t.Fatal("Clients() or Offset() waited for the lock a poll holds")
	}
	// The count follows a client that leaves.
	c.ws.Close()
	for deadline := time.Now().Add(10 * time.Second); f.hub.Clients() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Clients() = %d after the client left, want 0", f.hub.Clients())
		}
	}
}

func TestHugeTransactionOfAMirrorServedTableIsPassedOver(t *testing.T) {
	t.Parallel()
	// A transaction that clients refetch the rows of, on a table whose rows
	// the hub does not keep, is passed over without reading its values;
	// what the hub knows of the table (its columns) follows it all the
	// same. (A table whose rows the hub keeps has them applied: see
	// TestHubFarBehindHasClientsRefetch.)
	f := newOverflowedFixture(t)
	f.hub.mu.Lock()
	before := f.hub.passedOver
	f.hub.farBehind = 0 // any change is a backlog: clients refetch
	f.hub.mu.Unlock()
	f.exec(`ALTER TABLE stock ADD COLUMN note text`)
	f.exec(`UPDATE stock SET qty = -qty, note = 'passed over' WHERE id <= 20`)
	f.waitHub()
	f.hub.mu.Lock()
	passed := f.hub.passedOver - before
	cols := f.hub.tableInfo(f.hub.tables["public.stock"].rel).Columns
	f.hub.mu.Unlock()
	if passed == 0 {
		t.Fatal("the hub read the values of a transaction it only had to pass over")
	}
	if len(cols) != 4 || cols[3].Name != "note" {
		t.Fatalf("after the transaction that added a column, the hub knows the columns %+v", cols)
	}
}

func TestHugeTransactionThatOverflowsATableIsPassedOver(t *testing.T) {
	t.Parallel()
	// A huge transaction that leaves a table with more rows than the hub
	// keeps is passed over without reading its values: the table is served
	// from its mirror at once, as applying the transaction would have made
	// it. One that leaves the table under the bound is applied.
	f := newFixture(t, Config{TablesDir: t.TempDir()}, stockSchema)
	f.hub.mu.Lock()
	f.hub.maxRows = 50
	f.hub.farBehind = 0 // any change is a backlog: every transaction is huge
	f.hub.mu.Unlock()
	state := func() (passed int64, rows int, overflow bool) {
		f.hub.mu.Lock()
		defer f.hub.mu.Unlock()
		if t := f.hub.tables["public.stock"]; t != nil {
			rows, overflow = len(t.rows), t.overflow
		}
		return f.hub.passedOver, rows, overflow
	}
	f.waitHub()
	before, _, _ := state()
	f.exec(`INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 10) g`)
	f.exec(`BEGIN; INSERT INTO stock SELECT g, g, 'more' FROM generate_series(11, 40) g; DELETE FROM stock WHERE id <= 20; COMMIT`)
	f.waitHub()
	if passed, rows, overflow := state(); passed != before || rows != 20 || overflow {
		t.Fatalf("after transactions that leave 20 rows: %d passed over, %d rows kept, overflow %v; want none, 20, false", passed-before, rows, overflow)
	}
	f.exec(`INSERT INTO stock SELECT g, g, 'load' FROM generate_series(100, 299) g`)
	f.waitHub()
	if passed, rows, overflow := state(); passed != before+1 || rows != 0 || !overflow {
		t.Fatalf("after a transaction that leaves 220 rows: %d passed over, %d rows kept, overflow %v; want 1, 0, true", passed-before, rows, overflow)
	}
}

// TestStreamClientCapHoldsUnderConcurrentUpgrades dials many stream
// clients at once: no more than MaxClients are upgraded, and the others
// are told the server is full.
func TestStreamClientCapHoldsUnderConcurrentUpgrades(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{MaxClients: 3}, stockSchema)
	f.waitHub()
	u := "ws" + strings.TrimPrefix(f.http.URL, "http") + "/api/v1/stream"
	var mu sync.Mutex
	var conns []*websocket.Conn
	full := 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ws, resp, err := websocket.DefaultDialer.Dial(u, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				conns = append(conns, ws)
			case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
				full++
			default:
				t.Errorf("dial: %v", err)
			}
		})
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	if len(conns) != 3 || full != 17 {
		t.Fatalf("%d clients upgraded and %d told the server is full, want 3 and 17", len(conns), full)
	}
}
