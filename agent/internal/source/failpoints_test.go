package source

import "testing"

// requireFailpoints skips a test that simulates crashes at the failpoints
// when they are not compiled in.
func requireFailpoints(t testing.TB) {
	t.Helper()
	if !failpointsBuilt {
		t.Skip("simulates crashes: needs the failpoints build tag (go test -tags failpoints, as make test runs)")
	}
}
