package deltatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lakeside/lakeside/delta"
)

// Check runs the conformance checks of the project's tests on the Delta
// table in the directory dir, and returns what it found wrong, joined:
//   - every version from the oldest commit in the log reads as a table;
//   - the protocol holds the features the table uses: deletion vectors
//     when a file has one, type widening when a column records a type
//     change, column mapping when the mode is name;
//   - in column mapping mode name every field, nested ones too, has an id
//     and a physical name, ids are unique and at most maxColumnId, and
//     physical names are unique within their struct;
//   - every file of the latest version exists with the size the log
//     says, its stats hold numRecords and name only columns of the schema
//     by their physical names, and its partition values are keyed by the
//     physical names of exactly the partition columns;
//   - every deletion vector file a file names exists;
//   - _last_checkpoint, when there, names a checkpoint in the log.
func Check(ctx context.Context, dir string) error {
	tbl, err := delta.Open(ctx, dir)
	if err != nil {
		return err
	}
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		return err
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for v := latest; v >= 0; v-- {
		if _, err := os.Stat(filepath.Join(tbl.LogPath(), delta.CommitFileName(v))); err != nil {
			break // before the oldest commit kept
		}
		if _, err := tbl.SnapshotAt(ctx, v); err != nil {
			fail("version %d does not read: %v", v, err)
		}
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	proto, md, schema := snap.Protocol(), snap.Metadata(), snap.Schema()
	mapped := snap.ColumnMappingMode() == delta.ColumnMappingName
	widened := false
	physical := map[string]bool{}
	ids := map[int64]string{}
	var walk func(prefix string, st *delta.StructType)
	walk = func(prefix string, st *delta.StructType) {
		names := map[string]bool{}
		for _, f := range st.Fields {
			name := prefix + f.Name
			if _, ok := f.Metadata[delta.TypeChangesKey]; ok {
				widened = true
			}
			if mapped {
				id, p := f.ColumnID(), f.PhysicalName()
				switch {
				case id <= 0 || !f.HasPhysicalName():
					fail("column %s has no id or physical name", name)
				case ids[id] != "":
					fail("columns %s and %s share id %d", ids[id], name, id)
				case names[p]:
					fail("column %s repeats the physical name %s in its struct", name, p)
				case id > md.MaxColumnID():
					fail("column %s has id %d over maxColumnId %d", name, id, md.MaxColumnID())
				}
				ids[id], names[p] = name, true
			}
			if prefix == "" {
				physical[f.PhysicalName()] = true
			}
			if sub, ok := f.Type.(*delta.StructType); ok {
				walk(name+".", sub)
			}
		}
	}
	walk("", schema)
	if widened && !delta.SupportsTypeWidening(proto) {
		fail("a column records a type change, and the protocol lacks typeWidening: %+v", proto)
	}
	partitions := map[string]bool{}
	for _, c := range md.PartitionColumns {
		f, _ := schema.Field(c)
		if f == nil {
			fail("partition column %s is not in the schema", c)
			continue
		}
		partitions[f.PhysicalName()] = true
	}
	for _, a := range snap.Files() {
		path, err := delta.ResolvePath(dir, a.Path)
		if err != nil {
			fail("file %s: %v", a.Path, err)
			continue
		}
		if info, err := os.Stat(path); err != nil {
			fail("file %s: %v", a.Path, err)
		} else if info.Size() != a.Size {
			fail("file %s has %d bytes, the log says %d", a.Path, info.Size(), a.Size)
		}
		if a.DeletionVector != nil {
			if !delta.SupportsDeletionVectors(proto) {
				fail("file %s has a deletion vector, and the protocol lacks deletionVectors", a.Path)
			}
			if a.DeletionVector.StorageType == delta.DeletionVectorStorageRelative {
				if p, err := a.DeletionVector.FilePath(dir); err != nil {
					fail("file %s: deletion vector: %v", a.Path, err)
				} else if _, err := os.Stat(p); err != nil {
					fail("file %s: deletion vector: %v", a.Path, err)
				}
			}
		}
		if len(a.PartitionValues) != len(partitions) {
			fail("file %s has partition values %v for the partition columns %v", a.Path, keys(a.PartitionValues), md.PartitionColumns)
		}
		for k := range a.PartitionValues {
			if !partitions[k] {
				fail("file %s has a partition value under %s, not a partition column's physical name", a.Path, k)
			}
		}
		var stats struct {
			NumRecords *int64                     `json:"numRecords"`
			MinValues  map[string]json.RawMessage `json:"minValues"`
			MaxValues  map[string]json.RawMessage `json:"maxValues"`
			NullCount  map[string]json.RawMessage `json:"nullCount"`
		}
		if err := json.Unmarshal([]byte(a.Stats), &stats); err != nil || stats.NumRecords == nil {
			fail("file %s: stats without numRecords: %q", a.Path, a.Stats)
			continue
		}
		for _, m := range []map[string]json.RawMessage{stats.MinValues, stats.MaxValues, stats.NullCount} {
			for k := range m {
				if !physical[k] {
					fail("file %s: stats name %s, not a column's physical name", a.Path, k)
				}
			}
		}
	}
	if data, err := os.ReadFile(filepath.Join(tbl.LogPath(), delta.LastCheckpointName)); err == nil {
		var lc struct {
			Version int64 `json:"version"`
			Parts   *int  `json:"parts"`
		}
		if err := json.Unmarshal(data, &lc); err != nil {
			fail("_last_checkpoint: %v", err)
		} else if lc.Parts == nil {
			if _, err := os.Stat(filepath.Join(tbl.LogPath(), delta.CheckpointFileName(lc.Version))); err != nil {
				fail("_last_checkpoint names version %d: %v", lc.Version, err)
			}
		}
	}
	return errors.Join(errs...)
}

func keys(m map[string]*string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
