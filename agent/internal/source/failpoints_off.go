//go:build !failpoints

package source

import "github.com/lakeside/lakeside/agent/internal/source/backfill"

// failpoints, without the failpoints build tag, are none: fail does
// nothing and its calls compile away (see failpoints_on.go).
type failpoints struct{}

func (*failpoints) fail(point string) error { return nil }

func (*failpoints) backfill() backfill.Failpoints { return backfill.Failpoints{} }
