package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

func TestPartitionedRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(
		NewField("v", TypeLong, true),
		NewField("s", TypeString, true),
		NewField("d", TypeDate, true),
		NewField("n", TypeInteger, true),
		NewField("dec", DecimalType{Precision: 10, Scale: 3}, true),
		NewField("ts", TypeTimestamp, true),
		NewField("flag", TypeBoolean, true),
	)
	parts := []string{"s", "d", "n", "dec", "ts", "flag"}
	tbl, err := Create(ctx, dir, schema, parts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := tbl.Snapshot(ctx)
	ts := time.Date(1969, 12, 31, 23, 59, 59, 123456000, time.UTC)
	values := []map[string]any{
		{"s": "a/b %20 =:x?#'\"", "d": DateFromDays(-1), "n": int32(-5), "dec": "-1.5", "ts": ts, "flag": true},
		{"s": "😈 über", "d": DateFromDays(20000), "n": 7, "dec": mustDec(t, "12.125"), "ts": ts.Add(time.Hour), "flag": false},
		{}, // all null
	}
	var want []Row
	var acts []Action
	for i, pv := range values {
		row := Row{int64(i), nil, nil, nil, nil, nil, nil}
		add, err := snap.WriteFile(ctx, pv, []Row{row}, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, fileKey(add.Path))); err != nil {
			t.Errorf("data file not at its decoded path: %v", err)
		}
		if strings.Contains(add.Stats, `"s"`) {
			t.Errorf("partition column in stats: %s", add.Stats)
		}
		full := Row{int64(i)}
		for _, f := range schema.Fields[1:] {
			v, err := types.Normalize(f.Type, pv[f.Name])
			if err != nil {
				t.Fatal(err)
			}
			full = append(full, v)
		}
		want = append(want, full)
		acts = append(acts, add)
		// Partition columns are not stored in the file.
		pr, err := file.OpenParquetFile(filepath.Join(dir, fileKey(add.Path)), false)
		if err != nil {
			t.Fatal(err)
		}
		if pr.MetaData().Schema.NumColumns() != 1 {
			t.Errorf("file has %d columns, want 1", pr.MetaData().Schema.NumColumns())
		}
		pr.Close()
	}
	if _, err := tbl.Commit(ctx, 0, acts); err != nil {
		t.Fatal(err)
	}
	s, _ := tbl.Snapshot(ctx)
	rows, err := s.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "partitioned", rows, want)
	if !strings.Contains(acts[2].(*Add).Path, "s="+hiveDefaultPartition+"/") {
		t.Errorf("null partition path %s", acts[2].(*Add).Path)
	}
	// A row whose partition value differs from the file's is refused.
	if _, err := s.WriteFile(ctx, map[string]any{"s": "x"}, []Row{{int64(1), "y", nil, nil, nil, nil, nil}}, WriteOptions{}); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("mismatched partition value: %v", err)
	}
	// So is one that follows rows with the file's value (a run of equal
	// values is checked once).
	run := []Row{{int64(1), "x", nil, nil, nil, nil, nil}, {int64(2), "x", nil, nil, nil, nil, nil}, {int64(3), "y", nil, nil, nil, nil, nil}}
	if _, err := s.WriteFile(ctx, map[string]any{"s": "x"}, run, WriteOptions{}); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("mismatched partition value after matching ones: %v", err)
	}
}

