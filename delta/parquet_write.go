package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/snappy"
)

// Compression codecs for data files.
const (
	CompressionSnappy = "snappy"
	CompressionZstd   = "zstd"
)

// snappyCodec is Parquet's SNAPPY codec with the standard snappy encoder.
// parquet-go's own codec encodes in the "better" mode of
// klauspost/compress, which took about a fifth of the writer's CPU time for
// files a few percent smaller; both write plain snappy blocks, which every
// reader decodes alike.
type snappyCodec struct{ snappy.Codec }

// Encode compresses src into one snappy block, in dst when it is large
// enough.
func (c *snappyCodec) Encode(dst, src []byte) ([]byte, error) {
	return s2.EncodeSnappy(dst, src), nil
}

// DefaultRowGroupRows is the default maximum number of rows in a row group.
const DefaultRowGroupRows = 128 * 1024

// WriteOptions configure a data file writer. The zero value writes snappy
// files with row groups of DefaultRowGroupRows rows.
type WriteOptions struct {
	// Compression is CompressionSnappy (the default) or CompressionZstd.
	Compression string
	// RowGroupRows is the maximum number of rows per row group.
	RowGroupRows int64
	// CreatedBy names the writer in the Parquet footer, such as
	// "lakeside version 1.2.0".
	CreatedBy string
	// Buffers, when set, lends the writer the column buffers of writers
	// closed before it and takes its own back when it is closed.
	Buffers *ColumnBuffers
	// NoWriteback turns off a performance trick: the writer then leaves
	// the whole file for the fsync that closes it to write out (see
	// tuning_writeback.go).
	NoWriteback bool
	// ExpectedRows, when more than zero, is how many rows the caller
	// expects to write into the file. Once the first rows are in (they
	// tell how many bytes a string of each column takes), the writer
	// makes room for that many rows, up to a row group, at once, instead
	// of doubling its room as rows come, which allocates, clears and
	// copies the columns several times over. It is a hint: more rows or
	// fewer may be written.
	ExpectedRows int64
}

// DataWriter writes one Parquet data file of a table with parquet-go and
// computes its add action. Rows are given in table schema order; the values
// of partition columns are not stored in the file (they must be nil or equal
// to the writer's partition values). Full row groups are encoded on other
// goroutines while the next rows come, so a writer holds the values of up to
// three row groups in memory. A DataWriter is not safe for concurrent use.
type DataWriter struct {
	root        string
	relPath     string
	absPath     string
	file        *os.File
	writer      *parquet.GenericWriter[any]
	full        *StructType
	data        *StructType
	dataIdx     []int
	partIdx     []int
	partStrings []*string
	// partSeen holds, per partition column, the last row value found equal
	// to the file's partition value, so that a run of equal values is
	// serialised and checked once.
	partSeen   []any
	partValues map[string]*string
	stats      *statsCollector
	columns    *columnarWriter
	closed     bool
	// row is the builder Row returns; fieldCols locates each field's
	// column for it (made at the first row).
	row       RowBuilder
	fieldCols []fieldColumn
}

