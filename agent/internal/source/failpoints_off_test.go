//go:build !failpoints

package source

// failpointsBuilt reports whether the failpoints are compiled in
// (failpoints_on.go): they are not.
const failpointsBuilt = false

// set does nothing: there are no failpoints, and a test that sets one
// first calls requireFailpoints, which skips it.
func (*failpoints) set(func(point string) error) {}