func TestInvalidValues(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, false), NewField("b", TypeByte, true),
		NewField("d", DecimalType{Precision: 4, Scale: 2}, true))
	cases := []Row{
		{nil, nil, nil},           // null in non-nullable column
		{int64(1), 300, nil},      // out of range
		{int64(1), nil, "123.45"}, // precision overflow
		{int64(1), nil, "1.234"},  // scale overflow
		{"x", nil, nil},           // wrong type
		{int64(1), nil},           // wrong arity
	}
	for i, r := range cases {
		if _, err := WriteDataFile(ctx, dir, schema, nil, nil, []Row{r}, WriteOptions{}); !errors.Is(err, ErrInvalidValue) {
			t.Errorf("case %d: %v, want ErrInvalidValue", i, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("failed writes left %d files", len(entries))
	}
}

func TestOpenErrorsAndLeftovers(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, t.TempDir()); !errors.Is(err, ErrNotATable) {
		t.Errorf("open empty dir: %v", err)
	}
	dir := t.TempDir()
	schema := NewStructType(NewField("id", TypeLong, true))
	tbl, err := Create(ctx, dir, schema, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Leftovers of a crash mid-commit or mid-checkpoint are ignored.
	for _, name := range []string{"." + CheckpointFileName(0) + ".x.tmp", "." + CommitFileName(1) + ".y.tmp"} {
		if err := os.WriteFile(filepath.Join(tbl.LogPath(), name), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := tbl.Snapshot(ctx)
	if err != nil || s.Version() != 0 {
		t.Fatalf("snapshot with leftovers: %v", err)
	}
	if _, err := tbl.Commit(ctx, 0, []Action{&CommitInfo{Operation: "WRITE"}}); err != nil {
		t.Fatal(err)
	}
	// Version 0 missing without a checkpoint is an error.
	os.Remove(filepath.Join(tbl.LogPath(), CommitFileName(0)))
	if _, err := tbl.Snapshot(ctx); !errors.Is(err, ErrCorruptLog) {
		t.Errorf("missing version 0: %v", err)
	}
}

func TestSchemaJSON(t *testing.T) {
	in := `{"type":"struct","fields":[{"name":"a","type":"integer","nullable":false,"metadata":{}},` +
		`{"name":"b","type":{"type":"struct","fields":[{"name":"d","type":"integer","nullable":false,"metadata":{}}]},"nullable":true,"metadata":{}},` +
		`{"name":"c","type":{"type":"array","elementType":"integer","containsNull":false},"nullable":true,"metadata":{}},` +
		`{"name":"e","type":{"type":"array","elementType":{"type":"struct","fields":[{"name":"d","type":"integer","nullable":false,"metadata":{}}]},"containsNull":true},"nullable":true,"metadata":{}},` +
		`{"name":"f","type":{"type":"map","keyType":"string","valueType":"string","valueContainsNull":true},"nullable":true,"metadata":{"comment":"x"}},` +
		`{"name":"g","type":"decimal(38,18)","nullable":true,"metadata":{}},{"name":"h","type":"timestamp_ntz","nullable":true,"metadata":{}}]}`
	st, err := ParseSchema(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.SchemaString()
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip:\n got %s\nwant %s", out, in)
	}
	if st.Fields[5].Type != (DecimalType{Precision: 38, Scale: 18}) {
		t.Errorf("decimal parsed as %v", st.Fields[5].Type)
	}
	if _, err := ParseSchema(`{"type":"struct","fields":[{"name":"x","type":{"type":"bogus"}}]}`); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("bogus type: %v", err)
	}
}

func TestTimestampNTZProtocol(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("at", TypeTimestampNTZ, true))
	tbl, err := Create(ctx, dir, schema, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := tbl.ReadCommit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var line []byte
	for _, a := range acts {
		if p, ok := a.(*Protocol); ok {
			line, _ = marshalAction(p)
		}
	}
	if string(line) != `{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["timestampNtz"],"writerFeatures":["timestampNtz"]}}` {
		t.Errorf("protocol %s", line)
	}
	s, _ := tbl.Snapshot(ctx)
	wall := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.FixedZone("X", 3600))
	add, err := s.WriteFile(ctx, nil, []Row{{wall}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 0, []Action{add}); err != nil {
		t.Fatal(err)
	}
	s, err = tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := rows[0][0].(time.Time); !got.Equal(time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)) {
		t.Errorf("ntz read back as %s", got)
	}
	if !strings.Contains(add.Stats, `"2024-01-02T03:04:05.000"`) {
		t.Errorf("ntz stats %s", add.Stats)
	}
}

// TestPartitionDirectoriesAreNotHidden writes files of partition columns
// whose names start with "_" or ".": their directories must not, as the
// protocol keeps data files out of hidden directories and Hadoop-style
// listers skip them, while the partition values keep the columns' names.
func TestPartitionDirectoriesAreNotHidden(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := NewStructType(NewField("v", TypeLong, true), NewField("_commit_date", TypeDate, true),
		NewField(".dot", TypeString, true), NewField("__", TypeString, true))
	parts := []string{"_commit_date", ".dot", "__"}
	tbl, err := Create(ctx, dir, schema, parts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := tbl.Snapshot(ctx)
	pv := map[string]any{"_commit_date": DateFromDays(20000), ".dot": "_x", "__": "y"}
	add, err := snap.WriteFile(ctx, pv, []Row{{int64(1), nil, nil, nil}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	segs := strings.Split(add.Path, "/")
	for _, seg := range segs[:len(segs)-1] {
		if strings.HasPrefix(seg, "_") || strings.HasPrefix(seg, ".") {
			t.Errorf("data file %s is under a hidden directory %q", add.Path, seg)
		}
	}
	if want := "commit_date=2024-10-04/dot=_x/p=y/"; !strings.HasPrefix(add.Path, want) {
		t.Errorf("data file at %s, want it under %s", add.Path, want)
	}
	if _, err := tbl.Commit(ctx, snap.Version(), []Action{add}); err != nil {
		t.Fatal(err)
	}
	snap, err = tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0][1] != DateFromDays(20000) || rows[0][2] != "_x" || rows[0][3] != "y" {
		t.Fatalf("rows %v, want the partition values back by column name", rows)
	}
}
