//go:build failpoints

package applier

// failpoints are the points of a flush where the tests simulate a crash.
// They are compiled in only with the failpoints build tag, which make test
// passes (go test -tags failpoints): without it (failpoints_off.go) they
// are no-ops the compiler removes, names and all, so that the agent has
// none of them.
type failpoints struct {
	// fn, when set, is called at each point with the table, if any; an
	// error (or a panic) there stops the flush.
	fn func(point, table string) error
}

// fail calls the failpoint, if any.
func (f *failpoints) fail(point, table string) error {
	if f.fn == nil {
		return nil
	}
	return f.fn(point, table)
}
