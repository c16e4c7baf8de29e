//go:build failpoints

package source

import "github.com/lakeside/lakeside/agent/internal/source/backfill"

// failpoints are the points of capture where the tests simulate a crash:
// the snapshot queued, and a backfill chunk copied. They are compiled in
// only with the failpoints build tag, which make test passes: without it
// (failpoints_off.go) they are no-ops the compiler removes, names and all.
type failpoints struct {
	// fn, when set, is called at each point; an error it returns stops
	// there.
	fn func(point string) error
}

// fail calls the failpoint, if any.
func (f *failpoints) fail(point string) error {
	if f.fn == nil {
		return nil
	}
	return f.fn(point)
}

// backfill returns the failpoints of the backfill's copies.
func (f *failpoints) backfill() backfill.Failpoints { return backfill.Failpoints{Fn: f.fn} }
