package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/lakeside/lakeside/agent/internal/live"
)

// Sample inventory tables: products keyed by an int8 id (a JSON string on
// the wire), stock keyed by (store_id int4, product_id int8).
var (
	products = live.TableInfo{
		Name: "public.products",
		Columns: []live.ColumnInfo{
			{Name: "id", Type: "int8"}, {Name: "sku", Type: "text"}, {Name: "name", Type: "text"},
			{Name: "price", Type: "numeric"}, {Name: "active", Type: "bool"}, {Name: "updated_at", Type: "timestamptz"},
		},
		Key: []string{"id"},
	}
	// bins has a text and numeric key: text compares by code unit, numeric
	// by value, negatives and fractions included.
	bins = live.TableInfo{
		Name:    "public.bins",
		Columns: []live.ColumnInfo{{Name: "aisle", Type: "text"}, {Name: "level", Type: "numeric"}, {Name: "tags", Type: "_text"}},
		Key:     []string{"aisle", "level"},
	}
	stock = live.TableInfo{
		Name: "public.stock",
		Columns: []live.ColumnInfo{
			{Name: "store_id", Type: "int4"}, {Name: "product_id", Type: "int8"},
			{Name: "qty", Type: "int4"}, {Name: "reserved", Type: "int4"}, {Name: "updated_at", Type: "timestamptz"},
		},
		Key: []string{"store_id", "product_id"},
	}
)

var productNames = []string{
	"Oat milk 1 l", "Espresso beans 500 g", "Sourdough loaf", "Free-range eggs (6)", "Greek yoghurt",
	"Basmati rice 1 kg", "Olive oil 750 ml", "Dark chocolate 85%", "Sparkling water 6×1.5 l", "Apples, Braeburn",
	"Tomato passata", "Porridge oats 1 kg",
}

func productRow(id int, name, price string) []any {
	return []any{"id", fmt.Sprint(id), "sku", fmt.Sprintf("SKU-%05d", id), "name", name,
		"price", price, "active", true, "updated_at", "2025-03-14 09:26:53.589+00"}
}

func stockRow(store, productID, qty int, reserved any) []any {
	return []any{"store_id", store, "product_id", fmt.Sprint(productID), "qty", qty, "reserved", reserved,
		"updated_at", "2025-03-14 09:30:00+00"}
}

// loadInventory fills the sample tables; ids are chosen so that a text sort
// would differ from the numeric one (9 < 10 < 100).
func loadInventory(f *fakeAgent) {
	for i, id := range []int{100, 2, 10, 9, 1, 11, 12, 3, 21, 4, 5, 6} {
		f.load("public.products", row(productRow(id, productNames[i], fmt.Sprintf("%d.%02d", 1+id%7, id*7%100))...))
	}
	if _, ok := f.rows["public.bins"]; ok {
		for _, aisle := range []string{"b", "B", "a", "a10", "a9"} {
			for _, level := range []string{"10", "-2", "9.999", "-10.5", "0", "2.25", "002.5"} {
				f.load("public.bins", row("aisle", aisle, "level", level, "tags", []string{"cold", aisle}))
			}
		}
	}
	if _, ok := f.rows["public.stock"]; !ok {
		return
	}
	for _, store := range []int{2, 10, 1} {
		for _, p := range []int{100, 9, 10, 1} {
			var reserved any = (p + store) % 4
			if p == 9 {
				reserved = nil
			}
			f.load("public.stock", row(stockRow(store, p, (p*3+store*11)%57, reserved)...))
		}
	}
}

