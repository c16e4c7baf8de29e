package uploader

import (
	"context"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// commitLSN returns the source position a local commit records: the
// lastLSN of its commitInfo, the end LSN of the last source transaction
// it holds, which the applier writes in every commit of changes. A
// commit without one (a compaction, a schema change alone) or with one
// that does not parse returns false.
func commitLSN(acts []delta.Action) (int64, bool) {
	for _, a := range acts {
		ci, ok := a.(*delta.CommitInfo)
		if !ok {
			continue
		}
		info, _ := ci.Extra["lakeside"].(map[string]any)
		text, _ := info["lastLSN"].(string)
		if text == "" {
			return 0, false
		}
		l, err := store.ParseLSN(text)
		if err != nil || l == 0 || int64(l) < 0 {
			return 0, false
		}
		return int64(l), true
	}
	return 0, false
}

// maxPositionLookback bounds how many local versions positionAt reads
// back for one that records a position.
const maxPositionLookback = 100

// positionAt returns the source position of the local table at version
// v, for a site's first range, its whole snapshot: the lastLSN of the
// newest commit up to v that records one, read back at most
// maxPositionLookback versions, since a compaction or a schema change
// records none yet leaves the position where it was. 0 when none is
// found or a commit does not read (one the local log no longer holds):
// the position is for people, and the range goes in without it.
func (f *FleetTable) positionAt(ctx context.Context, v int64) int64 {
	for u := v; u >= 0 && u > v-maxPositionLookback; u-- {
		acts, err := f.local.ReadCommit(ctx, u)
		if err != nil {
			return 0
		}
		if l, ok := commitLSN(acts); ok {
			return l
		}
	}
	return 0
}
