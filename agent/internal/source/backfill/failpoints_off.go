//go:build !failpoints

package backfill

// Failpoints, without the failpoints build tag, are none: fail does
// nothing and its calls compile away (see failpoints_on.go).
type Failpoints struct{}

func (Failpoints) fail(point string) error { return nil }
