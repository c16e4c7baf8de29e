package delta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lakeside/lakeside/delta/internal/parquet"
)

// addFixtureSeeds adds the files of the reference tables that match
// pattern (relative to refDir) to f's seeds: what Spark, the Delta
// project's generators and delta-kernel-rs wrote, besides the seeds of
// testdata/fuzz, which are this package's own output and edge cases.
func addFixtureSeeds(f *testing.F, pattern string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join(refDir, pattern))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no reference files %s: %v", pattern, err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// fuzzLogBase is version 0 of the table FuzzParseActions reads its input
// as version 1 of: a protocol, a metaData and one file.
const fuzzLogBase = `{"commitInfo":{"timestamp":1700000000000,"operation":"CREATE TABLE","operationParameters":{}}}
{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["deletionVectors"],"writerFeatures":["deletionVectors"]}}
{"metaData":{"id":"6b5d3c1e-0f7a-4e0b-9a55-1b6a1d0e2f10","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"id\",\"type\":\"long\",\"nullable\":false,\"metadata\":{}},{\"name\":\"p\",\"type\":\"string\",\"nullable\":true,\"metadata\":{}}]}","partitionColumns":["p"],"configuration":{"delta.enableDeletionVectors":"true"},"createdTime":1700000000000}}
{"add":{"path":"p=a/part-00000.parquet","partitionValues":{"p":"a"},"size":100,"modificationTime":1700000000000,"dataChange":true,"stats":"{\"numRecords\":3}"}}
`

