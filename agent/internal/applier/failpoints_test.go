package applier

import "testing"

// requireFailpoints skips a test that simulates crashes when the
// failpoints are not compiled in: they are with the failpoints build tag
// (go test -tags failpoints), which make test passes.
func requireFailpoints(t testing.TB) {
	t.Helper()
	if !failpointsBuilt {
		t.Skip("simulates crashes: needs the failpoints build tag (go test -tags failpoints, as make test runs)")
	}
}