// NewDataWriter creates a data file under the table root for rows of schema.
// partitionValues maps each partition column to its Go value (a missing key
// is null); the file goes in the hive-style directory of those values.
func NewDataWriter(root string, schema *StructType, partitionColumns []string, partitionValues map[string]any, opts WriteOptions) (*DataWriter, error) {
	w := &DataWriter{root: root, full: schema, partValues: map[string]*string{}}
	isPart := map[string]bool{}
	for _, pc := range partitionColumns {
		f, idx := schema.Field(pc)
		if f == nil {
			return nil, fmt.Errorf("new data writer: %w: partition column %q not in schema", ErrInvalidSchema, pc)
		}
		s, err := SerializePartitionValue(f.Type, partitionValues[pc])
		if err != nil {
			return nil, fmt.Errorf("new data writer: partition %q: %w", pc, err)
		}
		if s == nil && !f.Nullable {
			return nil, fmt.Errorf("new data writer: %w: null partition value for non-nullable %q", ErrInvalidValue, pc)
		}
		w.partValues[pc] = s
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
	w.data = &StructType{}
	for i, f := range schema.Fields {
		if !isPart[f.Name] {
			w.data.Fields = append(w.data.Fields, f)
			w.dataIdx = append(w.dataIdx, i)
		}
	}
	if len(w.data.Fields) == 0 {
		return nil, fmt.Errorf("new data writer: %w: no data columns besides partition columns", ErrInvalidSchema)
	}

	var codec compress.Codec
	ext := "snappy"
	switch strings.ToLower(opts.Compression) {
	case "", CompressionSnappy:
		codec = &snappyCodec{}
	case CompressionZstd:
		codec, ext = &parquet.Zstd, "zstd"
	default:
		return nil, fmt.Errorf("new data writer: unknown compression %q", opts.Compression)
	}
	rg := opts.RowGroupRows
	if rg <= 0 {
		rg = DefaultRowGroupRows
	}
	pschema, err := parquetSchema("spark_schema", w.data)
	if err != nil {
		return nil, fmt.Errorf("new data writer: %w", err)
	}
	var key string // names the data schema's columns in opts.Buffers
	if opts.Buffers != nil {
		if key, err = w.data.SchemaString(); err != nil {
			return nil, fmt.Errorf("new data writer: %w", err)
		}
	}
	id, err := newUUID()
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("part-00000-%s-c000.%s.parquet", id, ext)
	if len(partitionColumns) > 0 {
		w.relPath = partitionDir(partitionColumns, w.partValues) + "/" + name
	} else {
		w.relPath = name
	}
	w.absPath = filepath.Join(root, filepath.FromSlash(w.relPath))
	if err := mkdirAllSync(filepath.Dir(w.absPath)); err != nil {
		return nil, fmt.Errorf("new data writer: %w", err)
	}
	f, err := os.OpenFile(w.absPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("new data writer: %w", err)
	}
	w.file = f
	options := []parquet.WriterOption{
		pschema,
		parquet.Compression(codec),
		parquet.MaxRowsPerRowGroup(rg),
		parquet.DataPageVersion(1),
		// Each page's bounds go into the column index and the column
		// chunk's statistics; a copy in every page header, which
		// readers take from the index, cost a second pass over the
		// page's values (3% of writing a 1M-row insert to its two
		// tables).
		parquet.DataPageStatistics(false),
	}
	if opts.CreatedBy != "" {
		options = append(options, parquet.CreatedBy(opts.CreatedBy, "", ""))
	}
	for _, p := range flbaDecimalPaths(w.data) {
		options = append(options, parquet.SkipPageBounds(p...), parquet.SkipPageStatistics(p...))
	}
	var out io.Writer = &writeback{f: f}
	if opts.NoWriteback {
		out = f
	}
	w.writer = parquet.NewGenericWriter[any](out, options...)
	w.stats = newStatsCollector(w.data)
	w.columns = newColumnarWriter(w.writer, w.data, w.stats, rg, opts.Buffers, key)
	w.columns.expectRows = int(min(opts.ExpectedRows, rg))
	return w, nil
}

// Path returns the path of the file relative to the table root.
func (w *DataWriter) Path() string { return w.relPath }

// NumRows returns the number of rows written so far.
func (w *DataWriter) NumRows() int64 { return w.stats.numRecords }

// Write appends rows. On error the writer should be aborted.
func (w *DataWriter) Write(rows []Row) error {
	if w.closed {
		return errors.New("write rows: writer is closed")
	}
	for _, r := range rows {
		if len(r) != len(w.full.Fields) {
			return fmt.Errorf("write rows: %w: row has %d values, schema has %d columns", ErrInvalidValue, len(r), len(w.full.Fields))
		}
		for j, idx := range w.partIdx {
			if r[idx] == nil || samePartitionValue(w.partSeen[j], r[idx]) {
				continue
			}
			s, err := SerializePartitionValue(w.full.Fields[idx].Type, r[idx])
			if err != nil {
				return fmt.Errorf("write rows: column %q: %w", w.full.Fields[idx].Name, err)
			}
			if want := w.partStrings[j]; (s == nil) != (want == nil) || s != nil && *s != *want {
				return fmt.Errorf("write rows: %w: partition column %q differs from the file's partition value",
					ErrInvalidValue, w.full.Fields[idx].Name)
			}
			w.partSeen[j] = r[idx]
		}
		if err := w.columns.writeRow(r, w.dataIdx); err != nil {
			return err
		}
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
	if w.closed {
		return nil, errors.New("close data writer: already closed")
	}
	w.closed = true
	if err := w.columns.close(); err != nil {
		w.abort()
		return nil, err
	}
	w.columns.giveBack()
	if err := w.writer.Close(); err != nil {
		w.abort()
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	// The file must hold every row written: a row lost on its way to the
	// file is an error, never a smaller file.
	if n := w.writer.File().NumRows(); n != w.stats.numRecords {
		w.abort()
		return nil, fmt.Errorf("close data writer: %w: %d rows written, the file holds %d", ErrRowsLost, w.stats.numRecords, n)
	}
	if err := w.file.Sync(); err != nil {
		w.abort()
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	if err := w.file.Close(); err != nil {
		os.Remove(w.absPath)
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	if err := fsyncDir(filepath.Dir(w.absPath)); err != nil {
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	info, err := os.Stat(w.absPath)
	if err != nil {
		return nil, fmt.Errorf("close data writer: %w", err)
	}
	stats, err := w.stats.JSON()
	if err != nil {
		return nil, err
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
func (w *DataWriter) Abort() {
	if w.closed {
		return
	}
	w.closed = true
	w.abort()
}

func (w *DataWriter) abort() {
	w.columns.wait()
	w.file.Close()
	os.Remove(w.absPath)
}

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

// shredder turns nested rows into Parquet column values with repetition and
// definition levels (Dremel encoding).
type shredder struct {
	schema *StructType
	cols   [][]parquet.Value
	// buf holds the values of the rows returned, so that a batch of rows
	// costs few allocations.
	buf []parquet.Value
	// direct says that the walk of a row meets the values of each column
	// together and in column order (the schema has no map, and no array of
	// more than one leaf column), so they go straight into buf; otherwise
	// they are gathered per column in cols first (and write leaves them
	// there).
	direct bool
}

func newShredder(st *StructType) *shredder {
	return &shredder{schema: st, cols: make([][]parquet.Value, numLeaves(st)), direct: inColumnOrder(st)}
}

// isLeaf reports whether a column of type dt is a leaf column.
func isLeaf(dt DataType) bool {
	switch dt.(type) {
	case *StructType, *ArrayType, *MapType:
		return false
	}
	return true
}

// inColumnOrder reports whether shredding a value of dt yields the values
// of each of its leaf columns together, in column order.
func inColumnOrder(dt DataType) bool {
	switch t := dt.(type) {
	case *StructType:
		for _, f := range t.Fields {
			if !inColumnOrder(f.Type) {
				return false
			}
		}
	case *ArrayType:
		return numLeaves(t.ElementType) == 1 && inColumnOrder(t.ElementType)
	case *MapType:
		return false
	}
	return true
}

func numLeaves(dt DataType) int {
	switch t := dt.(type) {
	case *StructType:
		n := 0
		for _, f := range t.Fields {
			n += numLeaves(f.Type)
		}
		return n
	case *ArrayType:
		return numLeaves(t.ElementType)
	case *MapType:
		return numLeaves(t.KeyType) + numLeaves(t.ValueType)
	}
	return 1
}

// row shreds one row of normalised values.
func (s *shredder) row(values []any) (parquet.Row, error) {
	start := len(s.buf)
	if !s.direct {
		for i := range s.cols {
			s.cols[i] = s.cols[i][:0]
		}
	}
	col := 0
	for i, f := range s.schema.Fields {
		if err := s.write(f.Type, values[i], f.Nullable, col, 0, 0, 0); err != nil {
			s.buf = s.buf[:start]
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		col += numLeaves(f.Type)
	}
	if !s.direct {
		for _, c := range s.cols {
			s.buf = append(s.buf, c...)
		}
	}
	return parquet.Row(s.buf[start:len(s.buf):len(s.buf)]), nil
}

// put adds a value of column col to the row being shredded, with its
// levels. (Setting them in place costs a tenth of Value.Level, which copies
// the value around.)
func (s *shredder) put(col int, v parquet.Value, rep, def int) {
	dst := &s.buf
	if !s.direct {
		dst = &s.cols[col]
	}
	*dst = append(*dst, v)
	p := &(*dst)[len(*dst)-1]
	p.SetRepetitionLevel(rep)
	p.SetDefinitionLevel(def)
	p.SetColumnIndex(col)
}

func (s *shredder) nulls(dt DataType, col, rep, def int) {
	for c := col; c < col+numLeaves(dt); c++ {
		s.put(c, parquet.NullValue(), rep, def)
	}
}

func (s *shredder) write(dt DataType, v any, nullable bool, col, rep, def, depth int) error {
	if v == nil {
		if !nullable {
			return fmt.Errorf("%w: null for a non-nullable %s", ErrInvalidValue, dt)
		}
		s.nulls(dt, col, rep, def)
		return nil
	}
	if nullable {
		def++
	}
	switch t := dt.(type) {
	case *StructType:
		r := v.(Row)
		c := col
		for i, f := range t.Fields {
			if err := s.write(f.Type, r[i], f.Nullable, c, rep, def, depth); err != nil {
				return err
			}
			c += numLeaves(f.Type)
		}
	case *ArrayType:
		elems := v.([]any)
		if len(elems) == 0 {
			s.nulls(t.ElementType, col, rep, def)
			return nil
		}
		for i, e := range elems {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			if err := s.write(t.ElementType, e, t.ContainsNull, col, r, def+1, depth+1); err != nil {
				return err
			}
		}
	case *MapType:
		entries := v.([]MapEntry)
		if len(entries) == 0 {
			s.nulls(t, col, rep, def)
			return nil
		}
		kl := numLeaves(t.KeyType)
		for i, e := range entries {
			r := rep
			if i > 0 {
				r = depth + 1
			}
			if err := s.write(t.KeyType, e.Key, false, col, r, def+1, depth+1); err != nil {
				return err
			}
			if err := s.write(t.ValueType, e.Value, t.ValueContainsNull, col+kl, r, def+1, depth+1); err != nil {
				return err
			}
		}
	default:
		pv, err := leafValue(dt, v)
		if err != nil {
			return err
		}
		s.put(col, pv, rep, def)
	}
	return nil
}

// leafValue converts a normalised Go value to a Parquet value of the column's
// physical type.
func leafValue(dt DataType, v any) (parquet.Value, error) {
	switch x := v.(type) {
	case bool:
		return parquet.BooleanValue(x), nil
	case int8:
		return parquet.Int32Value(int32(x)), nil
	case int16:
		return parquet.Int32Value(int32(x)), nil
	case int32:
		return parquet.Int32Value(x), nil
	case int64:
		return parquet.Int64Value(x), nil
	case float32:
		return parquet.FloatValue(x), nil
	case float64:
		return parquet.DoubleValue(x), nil
	case string:
		return parquet.ByteArrayValue([]byte(x)), nil
	case []byte:
		return parquet.ByteArrayValue(x), nil
	case time.Time:
		if dt == TypeDate {
			return parquet.Int32Value(DaysSinceEpoch(x)), nil
		}
		return parquet.Int64Value(x.UnixMicro()), nil
	case Decimal:
		t, ok := dt.(DecimalType)
		if !ok {
			break
		}
		switch {
		case t.Precision <= 9:
			return parquet.Int32Value(int32(x.Unscaled.Int64())), nil
		case t.Precision <= 18:
			return parquet.Int64Value(x.Unscaled.Int64()), nil
		default:
			return parquet.FixedLenByteArrayValue(appendTwosComplement(nil, x.Unscaled, decimalByteLen(t.Precision))), nil
		}
	}
	return parquet.Value{}, fmt.Errorf("%w: %T for %s", ErrInvalidValue, v, dt)
}

// appendTwosComplement appends the big-endian two's complement of u in n
// bytes to dst.
func appendTwosComplement(dst []byte, u *big.Int, n int) []byte {
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	if u.Sign() >= 0 {
		u.FillBytes(dst[start:])
		return dst
	}
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*n))
	new(big.Int).Add(mod, u).FillBytes(dst[start:])
	return dst
}
