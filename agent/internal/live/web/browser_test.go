package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

const chromiumPath = "/usr/bin/chromium"

// browser is one headless Chromium tab.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	console  []string
	failures []string // exceptions and console errors of the page
}

// newBrowser starts headless Chromium with a fresh profile, and runs
// monitor (if any) in every new document before the page's scripts.
func newBrowser(t *testing.T, monitor string) *browser {
	if testing.Short() {
		t.Skip("starts Chromium: not a short test")
	}
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("headless Chromium is missing (%v): run make deps", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		// This closed network refuses Chromium's own connections.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser and the tab
		t.Fatalf("start Chromium at %s: %v (run make deps)", chromiumPath, err)
	}
	b := &browser{t: t, ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m.String())
			if m.IsException() || m.Type == "error" {
				b.failures = append(b.failures, m.String())
			}
			b.mu.Unlock()
		}
	}()
	if monitor != "" {
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: monitor}); err != nil {
			t.Fatalf("add monitor script: %v", err)
		}
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, f := range b.failures {
			t.Errorf("page console: %s", f)
		}
	})
	return b
}

func (b *browser) navigate(url string) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("navigate %s: %v", url, err)
	}
}

// eval evaluates a JavaScript expression and decodes its value into v.
func eval[T any](b *browser, expr string, opts ...chromedp.EvaluateOption) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript predicate every 20 ms until it is true.
func (b *browser) waitFor(what, predicate string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		state, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify({
			conn: document.getElementById('conn').textContent.trim(),
			offset: document.getElementById('offset').textContent,
			rows: [...document.querySelectorAll('section[data-table]')].map(s => s.dataset.table + ': ' + s.querySelectorAll('[role=row][data-key]').length)})`))
		b.t.Fatalf("waiting %s for %s: %v\npage state: %s", timeout, what, err, state)
	}
}

// waitOffset waits until the page has applied and rendered offset.
func (b *browser) waitOffset(offset string, timeout time.Duration) {
	b.t.Helper()
	b.waitFor("offset "+offset, fmt.Sprintf(`document.getElementById('offset').textContent === %q`, offset), timeout)
}

// domRows returns each table's rendered rows: key, then the cell texts.
func (b *browser) domRows() map[string][][]string {
	b.t.Helper()
	return eval[map[string][][]string](b, `(() => {
		const out = {};
		for (const s of document.querySelectorAll('section[data-table]')) {
			out[s.dataset.table] = [...s.querySelectorAll('[role=row][data-key]')].map(
				tr => [tr.dataset.key, ...[...tr.children].map(td => td.textContent)]);
		}
		return out;
	})()`)
}

// expectedRows renders the fake agent's rows of a table as the page should:
// sorted by key (numbers numerically), one text per column.
func (f *fakeAgent) expectedRows(table string) [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ti := f.info(table)
	keys := make([]string, 0, len(f.rows[table]))
	for k := range f.rows[table] {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		ra, rb := f.rows[table][a], f.rows[table][b]
		for _, c := range ti.Key {
			if r := compareJSON(ra[c], rb[c]); r != 0 {
				return r
			}
		}
		return strings.Compare(a, b)
	})
	out := make([][]string, len(keys))
	for i, k := range keys {
		r := []string{k}
		for _, c := range ti.Columns {
			r = append(r, cellText(f.rows[table][k][c.Name]))
		}
		out[i] = r
	}
	return out
}

var decimalRE = regexp.MustCompile(`^-?\d+(\.\d+)?$`)

// compareJSON compares two key values: numbers and numeric strings by
// value, anything else as text.
func compareJSON(a, b json.RawMessage) int {
	sa, sb := cellText(a), cellText(b)
	if decimalRE.MatchString(sa) && decimalRE.MatchString(sb) {
		ra, _ := new(big.Rat).SetString(sa)
		rb, _ := new(big.Rat).SetString(sb)
		return ra.Cmp(rb)
	}
	return strings.Compare(sa, sb)
}

// cellText is how the page shows a value: strings as they are, NULL, and
// other JSON as its text.
func cellText(raw json.RawMessage) string {
	if raw == nil || string(raw) == "null" {
		return "NULL"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// sameRows reports the first difference between got and want rows.
func sameRows(t *testing.T, what string, got, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows on the page, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("%s: row %d is %q, want %q", what, i, got[i], want[i])
			return
		}
	}
}
