package parquet

import (
	"fmt"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// columnarWriter writes rows column by column. Write appends each value of
// a leaf column, in its Parquet physical form, to a typed slice of its
// column, and keeps the normalised values of struct, array and map columns
// for the shredder; a full row group is then encoded by a goroutine of its
// own while the next ones fill, so that the conversion of Go values and the
// Parquet encoding share the cores. Up to encodingRowGroups row groups
// encode at once, each into a parquet.ConcurrentRowGroupWriter of its own,
// and they are committed to the file in order. Once a row group fails, the
// writer keeps returning its error.
type columnarWriter struct {
	writer  *parquet.GenericWriter[any]
	schema  *types.StructType
	stats   *statsCollector
	maxRows int
	// maxBytes is the most bytes of byte array values a row group holds
	// (see WriteOptions.RowGroupBytes).
	maxBytes int
	// expectRows is how many rows the caller expects (at most maxRows),
	// or zero (see WriteOptions.ExpectedRows).
	expectRows int
	// inline encodes row groups on the caller's goroutine (see
	// WriteOptions.Inline).
	inline bool
	// filling holds the rows of the row group being written.
	filling *rowGroupColumns
	// encoding are the row groups being encoded, oldest first; free the
	// columns of encoded ones, for reuse.
	encoding []*encodeJob
	free     []*rowGroupColumns
	// err is the first error of a row group.
	err error
	// buffers lends columns from closed writers of the same data schema
	// (key), and takes this one's back (see newColumnarWriter).
	buffers *ColumnBuffers
	key     string
	// gate, when set, is entered to encode a row group holding a huge
	// value (see WriteOptions.EncodeGate).
	gate *EncodeGate
}

// encodingRowGroups is the most row groups a writer encodes at once; with
// the one filling, it bounds the rows a writer holds in memory.
const encodingRowGroups = 2

// rowGroupColumns are the columns of one row group and what encoding them
// needs.
type rowGroupColumns struct {
	// cols are the leaf fields of the schema, nested the others.
	cols   []*flatColumn
	nested []*nestedColumn
	// byteCols are the columns of cols that hold byte array values (see
	// dataBytes), which a row group is full of at maxBytes.
	byteCols []*flatColumn
	rows     int
	// capRows is how many rows the columns have room for.
	capRows int
	// rg writes the row group into the file.
	rg *parquet.ConcurrentRowGroupWriter
	// buf holds the Parquet values of a slice of one column.
	buf []parquet.Value
}

// encodeJob is a row group being encoded.
type encodeJob struct {
	g *rowGroupColumns
	// keepBytes is the most room for byte array values a column of g
	// keeps once emptied (see flatColumn.shrink).
	keepBytes int
	// gate is the writer's EncodeGate, or nil.
	gate *EncodeGate
	// err is the job's error, to be read once committed is closed.
	err error
	// committed is closed when the row group is in the file, or failed.
	committed chan struct{}
}

// newColumnarWriter returns a writer of row groups of at most maxRows rows
// into w. With buffers, it borrows its columns from those of closed writers
// of the same data schema (key), and gives them back once closed.
func newColumnarWriter(w *parquet.GenericWriter[any], st *types.StructType, stats *statsCollector, maxRows int64, buffers *ColumnBuffers, key string) *columnarWriter {
	c := &columnarWriter{writer: w, schema: st, stats: stats, maxRows: int(maxRows), buffers: buffers, key: key}
	if g := buffers.take(key); g != nil {
		g.rg = w.BeginRowGroup()
		c.filling = g
		for range encodingRowGroups {
			if g = buffers.take(key); g == nil {
				break
			}
			c.free = append(c.free, g)
		}
	} else {
		c.filling = c.newRowGroupColumns(nil)
	}
	return c
}

// giveBack gives the columns of a closed writer to its buffers, if any.
func (c *columnarWriter) giveBack() {
	if c.buffers == nil {
		return
	}
	gs := c.free
	if c.filling != nil {
		gs = append(gs, c.filling)
	}
	c.free, c.filling = nil, nil
	c.buffers.give(c.key, gs)
}

// newRowGroupColumns returns empty columns, with room for as many values as
// like holds when it is not nil.
func (c *columnarWriter) newRowGroupColumns(like *rowGroupColumns) *rowGroupColumns {
	g := &rowGroupColumns{rg: c.writer.BeginRowGroup()}
	leaf := 0
	for pos, f := range c.schema.Fields {
		if isLeaf(f.Type) {
			col := newFlatColumn(f, pos, leaf)
			g.cols = append(g.cols, col)
			if col.holdsBytes() {
				g.byteCols = append(g.byteCols, col)
			}
		} else {
			g.nested = append(g.nested, &nestedColumn{field: f, pos: pos, leaf: leaf, shred: newFieldShredder(f)})
		}
		leaf += numLeaves(f.Type)
	}
	if like != nil {
		// The bytes of the last row may take like past maxBytes: they are
		// not those of every row group.
		for i, col := range g.cols {
			col.reserve(like.rows, min(len(like.cols[i].data), c.maxBytes))
		}
		for _, col := range g.nested {
			col.reserve(like.rows)
		}
		g.capRows = like.rows
	}
	return g
}

// minGrowRows is the fewest rows the columns of a row group make room for.
const minGrowRows = 1024

// grow doubles the rows the columns have room for, up to maxRows, and
// their room for byte array values in proportion. (Appending would grow
// large slices by a quarter at a time, allocating and copying them several
// times over.) Once the columns hold minGrowRows rows, it makes room for
// expect rows at once, when more are expected. It makes room for no more
// rows than rows like those in hold in maxBytes of byte array values.
func (g *rowGroupColumns) grow(maxRows, expect, maxBytes int) {
	rows := min(max(2*g.capRows, minGrowRows), maxRows)
	if g.capRows >= minGrowRows {
		rows = max(rows, min(expect, maxRows))
	}
	if perRow := g.dataBytes() / max(g.rows, 1); perRow > 0 {
		rows = max(g.rows+1, min(rows, maxBytes/perRow+1))
	}
	for _, col := range g.cols {
		dataBytes := 0
		if g.rows > 0 {
			dataBytes = len(col.data) / g.rows * rows
		}
		col.reserve(rows, dataBytes)
	}
	for _, col := range g.nested {
		col.reserve(rows)
	}
	g.capRows = rows
}

// writeRow appends one row, whose value of column i is r[idx[i]]. On error
// the row is not written.
func (c *columnarWriter) writeRow(r types.Row, idx []int) error {
	if c.err != nil {
		return c.err
	}
	g := c.filling
	if g.rows == g.capRows {
		g.grow(c.maxRows, c.expectRows, c.maxBytes)
	}
	for i, col := range g.cols {
		if err := col.add(r[idx[col.pos]]); err != nil {
			for _, done := range g.cols[:i] {
				done.truncate(g.rows)
			}
			return err
		}
	}
	for i, col := range g.nested {
		if err := col.add(r[idx[col.pos]]); err != nil {
			g.truncate(g.rows, i)
			return err
		}
	}
	g.rows++
	c.stats.numRecords++
	if c.full(g) {
		return c.flush()
	}
	return nil
}

// full reports whether the row group g takes no more rows: it has maxRows
// rows, or maxBytes bytes of byte array values.
func (c *columnarWriter) full(g *rowGroupColumns) bool {
	return g.rows >= c.maxRows || g.dataBytes() >= c.maxBytes
}

// hasHuge reports whether a flat column of the row group holds a huge
// value.
func (g *rowGroupColumns) hasHuge() bool {
	for _, col := range g.byteCols {
		if len(col.huge) > 0 {
			return true
		}
	}
	return false
}

// dataBytes returns the bytes of the byte array values of the row group's
// flat columns, huge ones included. A full writer asks after every row: it
// sums the columns that hold such values only.
func (g *rowGroupColumns) dataBytes() int {
	n := 0
	for _, col := range g.byteCols {
		n += len(col.data) + col.hugeBytes
	}
	return n
}

// capBytes returns the memory the row group's columns take, by the room
// their slices have.
func (g *rowGroupColumns) capBytes() int {
	n := 0
	for _, col := range g.cols {
		n += col.capBytes()
	}
	for _, col := range g.nested {
		n += cap(col.values) * int(unsafe.Sizeof(any(nil)))
	}
	return n
}

// flush starts encoding the rows written since the last flush, once fewer
// than encodingRowGroups row groups are encoding, and takes columns for the
// next rows.
func (c *columnarWriter) flush() error { return c.encode(true) }

// encode starts encoding the rows written since the last flush; more says
// whether more rows follow, which then need columns of their own.
func (c *columnarWriter) encode(more bool) error {
	g := c.filling
	if c.err != nil || g == nil || g.rows == 0 {
		return c.err
	}
	if len(c.encoding) == encodingRowGroups {
		if err := c.waitOldest(); err != nil {
			return err
		}
	}
	switch n := len(c.free); {
	case !more:
		c.filling = nil
	case n > 0:
		c.filling, c.free = c.free[n-1], c.free[:n-1]
		if c.filling.rg == nil { // borrowed (see newColumnarWriter)
			c.filling.rg = c.writer.BeginRowGroup()
		}
	default:
		c.filling = c.newRowGroupColumns(g)
	}
	var prev *encodeJob
	if n := len(c.encoding); n > 0 {
		prev = c.encoding[n-1]
	}
	job := &encodeJob{g: g, keepBytes: keepBytesFactor * c.maxBytes, gate: c.gate, committed: make(chan struct{})}
	c.encoding = append(c.encoding, job)
	if c.inline {
		job.run(prev, c.stats)
		return c.waitOldest()
	}
	go job.run(prev, c.stats)
	return nil
}

// keepBytesFactor times maxBytes is the most room for byte array values
// a column keeps for the next row groups: room its row groups take (up to
// maxBytes, and the bytes of the row that reaches it) with some to spare,
// but not room grown for values far longer than the others.
const keepBytesFactor = 2

// waitOldest waits for the oldest row group being encoded and returns the
// writer's error.
func (c *columnarWriter) waitOldest() error {
	j := c.encoding[0]
	<-j.committed
	c.encoding = c.encoding[1:]
	c.free = append(c.free, j.g)
	if c.err == nil {
		c.err = j.err
	}
	return c.err
}

// wait waits for the row groups being encoded and returns the writer's
// error.
func (c *columnarWriter) wait() error {
	for len(c.encoding) > 0 {
		c.waitOldest()
	}
	return c.err
}

// close encodes the remaining rows and waits until every row group is in
// the file. The writer takes no more rows.
func (c *columnarWriter) close() error {
	c.encode(false)
	return c.wait()
}

// run encodes the row group, then, once prev (if any) is committed, adds
// its statistics to the file's and commits it, and empties the columns for
// reuse.
func (j *encodeJob) run(prev *encodeJob, stats *statsCollector) {
	defer close(j.committed)
	g := j.g
	defer g.reset(j.keepBytes)
	leave := j.gate.enter(g)
	bounds, err := g.encode()
	leave()
	if prev != nil {
		<-prev.committed
		if prev.err != nil {
			j.err = prev.err
			return
		}
	}
	if err != nil {
		j.err = err
		return
	}
	for i, b := range bounds {
		b.addTo(stats.cols[i])
	}
	if _, err := g.rg.Commit(); err != nil {
		j.err = fmt.Errorf("write rows: %w", err)
	}
}

// encodeChunkRows is how many rows of a column go to parquet-go at a time:
// it flushes a page only between such calls.
const encodeChunkRows = 1024

// encode writes the pages of the row group and returns the statistics of
// its columns, by field.
func (g *rowGroupColumns) encode() ([]colBounds, error) {
	writers := g.rg.ColumnWriters()
	bounds := make([]colBounds, len(g.cols)+len(g.nested))
	for _, col := range g.cols {
		bounds[col.pos] = col.bounds(g.rows)
		k := 0
		for from := 0; from < g.rows; from += encodeChunkRows {
			to := min(from+encodeChunkRows, g.rows)
			g.buf, k = col.appendValues(g.buf[:0], from, to, k)
			if _, err := writers[col.leaf].WriteRowValues(g.buf); err != nil {
				return nil, errColumn(col.field, err)
			}
		}
		// parquet-go has copied the values: a huge one need not wait for
		// the row group's commit.
		col.releaseHuge()
	}
	// Values of earlier slices may lie past the last: a huge one must not
	// stay until the next row group.
	clear(g.buf[:cap(g.buf)])
	for _, col := range g.nested {
		bounds[col.pos] = colBounds{values: col.values}
		if err := col.encode(writers[col.leaf:], g.rows); err != nil {
			return nil, errColumn(col.field, err)
		}
	}
	return bounds, nil
}

// truncate keeps the first rows rows of the leaf columns and of the first
// nested nested columns.
func (g *rowGroupColumns) truncate(rows, nested int) {
	for _, col := range g.cols {
		col.truncate(rows)
	}
	for _, col := range g.nested[:nested] {
		col.truncate(rows)
	}
}

// reset empties the columns, which then keep at most keepBytes of room
// for the byte array values of each.
func (g *rowGroupColumns) reset(keepBytes int) {
	g.truncate(0, len(g.nested))
	g.rows = 0
	for _, col := range g.byteCols {
		col.shrink(keepBytes)
	}
}

// errNull is the error of a null value in a non-nullable column.
func errNull(f *types.StructField) error {
	return fmt.Errorf("write rows: %w: null in non-nullable column %q", types.ErrInvalidValue, f.Name)
}

// errColumn is an error about a value of a column.
func errColumn(f *types.StructField, err error) error {
	return fmt.Errorf("write rows: column %q: %w", f.Name, err)
}

// nestedColumn holds the normalised values of a struct, array or map field
// in a row group, which the shredder turns into the values of its leaf
// columns when the row group is encoded.
type nestedColumn struct {
	field *types.StructField
	// pos is the field's position in the schema, leaf that of its first
	// leaf column.
	pos, leaf int
	values    []any
	shred     *shredder
	// nulls holds encodeChunkRows null values at levels 0, made at the
	// first slice of rows in which the field is null throughout (the
	// before image of inserts): such a slice is written to each leaf
	// column from it, not shredded value by value.
	nulls []parquet.Value
}

// newFieldShredder returns a shredder of one field that gathers the values
// of each leaf column apart.
func newFieldShredder(f *types.StructField) *shredder {
	s := newShredder(types.NewStructType(f))
	s.direct = false
	return s
}

// add appends the value of the field in one more row.
func (c *nestedColumn) add(v any) error {
	if v == nil {
		if !c.field.Nullable {
			return errNull(c.field)
		}
	} else {
		var err error
		if v, err = types.Normalize(c.field.Type, v); err != nil {
			return errColumn(c.field, err)
		}
	}
	c.values = append(c.values, v)
	return nil
}

// reserve makes room for the values of rows rows in all.
func (c *nestedColumn) reserve(rows int) { c.values = growTo(c.values, rows) }

// truncate keeps the values of the first rows rows.
func (c *nestedColumn) truncate(rows int) {
	clear(c.values[rows:])
	c.values = c.values[:rows]
}

// encode shreds the values of the first rows rows and writes them to the
// writers of the field's leaf columns, encodeChunkRows rows at a time.
func (c *nestedColumn) encode(writers []*parquet.ColumnWriter, rows int) error {
	for from := 0; from < rows; from += encodeChunkRows {
		chunk := c.values[from:min(from+encodeChunkRows, rows)]
		if allNil(chunk) {
			if c.nulls == nil {
				c.nulls = make([]parquet.Value, encodeChunkRows)
				for i := range c.nulls {
					c.nulls[i] = parquet.NullValue()
				}
			}
			for j := range c.shred.cols {
				if _, err := writers[j].WriteRowValues(c.nulls[:len(chunk)]); err != nil {
					return err
				}
			}
			continue
		}
		for _, v := range chunk {
			if v == nil {
				// A null field is a null at levels 0 in each leaf column.
				for j := range c.shred.cols {
					c.shred.cols[j] = append(c.shred.cols[j], parquet.NullValue())
				}
				continue
			}
			if err := c.shred.write(c.field.Type, v, c.field.Nullable, 0, 0, 0, 0); err != nil {
				return err
			}
		}
		for j, vals := range c.shred.cols {
			if _, err := writers[j].WriteRowValues(vals); err != nil {
				return err
			}
			clear(vals)
			c.shred.cols[j] = vals[:0]
		}
	}
	return nil
}

// allNil reports whether every value of vals is nil.
func allNil(vals []any) bool {
	for _, v := range vals {
		if v != nil {
			return false
		}
	}
	return true
}