func TestHandler(t *testing.T) {
	f := newFakeAgent(t)
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script src="app.js"`},
		{"/app.js", "javascript", "requestAnimationFrame"},
		{"/style.css", "text/css", "content-visibility"},
	} {
		resp, err := http.Get(f.srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %s %q, body has %q: %v", c.path, resp.Status, resp.Header.Get("Content-Type"), c.contains, strings.Contains(string(body), c.contains))
		}
		if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("ETag") == "" {
			t.Errorf("GET %s: no CSP or ETag header", c.path)
		}
		req, _ := http.NewRequest("GET", f.srv.URL+c.path, nil)
		req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
		resp2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if resp2.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %s, want 304", c.path, resp2.Status)
		}
	}
	resp, err := http.Get(f.srv.URL + "/nothing.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing.js: %s, want 404", resp.Status)
	}
}

// TestLiveTables checks the snapshot, each kind of change, the highlight,
// the connection indicator, the token and the status header.
func TestLiveTables(t *testing.T) {
	f := newFakeAgent(t, products, stock, bins)
	f.token = "s3cret"
	loadInventory(f)
	b := newBrowser(t, "")
	b.navigate(f.srv.URL + "/?token=s3cret")

	q := f.nextRequest(5 * time.Second)
	if q.Get("token") != "s3cret" || q.Has("offset") {
		t.Errorf("first stream request %v: want token=s3cret and no offset", q)
	}
	b.waitFor("connected", `document.getElementById('conn').dataset.state === 'connected'`, 5*time.Second)
	if got := eval[string](b, `document.getElementById('conn-text').textContent`); got != "Connected" {
		t.Errorf("indicator says %q, want Connected", got)
	}
	b.waitOffset("e1:1000", 5*time.Second)

	t.Run("snapshot sorted by key", func(t *testing.T) {
		dom := b.domRows()
		for _, name := range []string{"public.products", "public.stock", "public.bins"} {
			sameRows(t, name, dom[name], f.expectedRows(name))
		}
		var levels []string
		for _, r := range dom["public.bins"][:7] {
			levels = append(levels, r[1]+"/"+r[2])
		}
		if got := strings.Join(levels, " "); got != "B/-10.5 B/-2 B/0 B/2.25 B/002.5 B/9.999 B/10" {
			t.Errorf("bins in page order: %s", got)
		}
		var ids []string
		for _, r := range dom["public.products"] {
			ids = append(ids, r[1])
		}
		if got := strings.Join(ids, " "); got != "1 2 3 4 5 6 9 10 11 12 21 100" {
			t.Errorf("product ids in page order: %s", got)
		}
		if r := dom["public.stock"][1]; r[1] != "1" || r[2] != "9" || r[4] != "NULL" { // reserved is null
			t.Errorf("stock row (1, 9) shows %q, want reserved NULL", r)
		}
		if n := eval[int](b, `document.querySelectorAll('[data-key].changed').length`); n != 0 {
			t.Errorf("%d rows highlighted after the snapshot, want none", n)
		}
	})

	t.Run("changes", func(t *testing.T) {
		// Mark every row element, to prove that unchanged rows are kept.
		eval[int](b, `document.querySelectorAll('[role=row][data-key]').forEach(tr => tr.dataset.mark = '1'), 0`)
		off := f.commit(
			[]live.Change{f.ins("public.products", row(productRow(7, "Rye crispbread", "2.35")...))},
			[]live.Change{
				f.upd("public.products", row(productRow(10, "Sourdough loaf, large", "4.10")...)),
				f.del("public.products", row(productRow(3, "", "")...)),
				f.upd("public.stock", row(stockRow(2, 100, 0, 0)...)),
			},
		)
		b.waitOffset(off, 5*time.Second)
		dom := b.domRows()
		for _, name := range []string{"public.products", "public.stock"} {
			sameRows(t, name, dom[name], f.expectedRows(name))
		}
		type rowState struct {
			Key     string
			Mark    bool
			Changed bool
		}
		states := eval[[]rowState](b, `[...document.querySelectorAll('[role=row][data-key]')].map(tr =>
			({Key: tr.dataset.key, Mark: tr.dataset.mark === '1', Changed: tr.classList.contains('changed')}))`)
		changed := map[string]bool{`["7"]`: true, `["10"]`: true, `[2,"100"]`: true}
		for _, s := range states {
			if s.Changed != changed[s.Key] {
				t.Errorf("row %s: highlighted %v, want %v", s.Key, s.Changed, changed[s.Key])
			}
			if s.Mark == (s.Key == `["7"]`) { // only the inserted row is a new element
				t.Errorf("row %s: kept element %v", s.Key, s.Mark)
			}
		}
		if len(states) != len(f.expectedRows("public.products"))+len(f.expectedRows("public.stock"))+len(f.expectedRows("public.bins")) {
			t.Errorf("%d rows on the page", len(states))
		}
		b.waitFor("highlight to fade", `document.querySelectorAll('[data-key].changed').length === 0`, 4*time.Second)
	})

	t.Run("truncated value", func(t *testing.T) {
		// A value too large for the live view arrives as its start, marked.
		r := row(productRow(11, "", "1.00")...)
		r["name"] = json.RawMessage(`{"truncated":true,"bytes":10485760,"prefix":"Tomato passata, the long story"}`)
		b.waitOffset(f.commit([]live.Change{f.upd("public.products", r)}), 5*time.Second)
		got := eval[string](b, `document.querySelector('[data-table="public.products"] [data-key='+JSON.stringify('["11"]')+'] [role=cell]:nth-child(3)').textContent`)
		if want := "Tomato passata, the long story… (10,485,760 bytes)"; got != want {
			t.Errorf("truncated name shows %q, want %q", got, want)
		}
	})

	t.Run("status header", func(t *testing.T) {
		f.setStatus(map[string]any{
			"state": "streaming", "lag_bytes": 123456, "server_wal_end": "0/3000000", "received_lsn": "0/3000000",
			"tables": []map[string]any{
				{"name": "public.products", "kind": "mirror", "version": 12, "remote_version": 10},
				{"name": "public.products_changes", "kind": "changelog", "version": 12, "remote_version": 12},
				{"name": "public.stock", "kind": "mirror", "version": 7},
			},
			"upload": map[string]any{"online": true, "backlog_versions": 0, "versions": 0},
		})
		b.waitFor("lag", `document.getElementById('lag-now').textContent === '120.6 KiB'`, 5*time.Second)
		vers := eval[[]string](b, `[...document.querySelectorAll('#versions li')].map(li => li.textContent)`)
		want := []string{"public.productsmirrorv12remote v10", "public.products_changeschangelogv12remote v12", "public.stockmirrorv7"}
		if strings.Join(vers, "|") != strings.Join(want, "|") {
			t.Errorf("versions %q, want %q", vers, want)
		}
		if got := eval[string](b, `document.getElementById('replica-text').textContent`); got != "Replica up to date, no upload yet" {
			t.Errorf("replica says %q", got)
		}
		// Fields that are missing are hidden, not shown as errors.
		f.setStatus(map[string]any{"lag_bytes": "0"})
		b.waitFor("lag 0", `document.getElementById('lag-now').textContent === '0 B'`, 5*time.Second)
		if !eval[bool](b, `document.getElementById('replica').hidden && document.getElementById('capture').hidden && document.querySelectorAll('#versions li').length === 0`) {
			t.Error("capture, replica or versions still shown without their fields")
		}
	})
}

// TestReconnect drops the connection: the page shows it is reconnecting,
// comes back with the offset it applied last, and gets what it missed.
func TestReconnect(t *testing.T) {
	f := newFakeAgent(t, products)
	loadInventory(f)
	b := newBrowser(t, "")
	b.navigate(f.srv.URL + "/")
	f.nextRequest(5 * time.Second)
	b.waitOffset("e1:1000", 5*time.Second)
	applied := f.commit([]live.Change{f.upd("public.products", row(productRow(1, "Oat milk 1 l", "1.99")...))})
	b.waitOffset(applied, 5*time.Second)

	f.hold()
	f.drop()
	b.waitFor("reconnecting", `document.getElementById('conn').dataset.state === 'reconnecting'`, 5*time.Second)
	if got := eval[string](b, `document.getElementById('conn-text').textContent`); got != "Reconnecting (attempt 1)…" {
		t.Errorf("indicator says %q", got)
	}
	q := f.nextRequest(5 * time.Second)
	if q.Get("offset") != applied {
		t.Errorf("reconnected with offset %q, want %q", q.Get("offset"), applied)
	}
	// Missed while away: an insert, an update, a delete, a key change.
	f.commit([]live.Change{f.ins("public.products", row(productRow(50, "Hazelnut spread", "3.49")...))})
	f.commit([]live.Change{f.upd("public.products", row(productRow(2, "Espresso beans 1 kg", "17.90")...)), f.del("public.products", row(productRow(100, "", "")...))})
	moved := f.upd("public.products", row(productRow(8, "Sourdough loaf", "3.80")...))
	moved.OldKey = `["10"]`
	last := f.commit([]live.Change{moved})
	f.release()

	b.waitOffset(last, 5*time.Second)
	b.waitFor("connected", `document.getElementById('conn').dataset.state === 'connected'`, 5*time.Second)
	sameRows(t, "products after reconnect", b.domRows()["public.products"], f.expectedRows("public.products"))

	// A close for a slow client (4008) also reconnects from the last offset.
	f.mu.Lock()
	for c := range f.conns {
		c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(live.CloseSlowClient, "slow client"), time.Now().Add(time.Second))
	}
	f.mu.Unlock()
	q = f.nextRequest(5 * time.Second)
	if q.Get("offset") != last {
		t.Errorf("after 4008 reconnected with offset %q, want %q", q.Get("offset"), last)
	}
	b.waitFor("connected again", `document.getElementById('conn').dataset.state === 'connected'`, 5*time.Second)
	final := f.commit([]live.Change{f.del("public.products", row(productRow(1, "", "")...))})
	b.waitOffset(final, 5*time.Second)
	sameRows(t, "products after 4008", b.domRows()["public.products"], f.expectedRows("public.products"))
}

// TestRefetch: a refetch drops the rows and the next snapshot rebuilds
// them, whether it comes on a live connection or for a stale offset.
func TestRefetch(t *testing.T) {
	f := newFakeAgent(t, products)
	loadInventory(f)
	b := newBrowser(t, "")
	b.navigate(f.srv.URL + "/")
	f.nextRequest(5 * time.Second)
	b.waitOffset("e1:1000", 5*time.Second)

	// The agent's state is reset while the page is connected.
	f.hold()
	f.reset("e2", "public.products",
		row(productRow(500, "Cold brew 250 ml", "2.80")...), row(productRow(40, "Rice cakes", "1.15")...))
	b.waitFor("rows dropped", `document.querySelectorAll('[role=row][data-key]').length === 0`, 5*time.Second)
	if q := f.nextRequest(5 * time.Second); q.Has("offset") {
		t.Errorf("after a refetch the page sent offset %q, want none", q.Get("offset"))
	}
	f.release()
	b.waitOffset("e2:5000", 5*time.Second)
	sameRows(t, "products after refetch", b.domRows()["public.products"], f.expectedRows("public.products"))

	// The page comes back with an offset of an epoch the agent forgot.
	stale := f.commit([]live.Change{f.ins("public.products", row(productRow(41, "Rice crackers", "1.25")...))})
	b.waitOffset(stale, 5*time.Second)
	f.hold()
	f.drop()
	f.reset("e3", "public.products", row(productRow(77, "Mineral water 1.5 l", "0.65")...))
	if q := f.nextRequest(5 * time.Second); q.Get("offset") != stale {
		t.Errorf("reconnected with offset %q, want %q", q.Get("offset"), stale)
	}
	f.release()
	b.waitOffset("e3:5000", 5*time.Second)
	sameRows(t, "products after a stale offset", b.domRows()["public.products"], f.expectedRows("public.products"))
}

// frameMonitor runs before the page's scripts: it records the longest gap
// between animation frames and the long tasks since the last reset.
const frameMonitor = `(() => {
	const p = window.__perf = { maxGap: 0, frames: 0, longTasks: 0, longest: 0 };
	p.reset = () => { p.maxGap = 0; p.frames = 0; p.longTasks = 0; p.longest = 0; last = performance.now(); };
	let last = performance.now();
	const tick = (t) => {
		p.maxGap = Math.max(p.maxGap, t - last); last = t; p.frames++;
		requestAnimationFrame(tick);
	};
	requestAnimationFrame(tick);
	new PerformanceObserver((list) => {
		for (const e of list.getEntries()) { p.longTasks++; p.longest = Math.max(p.longest, e.duration); }
	}).observe({ type: 'longtask' });
})();`

type perf struct {
	MaxGap    float64 `json:"maxGap"`
	Frames    int     `json:"frames"`
	LongTasks int     `json:"longTasks"`
	Longest   float64 `json:"longest"`
}

// TestLoad: 10,000 snapshot rows, then 1,000 changes a second for 3 s.
func TestLoad(t *testing.T) {
	const (
		initial = 10000
		perSec  = 1000
		seconds = 3
		tick    = 10 * time.Millisecond
	)
	f := newFakeAgent(t, products)
	var ids []int
	for id := 1; id <= initial; id++ {
		f.load("public.products", row(productRow(id, productNames[id%len(productNames)], fmt.Sprintf("%d.%02d", id%50, id%100))...))
		ids = append(ids, id)
	}
	b := newBrowser(t, frameMonitor)
	start := time.Now()
	b.navigate(f.srv.URL + "/")
	b.waitOffset("e1:1000", 20*time.Second)
	if n := eval[int](b, `document.querySelectorAll('[role=row][data-key]').length`); n != initial {
		t.Fatalf("%d rows after the snapshot, want %d", n, initial)
	}
	snap := eval[perf](b, `window.__perf`)
	t.Logf("snapshot of %d rows rendered in %s; max frame gap %.0f ms, %d long tasks (longest %.0f ms)",
		initial, time.Since(start).Round(time.Millisecond), snap.MaxGap, snap.LongTasks, snap.Longest)
	eval[int](b, `window.__perf.reset(), 0`)

	rng := rand.New(rand.NewPCG(1, 2))
	next := initial + 1
	perTick := perSec * int(tick) / int(time.Second)
	ticks := seconds * int(time.Second/tick)
	var last string
	began := time.Now()
	for i := range ticks {
		time.Sleep(time.Until(began.Add(time.Duration(i) * tick)))
		var txns [][]live.Change
		for range perTick {
			var c live.Change
			switch n := rng.IntN(10); {
			case n == 0: // insert
				c = f.ins("public.products", row(productRow(next, "New line "+fmt.Sprint(next), "9.99")...))
				ids = append(ids, next)
				next++
			case n == 1 && len(ids) > 1: // delete
				j := rng.IntN(len(ids))
				c = f.del("public.products", row(productRow(ids[j], "", "")...))
				ids[j] = ids[len(ids)-1]
				ids = ids[:len(ids)-1]
			default: // update
				id := ids[rng.IntN(len(ids))]
				c = f.upd("public.products", row(productRow(id, productNames[rng.IntN(len(productNames))], fmt.Sprintf("%d.%02d", rng.IntN(90), rng.IntN(100)))...))
			}
			txns = append(txns, []live.Change{c})
		}
		last = f.commit(txns...)
	}
	sent := time.Since(began)
	b.waitOffset(last, 15*time.Second)
	caughtUp := time.Since(began)
	load := eval[perf](b, `window.__perf`)
	t.Logf("%d changes sent in %s, page caught up after %s; max frame gap %.0f ms over %d frames, %d long tasks (longest %.0f ms)",
		ticks*perTick, sent.Round(time.Millisecond), caughtUp.Round(time.Millisecond), load.MaxGap, load.Frames, load.LongTasks, load.Longest)
	if load.MaxGap >= 1000 {
		t.Errorf("the page froze: max gap between frames %.0f ms under load", load.MaxGap)
	}
	if load.Frames < 30 {
		t.Errorf("only %d frames in %s of load", load.Frames, caughtUp)
	}
	sameRows(t, "products after the load", b.domRows()["public.products"], f.expectedRows("public.products"))
}

// TestScreenshot renders sample inventory data and saves a screenshot to
// the temporary directory, for a person to look at.
func TestScreenshot(t *testing.T) {
	f := newFakeAgent(t, products, stock)
	loadInventory(f)
	f.setStatus(map[string]any{
		"lag_bytes": 48213,
		"tables": []map[string]any{
			{"name": "public.products", "kind": "mirror", "version": 42, "remote_version": 42},
			{"name": "public.products_changes", "kind": "changelog", "version": 42, "remote_version": 40},
			{"name": "public.stock", "kind": "mirror", "version": 318, "remote_version": 317},
			{"name": "public.stock_changes", "kind": "changelog", "version": 318, "remote_version": 317},
		},
		"state": "streaming", "changes": 0, "server_wal_end": "0/3000000", "received_lsn": "0/3000000",
		"upload": map[string]any{"online": true, "backlog_versions": 2, "backlog_bytes": 734003, "versions": 40,
			"last_upload": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)},
	})
	b := newBrowser(t, "")
	b.navigate(f.srv.URL + "/")
	b.waitOffset("e1:1000", 5*time.Second)
	off := f.commit([]live.Change{
		f.upd("public.stock", row(stockRow(1, 10, 3, 1)...)),
		f.upd("public.products", row(productRow(5, "Basmati rice 1 kg", "3.15")...)),
	})
	b.waitOffset(off, 5*time.Second)
	b.waitFor("status", `!document.getElementById('replica').hidden`, 5*time.Second)
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(os.TempDir(), "lakeside-live-view.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)

	// The header while the agent is away.
	f.hold()
	f.drop()
	b.waitFor("reconnecting", `document.getElementById('conn').dataset.state === 'reconnecting'`, 5*time.Second)
	png, err = chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.CSS("header")))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(os.TempDir(), "lakeside-live-view-reconnecting.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
