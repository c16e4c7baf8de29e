//go:build !failpoints

package applier

// failpoints, without the failpoints build tag, are none: fail does
// nothing and its calls compile away (see failpoints_on.go).
type failpoints struct{}

func (*failpoints) fail(point, table string) error { return nil }
