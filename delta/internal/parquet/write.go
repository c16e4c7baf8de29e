package parquet

import (
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

	"github.com/lakeside/lakeside/delta/internal/types"
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
// Row groups of this size, rather than one row group per file, let a file's
// first row groups encode while its last fill (see columnarWriter), leave
// less to encode once the last row is in, and keep a row group's columns
// small in memory; the agent's applier writes with it, and
// BenchmarkApplyLargeTransaction (agent/internal/applier) measures the
// choice against larger and smaller row groups.
const DefaultRowGroupRows = 32768

// DefaultRowGroupBytes is the default most bytes of string and binary
// values a row group holds: a row group of wide rows (documents, images)
// ends before DefaultRowGroupRows, so that the rows a writer holds in
// memory stay within a few times this size however wide they are.
const DefaultRowGroupBytes = 8 << 20

// WriteOptions configure a data file writer. The zero value writes snappy
// files with row groups of DefaultRowGroupRows rows.
type WriteOptions struct {
	// Compression is CompressionSnappy (the default) or CompressionZstd.
	Compression string
	// RowGroupRows is the maximum number of rows per row group.
	RowGroupRows int64
	// RowGroupBytes is the most bytes of string and binary values of
	// flat columns a row group holds (zero: DefaultRowGroupBytes); the
	// row that reaches it is the row group's last.
	RowGroupBytes int64
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
	// EncodeGate, when set, is shared with the writers side by side of
	// this one, which then encode one row group holding a huge value at
	// a time (see EncodeGate).
	EncodeGate *EncodeGate
	// Inline encodes each full row group on the goroutine that writes
	// the rows, not on goroutines of its own: for a writer whose CPU
	// must stay on its thread, as a compaction at low priority's does.
	Inline bool
}

// Writer writes one Parquet file with parquet-go and computes the Delta
// statistics of its rows. Rows are given in the order of the writer's
// schema, of which the file stores the fields the writer was made for: the
// values of the others are not looked at. Full row groups are encoded on
// other goroutines while the next rows come, so a writer holds the values of
// up to three row groups in memory (two with WriteOptions.Inline). A Writer
// is not safe for concurrent use.
type Writer struct {
	path    string
	file    *os.File
	writer  *parquet.GenericWriter[any]
	options []parquet.WriterOption
	opts    WriteOptions
	key     string
	rg      int64
	full    *types.StructType
	data    *types.StructType
	dataIdx []int
	stats   *statsCollector
	columns *columnarWriter
	pages   *pageBuffers
	closed  bool
	// row is the builder Row returns; fieldCols locates each field's
	// column for it (made at the first row).
	row       RowBuilder
	fieldCols []fieldColumn
}

// NewWriter returns a writer of rows of schema into a file that stores the
// fields of schema whose indices columns lists, in that order. It checks the
// schema and the options; Create then creates the file.
func NewWriter(schema *types.StructType, columns []int, opts WriteOptions) (*Writer, error) {
	w := &Writer{full: schema, dataIdx: columns, opts: opts, data: &types.StructType{}}
	for _, i := range columns {
		w.data.Fields = append(w.data.Fields, schema.Fields[i])
	}
	if len(w.data.Fields) == 0 {
		return nil, fmt.Errorf("new data writer: %w: no data columns", types.ErrInvalidSchema)
	}
	var codec compress.Codec
	switch strings.ToLower(opts.Compression) {
	case "", CompressionSnappy:
		codec = &snappyCodec{}
	case CompressionZstd:
		codec = &parquet.Zstd
	default:
		return nil, fmt.Errorf("new data writer: unknown compression %q", opts.Compression)
	}
	w.rg = opts.RowGroupRows
	if w.rg <= 0 {
		w.rg = DefaultRowGroupRows
	}
	pschema, err := parquetSchema("spark_schema", w.data)
	if err != nil {
		return nil, fmt.Errorf("new data writer: %w", err)
	}
	if opts.Buffers != nil {
		// The key names the data schema's columns in opts.Buffers.
		if w.key, err = w.data.SchemaString(); err != nil {
			return nil, fmt.Errorf("new data writer: %w", err)
		}
	}
	w.options = []parquet.WriterOption{
		pschema,
		parquet.Compression(codec),
		parquet.MaxRowsPerRowGroup(w.rg),
		parquet.DataPageVersion(1),
		// Each page's bounds go into the column index and the column
		// chunk's statistics; a copy in every page header, which
		// readers take from the index, cost a second pass over the
		// page's values (3% of writing a 1M-row insert to its two
		// tables).
		parquet.DataPageStatistics(false),
	}
	if opts.CreatedBy != "" {
		w.options = append(w.options, parquet.CreatedBy(opts.CreatedBy, "", ""))
	}
	for _, p := range flbaDecimalPaths(w.data) {
		w.options = append(w.options, parquet.SkipPageBounds(p...), parquet.SkipPageStatistics(p...))
	}
	return w, nil
}

// Create creates the file, at path, whose directory must exist. The writer
// takes rows once it is created.
func (w *Writer) Create(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("new data writer: %w", err)
	}
	w.path, w.file = path, f
	var out io.Writer = &writeback{f: f}
	if w.opts.NoWriteback {
		out = f
	}
	maxBytes := int(w.opts.RowGroupBytes)
	if maxBytes <= 0 {
		maxBytes = DefaultRowGroupBytes
	}
	w.pages = newPageBuffers(filepath.Dir(path), maxBytes)
	w.writer = parquet.NewGenericWriter[any](out, append(slices.Clip(w.options), parquet.ColumnPageBuffers(w.pages))...)
	w.stats = newStatsCollector(w.data)
	w.columns = newColumnarWriter(w.writer, w.data, w.stats, w.rg, w.opts.Buffers, w.key)
	w.columns.maxBytes = maxBytes
	w.columns.expectRows = int(min(w.opts.ExpectedRows, w.rg))
	w.columns.inline = w.opts.Inline
	w.columns.gate = w.opts.EncodeGate
	return nil
}

