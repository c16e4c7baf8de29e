//go:build failpoints

package source

// failpointsBuilt reports whether the failpoints are compiled in
// (failpoints_on.go): they are.
const failpointsBuilt = true

// set sets the function called at the failpoints (nil: none).
func (f *failpoints) set(fn func(point string) error) { f.fn = fn }
