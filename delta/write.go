package delta

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta/internal/parquet"
)

// The options and parts of data file writers are defined with the Parquet
// encoder, in delta/internal/parquet.
type (
	// WriteOptions configure a data file writer. The zero value writes
	// snappy files with row groups of DefaultRowGroupRows rows, or of
	// fewer rows whose strings and binaries reach DefaultRowGroupBytes.
	WriteOptions = parquet.WriteOptions
	// RowBuilder appends one row to a DataWriter value by value, each in
	// the physical form its column stores, without boxing any value in an
	// interface (see DataWriter.Row). Fields are numbered as in the
	// writer's schema; a partition column takes no value.
	RowBuilder = parquet.RowBuilder
	// ColumnBuffers lends the column buffers of closed data writers to the
	// next writers of the same data columns (WriteOptions.Buffers). It is
	// safe for concurrent use.
	ColumnBuffers = parquet.ColumnBuffers
	// EncodeGate lets the data writers that share it encode one row group
	// holding a huge value at a time (WriteOptions.EncodeGate), so that
	// writers side by side do not hold their copies of such a value at
	// once. It is safe for concurrent use.
	EncodeGate = parquet.EncodeGate
)

// Compression codecs for data files.
const (
	CompressionSnappy = parquet.CompressionSnappy
	CompressionZstd   = parquet.CompressionZstd
)

// DefaultRowGroupRows is the default maximum number of rows in a row group.
const DefaultRowGroupRows = parquet.DefaultRowGroupRows

// DefaultRowGroupBytes is the default most bytes of string and binary
// values in a row group.
const DefaultRowGroupBytes = parquet.DefaultRowGroupBytes

// StringStatsPrefixLength is the number of characters kept of string values
// in minValues and maxValues, as Spark does.
const StringStatsPrefixLength = parquet.StringStatsPrefixLength

// DataWriter writes one Parquet data file of a table with parquet-go and
// computes its add action. Rows are given in table schema order; the values
// of partition columns are not stored in the file (they must be nil or equal
// to the writer's partition values). Full row groups are encoded on other
// goroutines while the next rows come, so a writer holds the values of up to
// three row groups in memory. A DataWriter is not safe for concurrent use.
type DataWriter struct {
	file        *parquet.Writer
	relPath     string
	absPath     string
	full        *StructType
	partIdx     []int
	partStrings []*string
	// partSeen holds, per partition column, the last row value found equal
	// to the file's partition value, so that a run of equal values is
	// serialised and checked once.
	partSeen []any
	// partValues are the partition values of the add action, keyed by
	// the physical names of the partition columns.
	partValues map[string]*string
}

// NewDataWriter creates a data file under the table root for rows of schema.
// partitionValues maps each partition column to its Go value (a missing key
// is null); the file goes in the hive-style directory of those values.
// Columns are stored under their fields' physical names, with their column
// mapping ids as Parquet field ids, and the add action's stats and partition
// values are keyed by physical names; without column mapping metadata, the
// physical name of a field is its name. partitionColumns and
// partitionValues name partition columns by their display names, as the
// directory names do.
func NewDataWriter(root string, schema *StructType, partitionColumns []string, partitionValues map[string]any, opts WriteOptions) (*DataWriter, error) {
	return newDataWriter(root, "", "part", schema, partitionColumns, partitionValues, opts)
}

// newDataWriter is NewDataWriter for a file under dir (relative to the
// root, "" for the root) whose name starts with prefix.
func newDataWriter(root, dir, prefix string, schema *StructType, partitionColumns []string, partitionValues map[string]any, opts WriteOptions) (*DataWriter, error) {
	w := &DataWriter{full: schema, partValues: map[string]*string{}}
	dirValues := map[string]*string{}
	isPart := map[string]bool{}
	for _, pc := range partitionColumns {
		f, idx := schema.Field(pc)
		if f == nil {
			return nil, fmt.Errorf("new data writer: %w: partition column %q not in schema", ErrInvalidSchema, pc)
		}
		s, err := serializePartitionValue(f.Type, partitionValues[pc])
		if err != nil {
			return nil, fmt.Errorf("new data writer: partition %q: %w", pc, err)
		}
		if s == nil && !f.Nullable {
			return nil, fmt.Errorf("new data writer: %w: null partition value for non-nullable %q", ErrInvalidValue, pc)
		}
		w.partValues[f.PhysicalName()] = s
		dirValues[pc] = s
		w.partIdx = append(w.partIdx, idx)
		w.partStrings = append(w.partStrings, s)
		w.partSeen = append(w.partSeen, nil)
		isPart[pc] = true
	}
	for k := range partitionValues {
		if !isPart[k] {
			return nil, fmt.Errorf("new data writer: %w: %q is not a partition column", ErrInvalidSchema, k)
		}
	}
	var dataIdx []int
	for i, f := range schema.Fields {
		if !isPart[f.Name] {
			dataIdx = append(dataIdx, i)
		}
	}
	if len(dataIdx) == 0 {
		return nil, fmt.Errorf("new data writer: %w: no data columns besides partition columns", ErrInvalidSchema)
	}
	file, err := parquet.NewWriter(schema, dataIdx, opts)
	if err != nil {
		return nil, err
	}
	id, err := newUUID()
	if err != nil {
		return nil, err
	}
	// The codec, which the writer accepted, names the file as Spark's do.
	ext := strings.ToLower(opts.Compression)
	if ext == "" {
		ext = CompressionSnappy
	}
	name := fmt.Sprintf("%s-00000-%s-c000.%s.parquet", prefix, id, ext)
	if len(partitionColumns) > 0 {
		w.relPath = partitionDir(partitionColumns, dirValues) + "/" + name
	} else {
		w.relPath = name
	}
	if dir != "" {
		w.relPath = dir + "/" + w.relPath
	}
	w.absPath = filepath.Join(root, filepath.FromSlash(w.relPath))
	if err := mkdirAllSync(filepath.Dir(w.absPath)); err != nil {
		return nil, fmt.Errorf("new data writer: %w", err)
	}
	if err := file.Create(w.absPath); err != nil {
		return nil, err
	}
	w.file = file
	return w, nil
}