// NumRows returns the number of rows written so far.
func (w *Writer) NumRows() int64 { return w.stats.numRecords }

// Write appends rows. On error the writer should be aborted.
func (w *Writer) Write(rows []types.Row) error {
	if w.closed {
		return errors.New("write rows: writer is closed")
	}
	for _, r := range rows {
		if len(r) != len(w.full.Fields) {
			return fmt.Errorf("write rows: %w: row has %d values, schema has %d columns", types.ErrInvalidValue, len(r), len(w.full.Fields))
		}
		if err := w.columns.writeRow(r, w.dataIdx); err != nil {
			return err
		}
	}
	return nil
}

// Close finishes the file, flushes it to stable storage and returns its
// statistics as the stats string of an add action. The directory entry of
// the file is the caller's to flush. A file that cannot be finished is
// deleted.
func (w *Writer) Close() (string, error) {
	if w.closed {
		return "", errors.New("close data writer: already closed")
	}
	w.closed = true
	if err := w.columns.close(); err != nil {
		w.abort()
		return "", err
	}
	w.columns.giveBack()
	if err := w.writer.Close(); err != nil {
		w.abort()
		return "", fmt.Errorf("close data writer: %w", err)
	}
	// The file must hold every row written: a row lost on its way to the
	// file is an error, never a smaller file.
	if n := w.writer.File().NumRows(); n != w.stats.numRecords {
		w.abort()
		return "", fmt.Errorf("close data writer: %w: %d rows written, the file holds %d", ErrRowsLost, w.stats.numRecords, n)
	}
	if err := w.file.Sync(); err != nil {
		w.abort()
		return "", fmt.Errorf("close data writer: %w", err)
	}
	if err := w.file.Close(); err != nil {
		os.Remove(w.path)
		return "", fmt.Errorf("close data writer: %w", err)
	}
	return w.stats.JSON()
}

// Abort closes the writer and deletes the file.
func (w *Writer) Abort() {
	if w.closed {
		return
	}
	w.closed = true
	if w.file != nil {
		w.abort()
	}
}

