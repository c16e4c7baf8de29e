package parquet

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/lakeside/lakeside/delta/internal/types"
)

func canonJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// testAdd is what the tests look at of a written file: its path, relative
// to the directory it was written in, and its stats string.
type testAdd struct {
	Path, Stats string
}

// testWriter is a Writer of a new file in a directory, which Close returns
// as a testAdd.
type testWriter struct {
	*Writer
	name string
}

// testFiles numbers the files the tests write.
var testFiles atomic.Int64

// newDataWriter creates a writer of a new file in dir for rows of st, which
// stores the fields of st but the partition columns, as a table's data
// writer does.
func newDataWriter(dir string, st *types.StructType, partitionColumns []string, opts WriteOptions) (*testWriter, error) {
	var columns []int
	for i, f := range st.Fields {
		if !slices.Contains(partitionColumns, f.Name) {
			columns = append(columns, i)
		}
	}
	w, err := NewWriter(st, columns, opts)
	if err != nil {
		return nil, err
	}
	codec := strings.ToLower(opts.Compression)
	if codec == "" {
		codec = CompressionSnappy
	}
	name := fmt.Sprintf("part-%05d.%s.parquet", testFiles.Add(1), codec)
	if err := w.Create(filepath.Join(dir, name)); err != nil {
		return nil, err
	}
	return &testWriter{Writer: w, name: name}, nil
}

// Path returns the path of the file relative to its directory.
func (w *testWriter) Path() string { return w.name }

// Close closes the file and returns its path and stats.
func (w *testWriter) Close() (*testAdd, error) {
	stats, err := w.Writer.Close()
	if err != nil {
		return nil, err
	}
	return &testAdd{Path: w.name, Stats: stats}, nil
}

// writeDataFile writes rows to a new file in dir, as newDataWriter's, in
// batches as delta.WriteDataFile does.
func writeDataFile(ctx context.Context, dir string, st *types.StructType, partitionColumns []string, rows []types.Row, opts WriteOptions) (*testAdd, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := newDataWriter(dir, st, partitionColumns, opts)
	if err != nil {
		return nil, err
	}
	const chunk = 4096
	for i := 0; i < len(rows); i += chunk {
		if err := ctx.Err(); err != nil {
			w.Abort()
			return nil, err
		}
		if err := w.Write(rows[i:min(i+chunk, len(rows))]); err != nil {
			w.Abort()
			return nil, err
		}
	}
	return w.Close()
}

// testStats is a stats string decoded, its numbers as json.Number.
type testStats struct {
	NumRecords int64          `json:"numRecords"`
	MinValues  map[string]any `json:"minValues,omitempty"`
	MaxValues  map[string]any `json:"maxValues,omitempty"`
	NullCount  map[string]any `json:"nullCount,omitempty"`
}

// parseStats decodes a stats string as delta.ParseStats does.
func parseStats(s string) (*testStats, error) {
	var st testStats
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&st); err != nil {
		return nil, err
	}
	return &st, nil
}
