package web_test

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"
)

// clock is how the page writes a time: HH:MM local, with the date when it
// is not today.
func clock(t time.Time) string {
	t = t.Local()
	if now := time.Now(); t.YearDay() != now.YearDay() || t.Year() != now.Year() {
		return t.Format("2006-01-02 15:04")
	}
	return t.Format("15:04")
}

// TestStatusStrip sets the fake agent's status to each state the strip
// tells apart and checks its words, then that the charts draw the polls.
func TestStatusStrip(t *testing.T) {
	f := newFakeAgent(t, products)
	loadInventory(f)
	lastUpload := time.Now().Add(-7 * time.Minute).UTC()
	offlineSince := time.Now().Add(-3 * time.Minute).UTC()

	// The status: a changes counter that grows 1,000 a second, and the
	// fields the test changes.
	var mu sync.Mutex
	changes := 0
	fields := map[string]any{}
	upload := map[string]any{}
	set := func(top, up map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		fields = map[string]any{"state": "streaming", "lag_bytes": 2048, "lag_seconds": 0,
			"server_wal_end": "0/3000000", "received_lsn": "0/3000000"}
		for k, v := range top {
			fields[k] = v
		}
		upload = map[string]any{"online": true, "backlog_versions": 0, "backlog_bytes": 0, "versions": 40,
			"last_upload": lastUpload.Format(time.RFC3339Nano)}
		for k, v := range up {
			upload[k] = v
		}
	}
	publish := func() {
		mu.Lock()
		defer mu.Unlock()
		st := map[string]any{"changes": changes, "upload": upload}
		for k, v := range fields {
			st[k] = v
		}
		f.setStatus(st)
	}
	set(nil, nil)
	publish()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				changes += 100
				mu.Unlock()
				publish()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	b := newBrowser(t, "")
	b.navigate(f.srv.URL + "/")
	b.waitOffset("e1:1000", 5*time.Second)

	text := func(id string) string {
		return eval[string](b, fmt.Sprintf(`document.getElementById(%q).textContent`, id))
	}
	tone := func(id string) string {
		return eval[string](b, fmt.Sprintf(`document.getElementById(%q).dataset.tone`, id))
	}
	// says waits until the element's text matches re.
	says := func(what, id string, re *regexp.Regexp) {
		t.Helper()
		b.waitFor(what, fmt.Sprintf(`new RegExp(%q).test(document.getElementById(%q).textContent)`, re.String(), id), 6*time.Second)
	}
	q := regexp.QuoteMeta

	t.Run("up to date", func(t *testing.T) {
		says("up to date", "replica-text", regexp.MustCompile(`^`+q("Replica up to date, last upload "+clock(lastUpload))+`$`))
		says("capture rate", "capture-text", regexp.MustCompile(`^Capturing, [0-9,.]+ changes/s$`))
		if tone("replica") != "ok" || tone("capture") != "ok" {
			t.Errorf("tones %q %q, want ok", tone("replica"), tone("capture"))
		}
	})

	t.Run("behind", func(t *testing.T) {
		set(nil, map[string]any{"backlog_versions": 3, "backlog_bytes": 5 << 20})
		before := time.Now()
		says("behind", "replica-text", regexp.MustCompile(`^Replica behind by 3 versions since \d\d:\d\d `+q("(last upload "+clock(lastUpload)+")")+`$`))
		got := text("replica-text")
		if want, alt := clock(before), clock(time.Now()); !regexp.MustCompile(q("since "+want+" ") + "|" + q("since "+alt+" ")).MatchString(got) {
			t.Errorf("replica says %q, want since %s (when the page saw it)", got, want)
		}
		if tone("replica") != "warn" {
			t.Errorf("tone %q, want warn", tone("replica"))
		}
		set(nil, map[string]any{"backlog_versions": 1})
		says("behind by 1", "replica-text", regexp.MustCompile(`^Replica behind by 1 version since `+q(got[len("Replica behind by 3 versions since "):])+`$`))
	})

	t.Run("offline", func(t *testing.T) {
		set(nil, map[string]any{"online": false, "backlog_versions": 5, "offline_since": offlineSince.Format(time.RFC3339Nano),
			"last_error": `<b>connection refused</b>`})
		says("offline", "replica-text", regexp.MustCompile(`^`+q("Replica offline since "+clock(offlineSince)+" (last upload "+clock(lastUpload)+")")+`$`))
		if tone("replica") != "bad" {
			t.Errorf("tone %q, want bad", tone("replica"))
		}
		if got := eval[string](b, `document.getElementById('replica').title`); !regexp.MustCompile(q("last error: <b>connection refused</b>")).MatchString(got) {
			t.Errorf("replica title %q, want the last error as text", got)
		}
	})

	t.Run("paused", func(t *testing.T) {
		set(map[string]any{"state": "paused"}, nil)
		says("paused", "capture-text", regexp.MustCompile(`^Capture paused: disk budget reached$`))
		if tone("capture") != "bad" {
			t.Errorf("tone %q, want bad", tone("capture"))
		}
	})

	t.Run("catching up", func(t *testing.T) {
		set(map[string]any{"server_wal_end": "1/0", "received_lsn": "0/F0000000", "lag_seconds": 42.4}, nil)
		says("catching up", "capture-text", regexp.MustCompile(`^Catching up, 42 s behind$`))
		says("up to date again", "replica-text", regexp.MustCompile(`^Replica up to date`))
	})

	t.Run("server text is text", func(t *testing.T) {
		set(map[string]any{"state": `<img src=x id=injected>`}, nil)
		says("unknown state", "capture-text", regexp.MustCompile(`^`+q("Capture <img src=x id=injected>")+`$`))
		if eval[bool](b, `!!document.getElementById('injected') || !!document.querySelector('header img')`) {
			t.Error("the state was inserted as HTML")
		}
	})

	t.Run("charts", func(t *testing.T) {
		set(nil, nil)
		const points = `document.querySelector('#%s polyline').points.numberOfItems`
		b.waitFor("chart points", fmt.Sprintf(points+` >= 3 && `+points+` >= 3`, "lag-chart", "rate-chart"), 15*time.Second)
		if got := text("lag-now"); got != "2.0 KiB" {
			t.Errorf("lag chart label %q, want 2.0 KiB", got)
		}
		if got := text("rate-now"); !regexp.MustCompile(`^[0-9,.]+ /s$`).MatchString(got) {
			t.Errorf("rate chart label %q", got)
		}
		for _, id := range []string{"lag-chart", "rate-chart"} {
			label := eval[string](b, fmt.Sprintf(`document.querySelector('#%s svg').getAttribute('aria-label')`, id))
			if !regexp.MustCompile(`over the last 10 minutes: now .+, highest .+`).MatchString(label) {
				t.Errorf("%s: aria-label %q", id, label)
			}
			// Every point is inside the box, the newest at the right.
			pts := eval[[][2]float64](b, fmt.Sprintf(`[...document.querySelector('#%s polyline').points].map(p => [p.x, p.y])`, id))
			for _, p := range pts {
				if p[0] < 0 || p[0] > 120 || p[1] < 0 || p[1] > 24 {
					t.Errorf("%s: point %v outside the chart", id, p)
				}
			}
			if last := pts[len(pts)-1]; last[0] < 115 {
				t.Errorf("%s: newest point at x=%.1f, want at the right edge", id, last[0])
			}
		}
	})
}