// encodeActions writes actions as a commit file holds them.
func encodeActions(t *testing.T, acts []Action) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, a := range acts {
		line, err := marshalAction(a)
		if err != nil {
			t.Fatalf("marshal %T %+v read from the log: %v", a, a, err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// FuzzParseActions reads arbitrary bytes as a commit file
// (_delta_log/N.json). parseActions must never panic and fails only with
// an error wrapping ErrCorruptLog. What it reads must write back
// (marshalAction) and read again to the same actions, written the same;
// their stats, schema and deletion vector descriptors must read without
// panicking (an inline deletion vector decodes, or fails with
// ErrCorruptDeletionVector); and a table whose version 1 is the input
// must give a snapshot or an error, never a panic.
func FuzzParseActions(f *testing.F) {
	addFixtureSeeds(f, "*/*/_delta_log/*.json")
	addFixtureSeeds(f, "dat/*/delta/_delta_log/*.json")
	dir := f.TempDir()
	logDir := filepath.Join(dir, LogDirName)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, CommitFileName(0)), []byte(fuzzLogBase), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		acts, err := parseActions(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptLog) || err.Error() == "" {
				t.Fatalf("error %q does not wrap ErrCorruptLog", err)
			}
			return
		}
		for _, a := range acts {
			checkActionReads(t, a)
		}
		encoded := encodeActions(t, acts)
		again, err := parseActions(encoded)
		if err != nil {
			t.Fatalf("actions written back do not read: %v\n%s", err, encoded)
		}
		if len(again) != len(acts) {
			t.Fatalf("%d actions written back read as %d:\n%s", len(acts), len(again), encoded)
		}
		if reencoded := encodeActions(t, again); !bytes.Equal(reencoded, encoded) {
			t.Fatalf("actions written back read differently:\n%s\nthen\n%s", encoded, reencoded)
		}

		if err := os.WriteFile(filepath.Join(logDir, CommitFileName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := New(dir).SnapshotAt(context.Background(), 1)
		if err != nil {
			return
		}
		if s.Version() != 1 || s.Protocol() == nil || s.Metadata() == nil || s.Schema() == nil {
			t.Fatalf("snapshot of version %d, protocol %v, metadata %v, schema %v", s.Version(), s.Protocol(), s.Metadata(), s.Schema())
		}
		for _, add := range s.Files() {
			if add == nil {
				t.Fatal("nil file in a snapshot")
			}
		}
		s.Tombstones()
		s.Transactions()
	})
}

// checkActionReads reads what an action holds in strings of its own: the
// stats and deletion vector of an add, the schema of a metaData.
func checkActionReads(t *testing.T, a Action) {
	t.Helper()
	var dvs []*DeletionVectorDescriptor
	switch a := a.(type) {
	case *Add:
		if a.Stats != "" {
			ParseStats(a.Stats)
		}
		dvs = append(dvs, a.DeletionVector)
		a.HasDeletionVector()
	case *Remove:
		dvs = append(dvs, a.DeletionVector)
	case *Metadata:
		a.Schema()
	case nil:
		t.Fatal("nil action")
	}
	for _, d := range dvs {
		if d == nil {
			continue
		}
		checkDescriptorReads(t, d)
	}
}

// checkDescriptorReads reads a deletion vector descriptor: its id, its
// file's path, and an inline one's bitmap. No file is read: the path of an
// absolute one (p) may name any file.
func checkDescriptorReads(t *testing.T, d *DeletionVectorDescriptor) {
	t.Helper()
	d.UniqueID()
	d.clone()
	d.FilePath("/table")
	if d.StorageType != DeletionVectorStorageInline {
		return
	}
	dv, err := ReadDeletionVector("/table", d)
	if err != nil {
		if !errors.Is(err, ErrCorruptDeletionVector) {
			t.Fatalf("inline deletion vector %+v: error %v does not wrap ErrCorruptDeletionVector", d, err)
		}
		return
	}
	if dv.Cardinality() != d.Cardinality {
		t.Fatalf("inline deletion vector %+v read with %d rows", d, dv.Cardinality())
	}
}

// FuzzParseSchema reads arbitrary text as the schemaString of a metaData
// action. ParseSchema must never panic; a schema it reads must write
// (SchemaString) and read back to the same schema, written the same.
func FuzzParseSchema(f *testing.F) {
	schemas := map[string]bool{}
	paths, _ := filepath.Glob(filepath.Join(refDir, "*/*/_delta_log/*.json"))
	more, _ := filepath.Glob(filepath.Join(refDir, "dat/*/delta/_delta_log/*.json"))
	for _, p := range append(paths, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		acts, err := parseActions(data)
		if err != nil {
			continue // a reference table of a corrupt log
		}
		for _, a := range acts {
			if md, ok := a.(*Metadata); ok && !schemas[md.SchemaString] {
				schemas[md.SchemaString] = true
				f.Add(md.SchemaString)
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseSchema(s)
		if err != nil {
			return
		}
		out, err := st.SchemaString()
		if err != nil {
			// A schema the reader accepts but the writer refuses.
			t.Fatalf("schema %q read as %v does not write: %v", s, st, err)
		}
		back, err := ParseSchema(out)
		if err != nil {
			t.Fatalf("schema %q written as %q does not read: %v", s, out, err)
		}
		again, err := back.SchemaString()
		if err != nil || again != out {
			t.Fatalf("schema %q written as %q, read and written again as %q, %v", s, out, again, err)
		}
	})
}

// FuzzReadLastCheckpoint reads arbitrary bytes as _last_checkpoint.
// readLastCheckpoint must never panic and fails only with an error
// wrapping ErrCorruptLog; what it reads has a version of 0 or more, and
// writes (as Table.Checkpoint does) and reads back the same.
func FuzzReadLastCheckpoint(f *testing.F) {
	addFixtureSeeds(f, "*/*/_delta_log/_last_checkpoint")
	addFixtureSeeds(f, "dat/*/delta/_delta_log/_last_checkpoint")
	logDir := f.TempDir()
	path := filepath.Join(logDir, LastCheckpointName)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		lc, err := readLastCheckpoint(logDir)
		if err != nil {
			if !errors.Is(err, ErrCorruptLog) {
				t.Fatalf("error %v does not wrap ErrCorruptLog", err)
			}
			return
		}
		if lc == nil || lc.Version < 0 {
			t.Fatalf("read %+v", lc)
		}
		out, err := json.Marshal(lc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := readLastCheckpoint(logDir)
		if err != nil || !reflect.DeepEqual(back, lc) {
			t.Fatalf("%s written back as %s reads as %+v, %v; want %+v", data, out, back, err, lc)
		}
	})
}

// FuzzReadCheckpoint reads arbitrary bytes as a checkpoint file (Parquet,
// read with checkpointSchema as Table.readCheckpoint does): reading must
// never panic, and the rows it gives must convert to actions that replay.
func FuzzReadCheckpoint(f *testing.F) {
	addFixtureSeeds(f, "*/*/_delta_log/*.checkpoint.parquet")
	addFixtureSeeds(f, "dat/*/delta/_delta_log/*.checkpoint.parquet")
	path := filepath.Join(f.TempDir(), CheckpointFileName(1))
	schema := checkpointSchema()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.ReadFile(context.Background(), path, schema)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		acts, err := checkpointActions(rows)
		if err != nil {
			return
		}
		for _, a := range acts {
			checkActionReads(t, a)
		}
		newReplayState().apply(acts)
		encodeActions(t, acts)
	})
}