// Path returns the path of the file relative to the table root.
func (w *DataWriter) Path() string { return w.relPath }

// NumRows returns the number of rows written so far.
func (w *DataWriter) NumRows() int64 { return w.file.NumRows() }

// Row starts a row. The builder is the writer's own: the next call of Row
// starts the next row, and Write must not be called before End.
func (w *DataWriter) Row() *RowBuilder { return w.file.Row() }

// Write appends rows. On error the writer should be aborted.
func (w *DataWriter) Write(rows []Row) error {
	if len(w.partIdx) == 0 {
		return w.file.Write(rows)
	}
	for i, r := range rows {
		if err := w.checkPartition(r); err != nil {
			// The rows before the bad one are written, as one by one.
			if werr := w.file.Write(rows[:i]); werr != nil {
				return werr
			}
			return err
		}
	}
	return w.file.Write(rows)
}

// checkPartition checks that the row's values of partition columns are nil
// or the file's partition values.
func (w *DataWriter) checkPartition(r Row) error {
	if len(r) != len(w.full.Fields) {
		return fmt.Errorf("write rows: %w: row has %d values, schema has %d columns", ErrInvalidValue, len(r), len(w.full.Fields))
	}
	for j, idx := range w.partIdx {
		if r[idx] == nil || samePartitionValue(w.partSeen[j], r[idx]) {
			continue
		}
		s, err := serializePartitionValue(w.full.Fields[idx].Type, r[idx])
		if err != nil {
			return fmt.Errorf("write rows: column %q: %w", w.full.Fields[idx].Name, err)
		}
		if want := w.partStrings[j]; (s == nil) != (want == nil) || s != nil && *s != *want {
			return fmt.Errorf("write rows: %w: partition column %q differs from the file's partition value",
				ErrInvalidValue, w.full.Fields[idx].Name)
		}
		w.partSeen[j] = r[idx]
	}
	return nil
}

// samePartitionValue reports whether v is known to serialise as seen does:
// both are the same value of a comparable scalar type.
func samePartitionValue(seen, v any) bool {
	switch v.(type) {
	case string, bool, int8, int16, int32, int64, float32, float64, time.Time:
		return seen == v
	}
	return false
}

// Close finishes the file, flushes it to stable storage and returns its add
// action (dataChange true, with stats).
func (w *DataWriter) Close() (*Add, error) {
	stats, err := w.file.Close()
	if err != nil {
		return nil, err
	}
	if err := fsyncDir(filepath.Dir(w.absPath)); err != nil {
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	info, err := os.Stat(w.absPath)
	if err != nil {
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	return &Add{
		Path:             encodeLogPath(w.relPath),
		PartitionValues:  w.partValues,
		Size:             info.Size(),
		ModificationTime: info.ModTime().UnixMilli(),
		DataChange:       true,
		Stats:            stats,
	}, nil
}

// Abort closes the writer and deletes the file.
func (w *DataWriter) Abort() { w.file.Abort() }

// WriteDataFile writes rows (in schema order) to one new data file of the
// table at root and returns its add action. See NewDataWriter.
func WriteDataFile(ctx context.Context, root string, schema *StructType, partitionColumns []string,
	partitionValues map[string]any, rows []Row, opts WriteOptions) (*Add, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := NewDataWriter(root, schema, partitionColumns, partitionValues, opts)
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

// WriteFile writes rows to a new data file using the snapshot's schema and
// partition columns, and returns its add action.
func (s *Snapshot) WriteFile(ctx context.Context, partitionValues map[string]any, rows []Row, opts WriteOptions) (*Add, error) {
	return WriteDataFile(ctx, s.table.root, s.schema, s.metadata.PartitionColumns, partitionValues, rows, opts)
}