func (w *Writer) abort() {
	w.columns.wait()
	w.file.Close()
	os.Remove(w.path)
}

// WriteFile writes rows of st to a new snappy Parquet file at path and
// flushes it to stable storage: a small file such as a checkpoint, whose
// rows are all at hand and need no statistics.
func WriteFile(path string, st *types.StructType, rows []types.Row) error {
	ps, err := parquetSchema("spark_schema", st)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	w := parquet.NewGenericWriter[any](f, ps, parquet.Compression(&parquet.Snappy), parquet.DataPageVersion(1))
	sh := newShredder(st)
	batch := make([]parquet.Row, 0, len(rows))
	for _, r := range rows {
		nv, err := types.Normalize(st, r)
		if err != nil {
			return err
		}
		pr, err := sh.row(nv.(types.Row))
		if err != nil {
			return err
		}
		batch = append(batch, pr)
	}
	if _, err := w.WriteRows(batch); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// shredder turns nested rows into Parquet column values with repetition and
// definition levels (Dremel encoding).
type shredder struct {
	schema *types.StructType
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

func newShredder(st *types.StructType) *shredder {
	return &shredder{schema: st, cols: make([][]parquet.Value, numLeaves(st)), direct: inColumnOrder(st)}
}

// isLeaf reports whether a column of type dt is a leaf column.
func isLeaf(dt types.DataType) bool {
	switch dt.(type) {
	case *types.StructType, *types.ArrayType, *types.MapType:
		return false
	}
	return true
}

// inColumnOrder reports whether shredding a value of dt yields the values
// of each of its leaf columns together, in column order.
func inColumnOrder(dt types.DataType) bool {
	switch t := dt.(type) {
	case *types.StructType:
		for _, f := range t.Fields {
			if !inColumnOrder(f.Type) {
				return false
			}
		}
	case *types.ArrayType:
		return numLeaves(t.ElementType) == 1 && inColumnOrder(t.ElementType)
	case *types.MapType:
		return false
	}
	return true
}

func numLeaves(dt types.DataType) int {
	switch t := dt.(type) {
	case *types.StructType:
		n := 0
		for _, f := range t.Fields {
			n += numLeaves(f.Type)
		}
		return n
	case *types.ArrayType:
		return numLeaves(t.ElementType)
	case *types.MapType:
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

func (s *shredder) nulls(dt types.DataType, col, rep, def int) {
	for c := col; c < col+numLeaves(dt); c++ {
		s.put(c, parquet.NullValue(), rep, def)
	}
}

func (s *shredder) write(dt types.DataType, v any, nullable bool, col, rep, def, depth int) error {
	if v == nil {
		if !nullable {
			return fmt.Errorf("%w: null for a non-nullable %s", types.ErrInvalidValue, dt)
		}
		s.nulls(dt, col, rep, def)
		return nil
	}
	if nullable {
		def++
	}
	switch t := dt.(type) {
	case *types.StructType:
		r := v.(types.Row)
		c := col
		for i, f := range t.Fields {
			if err := s.write(f.Type, r[i], f.Nullable, c, rep, def, depth); err != nil {
				return err
			}
			c += numLeaves(f.Type)
		}
	case *types.ArrayType:
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
	case *types.MapType:
		entries := v.([]types.MapEntry)
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
func leafValue(dt types.DataType, v any) (parquet.Value, error) {
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
		// parquet-go copies the bytes of the values it is given, and never
		// writes them.
		return parquet.ByteArrayValue(stringBytes(x)), nil
	case []byte:
		return parquet.ByteArrayValue(x), nil
	case time.Time:
		if dt == types.TypeDate {
			return parquet.Int32Value(types.DaysSinceEpoch(x)), nil
		}
		return parquet.Int64Value(x.UnixMicro()), nil
	case types.Decimal:
		t, ok := dt.(types.DecimalType)
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
	return parquet.Value{}, fmt.Errorf("%w: %T for %s", types.ErrInvalidValue, v, dt)
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
