package delta

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataFileNameAndAdd checks what the table makes of a data file: its
// name says its codec as Spark's do, and its add action has its size, time
// and dataChange.
func TestDataFileNameAndAdd(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := NewStructType(NewField("id", TypeLong, false))
	for _, codec := range []string{"", CompressionSnappy, CompressionZstd, "ZSTD"} {
		add, err := WriteDataFile(ctx, dir, st, nil, nil, []Row{{int64(1)}, {int64(2)}}, WriteOptions{Compression: codec})
		if err != nil {
			t.Fatalf("%q: %v", codec, err)
		}
		want := strings.ToLower(codec)
		if want == "" {
			want = CompressionSnappy
		}
		if !strings.HasSuffix(add.Path, "."+want+".parquet") {
			t.Errorf("%q: path %s does not name codec %s", codec, add.Path, want)
		}
		if add.Size <= 0 || add.ModificationTime <= 0 || !add.DataChange {
			t.Errorf("%q: bad add %+v", codec, add)
		}
		rows, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil || len(rows) != 2 {
			t.Errorf("%q: read %d rows, %v", codec, len(rows), err)
		}
	}
	if _, err := WriteDataFile(ctx, dir, st, nil, nil, nil, WriteOptions{Compression: "lz4"}); err == nil {
		t.Error("unknown codec accepted")
	}
}

// TestDataWriterPartitionValueMismatch checks that Write refuses a row whose
// partition column holds another value than the file's, after writing the
// rows before it.
func TestDataWriterPartitionValueMismatch(t *testing.T) {
	st := NewStructType(NewField("id", TypeLong, false), NewField("p", TypeString, true))
	w, err := NewDataWriter(t.TempDir(), st, []string{"p"}, map[string]any{"p": "a"}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	err = w.Write([]Row{{int64(1), "a"}, {int64(2), nil}, {int64(3), "b"}, {int64(4), "a"}})
	if !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("Write: %v, want ErrInvalidValue", err)
	}
	if n := w.NumRows(); n != 2 {
		t.Errorf("%d rows written before the bad one, want 2", n)
	}
}
