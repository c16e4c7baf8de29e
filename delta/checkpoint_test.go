package delta

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckpointDueBySize commits small changes to a table of many files
// under the size rule: checkpoints come no closer than the interval, only
// once the commits since the last one outweigh it, and all of them after
// the first together cost no more bytes than the commits they cover.
func TestCheckpointDueBySize(t *testing.T) {
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, true))
	tbl, err := Create(ctx, t.TempDir(), schema, nil, nil, nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	add := func(i int) *Add {
		return &Add{Path: fmt.Sprintf("part-%05d.parquet", i), Size: 1000, DataChange: true,
			Stats: fmt.Sprintf(`{"numRecords":10,"minValues":{"id":%d},"maxValues":{"id":%d},"nullCount":{"id":0}}`, i*10, i*10+9)}
	}
	var many []Action
	for i := range 400 {
		many = append(many, add(i))
	}
	v, err := tbl.Commit(ctx, 0, append(many, &CommitInfo{Operation: "WRITE"}))
	if err != nil {
		t.Fatal(err)
	}
	policy := CheckpointPolicy{Interval: 10}
	size := func(name string) int64 {
		info, err := os.Stat(filepath.Join(tbl.LogPath(), name))
		if err != nil {
			t.Fatal(err)
		}
		return info.Size()
	}
	var checkpoints []int64
	var commitBytes, checkpointBytes int64
	for i := 400; i < 700; i++ {
		if v, err = tbl.Commit(ctx, v, []Action{add(i), &CommitInfo{Operation: "WRITE"}}); err != nil {
			t.Fatal(err)
		}
		commitBytes += size(CommitFileName(v))
		fixed, err := tbl.CheckpointDue(v, CheckpointPolicy{Interval: 10, Fixed: true})
		if err != nil || fixed != (v%10 == 0) {
			t.Fatalf("fixed policy at %d: due %v, %v", v, fixed, err)
		}
		due, err := tbl.CheckpointDue(v, policy)
		if err != nil {
			t.Fatal(err)
		}
		if !due {
			continue
		}
		if n := len(checkpoints); n > 0 && v-checkpoints[n-1] < policy.Interval {
			t.Fatalf("checkpoint at %d, %d versions after the one at %d", v, v-checkpoints[n-1], checkpoints[n-1])
		}
		if err := tbl.Checkpoint(ctx, v); err != nil {
			t.Fatal(err)
		}
		if len(checkpoints) > 0 {
			checkpointBytes += size(CheckpointFileName(v))
		} else {
			commitBytes = 0 // the first checkpoint pays for the table's first commit
		}
		checkpoints = append(checkpoints, v)
	}
	if len(checkpoints) < 3 {
		t.Fatalf("checkpoints at %v: want at least 3 in 300 commits", checkpoints)
	}
	if len(checkpoints) >= 300/10 {
		t.Errorf("checkpoints at %v: as many as every 10 versions, though each outweighs 10 commits", checkpoints)
	}
	if checkpointBytes > commitBytes {
		t.Errorf("checkpoints after the first wrote %d bytes for %d bytes of commits", checkpointBytes, commitBytes)
	}
	t.Logf("%d checkpoints at %v: %d bytes for %d bytes of commits", len(checkpoints), checkpoints, checkpointBytes, commitBytes)
}
