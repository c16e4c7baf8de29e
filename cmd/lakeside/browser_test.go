package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestLivePageAgainstTheAgent drives the real page of the real agent in
// headless Chromium: rows show, an UPDATE and a DELETE in PostgreSQL appear,
// the status strip says capture and the replica are up to date, and
// stopping and restarting the agent shows reconnecting, then connected
// with the rows right.
func TestLivePageAgainstTheAgent(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts PostgreSQL, the agent and Chromium: not a short test")
	}
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("headless Chromium is missing (%v): run make deps", err)
	}
	addr := freeAddr(t)
	replica := "replica:\n  url: file://" + t.TempDir() + "\n  site: branch1\n  poll_interval: 200ms\n"
	e := newE2EWith(t, []string{"public.stock"}, "http:\n  listen: "+addr+"\n"+replica)
	e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL, label text)`,
		`INSERT INTO stock SELECT g, g * 10, 'item ' || g FROM generate_series(1, 20) g`)
	d := e.start()
	waitState(t, e, d, "streaming")

	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 900))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	const rows = `document.querySelectorAll('section[data-table="public.stock"] [role=row][data-key]')`
	cell := func(key string, col int) string {
		return fmt.Sprintf(`(document.querySelector('section[data-table="public.stock"] [role=row][data-key="%s"]')?.querySelectorAll('[role=cell]')[%d]?.textContent ?? '').trim()`, key, col)
	}
	waitFor := func(what, predicate string) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 45*time.Second)
		defer wcancel()
		if _, err := chromedp.Run(wctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
			t.Fatalf("page: waiting for %s: %v", what, err)
		}
	}
	connected := `document.getElementById('conn').dataset.state === 'connected'`

	waitFor("the rows", connected+` && `+rows+`.length === 20 && `+cell("[3]", 1)+` === '30'`)
	// Once the replica has the tables, the strip says so in words, and
	// the charts have points.
	waitFor("the strip to say up to date",
		`/^Replica up to date, last upload (\d{4}-\d\d-\d\d )?\d\d:\d\d$/.test(document.getElementById('replica-text').textContent) && `+
			`/^Capturing, [0-9,.]+ changes\/s$/.test(document.getElementById('capture-text').textContent) && `+
			`document.querySelector('#rate-chart polyline').points.numberOfItems >= 2`)
	e.exec(`UPDATE stock SET qty = 999 WHERE id = 3`)
	waitFor("the update", cell("[3]", 1)+` === '999'`)
	e.exec(`DELETE FROM stock WHERE id = 4`)
	waitFor("the delete", rows+`.length === 19 && !document.querySelector('[data-key="[4]"]')`)

	e.stop(d)
	waitFor("the reconnecting indicator", `document.getElementById('conn').dataset.state !== 'connected'`)
	e.exec(`UPDATE stock SET qty = 555 WHERE id = 5`)
	d = e.start()
	waitFor("connected again with the rows right", connected+` && `+rows+`.length === 19 && `+cell("[5]", 1)+` === '555' && `+cell("[3]", 1)+` === '999'`)

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.ArtifactDir(), "live-view.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.exited
}
