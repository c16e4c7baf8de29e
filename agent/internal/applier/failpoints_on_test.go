//go:build failpoints

package applier

// failpointsBuilt reports whether the failpoints are compiled in
// (failpoints_on.go): they are.
const failpointsBuilt = true

// set sets the function called at the failpoints (nil: none).
func (f *failpoints) set(fn func(point, table string) error) { f.fn = fn }
