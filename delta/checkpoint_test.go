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

// TestWriteCheckpointReadsBack writes the checkpoint of a snapshot to a
// path of its own with WriteCheckpoint and reads it with
// ReadCheckpointFile: it holds the protocol, the metaData, every txn, every
// file and the tombstones, and what it returns for _last_checkpoint counts
// them.
func TestWriteCheckpointReadsBack(t *testing.T) {
	ctx := context.Background()
	schema := NewStructType(NewField("id", TypeLong, true), NewField("s", TypeString, true))
	tbl, err := Create(ctx, t.TempDir(), schema, nil, nil, nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	writeSimpleCommits(t, tbl, 7)
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cp.parquet")
	lc, err := WriteCheckpoint(ctx, snap, path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var adds, removes, txns, protos, metas int64
	var rows int64
	err = ReadCheckpointFile(ctx, path, func(acts []Action) error {
		for _, a := range acts {
			rows++
			switch a := a.(type) {
			case *Add:
				adds++
			case *Remove:
				removes++
			case *Txn:
				txns++
				if a.AppID != "app" || a.Version != 6 {
					t.Errorf("txn %s at %d, want app at 6", a.AppID, a.Version)
				}
			case *Protocol:
				protos++
			case *Metadata:
				metas++
				if a.ID != snap.Metadata().ID || a.SchemaString != snap.Metadata().SchemaString {
					t.Errorf("metaData %+v, want %+v", a, snap.Metadata())
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if adds != int64(snap.NumFiles()) || removes != int64(len(snap.Tombstones())) || removes == 0 || txns != 1 || protos != 1 || metas != 1 {
		t.Errorf("read %d adds, %d removes, %d txns, %d protocols, %d metaData; want %d adds, %d removes and one of each other",
			adds, removes, txns, protos, metas, snap.NumFiles(), len(snap.Tombstones()))
	}
	if lc.Version != snap.Version() || lc.Size != rows || *lc.NumOfAddFiles != adds || *lc.SizeInBytes != info.Size() {
		t.Errorf("_last_checkpoint %+v for %d actions, %d adds, %d bytes at version %d", lc, rows, adds, info.Size(), snap.Version())
	}
	if _, err := WriteCheckpoint(ctx, snap, path); err == nil {
		t.Error("WriteCheckpoint overwrote an existing file")
	}
	bad := filepath.Join(t.TempDir(), "bad.parquet")
	if err := os.WriteFile(bad, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReadCheckpointFile(ctx, bad, func([]Action) error { return nil }); err == nil {
		t.Error("ReadCheckpointFile read a file that is not Parquet")
	}
}
