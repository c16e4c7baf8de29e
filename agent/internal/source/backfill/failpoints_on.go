//go:build failpoints

package backfill

// Failpoints are the points of a copy where the tests simulate a crash.
// They are compiled in only with the failpoints build tag, which make test
// passes (go test -tags failpoints): without it (failpoints_off.go) they
// are no-ops the compiler removes, names and all.
type Failpoints struct {
	// Fn, when set, is called at each point; an error it returns stops
	// there.
	Fn func(point string) error
}

// fail calls the failpoint, if any.
func (f Failpoints) fail(point string) error {
	if f.Fn == nil {
		return nil
	}
	return f.Fn(point)
}
