package delta

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// columnarWriter writes the rows of a flat schema (every column a leaf)
// column by column. Write appends each value, in its Parquet physical form,
// to a typed slice of its column; a full row group is then encoded and
// committed by a goroutine of its own while the next one fills, so that the
// conversion of Go values and the Parquet encoding use two cores. At most
// one row group is encoding at a time, which keeps them in order.
type columnarWriter struct {
	writer  *parquet.Writer
	stats   *statsCollector
	maxRows int
	schema  *StructType
	// filling holds the rows of the row group being written, spare the
	// columns of the previous one once it is encoded (nil until a first
	// row group is full).
	filling, spare *rowGroupColumns
	// pending receives the result of the row group being encoded; it is
	// nil when none is.
	pending chan error
}

// rowGroupColumns are the columns of one row group and what encoding them
// needs.
type rowGroupColumns struct {
	cols []*flatColumn
	rows int
	// rg writes the row group into the file.
	rg *parquet.ConcurrentRowGroupWriter
	// buf holds the Parquet values of a slice of one column.
	buf []parquet.Value
}

func newColumnarWriter(w *parquet.Writer, st *StructType, stats *statsCollector, maxRows int64) *columnarWriter {
	c := &columnarWriter{writer: w, schema: st, stats: stats, maxRows: int(maxRows)}
	c.filling = c.newRowGroupColumns(nil)
	return c
}

// newRowGroupColumns returns empty columns, with room for as many values as
// like holds when it is not nil.
func (c *columnarWriter) newRowGroupColumns(like *rowGroupColumns) *rowGroupColumns {
	g := &rowGroupColumns{cols: make([]*flatColumn, len(c.schema.Fields)), rg: c.writer.BeginRowGroup()}
	for i, f := range c.schema.Fields {
		g.cols[i] = newFlatColumn(f, i, c.stats.cols[i])
		if like != nil {
			g.cols[i].reserve(like.cols[i])
		}
	}
	return g
}

// writeRow appends one row, whose value of column i is r[idx[i]]. On error
// the row is not written.
func (c *columnarWriter) writeRow(r Row, idx []int) error {
	g := c.filling
	for i, col := range g.cols {
		if err := col.add(r[idx[i]]); err != nil {
			for _, done := range g.cols[:i] {
				done.truncate(g.rows)
			}
			return err
		}
	}
	g.rows++
	c.stats.numRecords++
	if g.rows >= c.maxRows {
		return c.flush()
	}
	return nil
}

// flush starts encoding the rows written since the last flush, after the
// row group encoding before them is done.
func (c *columnarWriter) flush() error {
	if c.filling.rows == 0 {
		return nil
	}
	if err := c.wait(); err != nil {
		return err
	}
	g := c.filling
	if c.spare == nil {
		c.spare = c.newRowGroupColumns(g)
	}
	c.filling, c.spare = c.spare, g
	done := make(chan error, 1)
	c.pending = done
	go func() { done <- g.encode() }()
	return nil
}

// wait waits for the row group being encoded, if any, and returns its error.
func (c *columnarWriter) wait() error {
	if c.pending == nil {
		return nil
	}
	err := <-c.pending
	c.pending = nil
	return err
}

// close encodes the remaining rows and waits until every row group is in
// the file.
func (c *columnarWriter) close() error {
	if err := c.flush(); err != nil {
		return err
	}
	return c.wait()
}

// encodeChunkRows is how many rows of a column go to parquet-go at a time:
// it flushes a page only between such calls.
const encodeChunkRows = 1024

// encode writes the row group into the file, adds its statistics to the
// file's and empties the columns for reuse.
func (g *rowGroupColumns) encode() error {
	writers := g.rg.ColumnWriters()
	for i, col := range g.cols {
		col.observeStats(g.rows)
		k := 0
		for from := 0; from < g.rows; from += encodeChunkRows {
			to := min(from+encodeChunkRows, g.rows)
			g.buf, k = col.appendValues(g.buf[:0], from, to, k)
			if _, err := writers[i].WriteRowValues(g.buf); err != nil {
				return fmt.Errorf("write rows: column %q: %w", col.field.Name, err)
			}
		}
	}
	clear(g.buf)
	if _, err := g.rg.Commit(); err != nil {
		return fmt.Errorf("write rows: %w", err)
	}
	for _, col := range g.cols {
		col.truncate(0)
	}
	g.rows = 0
	return nil
}

// flatKind is how the values of a leaf column are converted and stored.
type flatKind uint8

const (
	flatBoolean flatKind = iota
	flatByte
	flatShort
	flatInteger
	flatLong
	flatFloat
	flatDouble
	flatString
	flatBinary
	flatDate
	flatTimestamp
	flatTimestampNTZ
	flatDecimal32   // decimal(p ≤ 9): INT32
	flatDecimal64   // decimal(p ≤ 18): INT64
	flatDecimalWide // decimal(p > 18): FIXED_LEN_BYTE_ARRAY
)

// flatColumn holds the values of one leaf column of a row group in their
// Parquet physical form: present says, row by row, whether the value is not
// null, and the non-null values follow each other in the one slice their
// physical type uses.
type flatColumn struct {
	field *StructField
	index int
	kind  flatKind
	stats *colStats
	// decimal columns: the scale, the precision and 10^precision when it
	// fits an int64.
	scale     int32
	precision int
	limit     int64
	// size is the byte length of a FIXED_LEN_BYTE_ARRAY value.
	size int

	present []bool
	count   int // non-null values
	bools   []bool
	ints32  []int32
	ints64  []int64
	floats  []float32
	doubles []float64
	// data holds the bytes of BYTE_ARRAY and FIXED_LEN_BYTE_ARRAY values;
	// ends the end offset of each BYTE_ARRAY value in it.
	data []byte
	ends []int
}

func newFlatColumn(f *StructField, index int, stats *colStats) *flatColumn {
	c := &flatColumn{field: f, index: index, stats: stats}
	switch t := f.Type.(type) {
	case DecimalType:
		c.scale, c.precision = int32(t.Scale), t.Precision
		switch {
		case t.Precision <= 9:
			c.kind, c.limit = flatDecimal32, decimalLimit(t.Precision)
		case t.Precision <= 18:
			c.kind, c.limit = flatDecimal64, decimalLimit(t.Precision)
		default:
			c.kind, c.size = flatDecimalWide, decimalByteLen(t.Precision)
		}
	case PrimitiveType:
		c.kind = map[PrimitiveType]flatKind{
			TypeBoolean: flatBoolean, TypeByte: flatByte, TypeShort: flatShort, TypeInteger: flatInteger,
			TypeLong: flatLong, TypeFloat: flatFloat, TypeDouble: flatDouble, TypeString: flatString,
			TypeBinary: flatBinary, TypeDate: flatDate, TypeTimestamp: flatTimestamp, TypeTimestampNTZ: flatTimestampNTZ,
		}[t]
	}
	return c
}

// decimalLimit returns 10^precision, the bound (excluded) of the unscaled
// values of a decimal of that precision, for a precision of at most 18.
func decimalLimit(precision int) int64 {
	limit := int64(1)
	for range precision {
		limit *= 10
	}
	return limit
}

// add appends the value of the column in one more row.
func (c *flatColumn) add(v any) error {
	if v == nil {
		if !c.field.Nullable {
			return fmt.Errorf("write rows: %w: null in non-nullable column %q", ErrInvalidValue, c.field.Name)
		}
		c.present = append(c.present, false)
		return nil
	}
	if !c.put(v) {
		n, err := normalizeValue(c.field.Type, v)
		if err != nil {
			return fmt.Errorf("write rows: column %q: %w", c.field.Name, err)
		}
		if !c.put(n) {
			return fmt.Errorf("write rows: column %q: %w: %T for %s", c.field.Name, ErrInvalidValue, v, c.field.Type)
		}
	}
	c.present = append(c.present, true)
	c.count++
	return nil
}

// put appends v when it is of the Go type readers return for the column
// and already normalised (as normalizeValue returns it); otherwise it
// reports false and appends nothing.
func (c *flatColumn) put(v any) bool {
	switch c.kind {
	case flatBoolean:
		x, ok := v.(bool)
		if ok {
			c.bools = append(c.bools, x)
		}
		return ok
	case flatByte:
		x, ok := v.(int8)
		if ok {
			c.ints32 = append(c.ints32, int32(x))
		}
		return ok
	case flatShort:
		x, ok := v.(int16)
		if ok {
			c.ints32 = append(c.ints32, int32(x))
		}
		return ok
	case flatInteger:
		x, ok := v.(int32)
		if ok {
			c.ints32 = append(c.ints32, x)
		}
		return ok
	case flatLong:
		x, ok := v.(int64)
		if ok {
			c.ints64 = append(c.ints64, x)
		}
		return ok
	case flatFloat:
		x, ok := v.(float32)
		if ok {
			c.floats = append(c.floats, x)
		}
		return ok
	case flatDouble:
		x, ok := v.(float64)
		if ok {
			c.doubles = append(c.doubles, x)
		}
		return ok
	case flatString:
		x, ok := v.(string)
		if ok {
			c.data = append(c.data, x...)
			c.ends = append(c.ends, len(c.data))
		}
		return ok
	case flatBinary:
		x, ok := v.([]byte)
		if ok {
			c.data = append(c.data, x...)
			c.ends = append(c.ends, len(c.data))
		}
		return ok
	case flatDate:
		x, ok := v.(time.Time)
		if ok {
			c.ints32 = append(c.ints32, DaysSinceEpoch(x))
		}
		return ok
	case flatTimestamp:
		x, ok := v.(time.Time)
		if ok {
			c.ints64 = append(c.ints64, x.UnixMicro())
		}
		return ok
	case flatTimestampNTZ:
		x, ok := v.(time.Time)
		if ok {
			c.ints64 = append(c.ints64, ntzMicros(x))
		}
		return ok
	case flatDecimal32, flatDecimal64:
		u, ok := c.unscaled(v)
		switch {
		case !ok:
		case c.kind == flatDecimal32:
			c.ints32 = append(c.ints32, int32(u))
		default:
			c.ints64 = append(c.ints64, u)
		}
		return ok
	case flatDecimalWide:
		x, ok := v.(Decimal)
		if !ok || x.Unscaled == nil || x.Scale != c.scale || decimalDigits(x.Unscaled) > c.precision {
			return false
		}
		c.data = appendTwosComplement(c.data, x.Unscaled, c.size)
		return true
	}
	return false
}

// unscaled returns the unscaled value of a normalised decimal of an INT32
// or INT64 decimal column.
func (c *flatColumn) unscaled(v any) (int64, bool) {
	d, ok := v.(Decimal)
	if !ok || d.Unscaled == nil || d.Scale != c.scale || !d.Unscaled.IsInt64() {
		return 0, false
	}
	u := d.Unscaled.Int64()
	return u, u > -c.limit && u < c.limit
}

// reserve makes room for as many values as like holds.
func (c *flatColumn) reserve(like *flatColumn) {
	c.present = slices.Grow(c.present, len(like.present))
	c.bools = slices.Grow(c.bools, len(like.bools))
	c.ints32 = slices.Grow(c.ints32, len(like.ints32))
	c.ints64 = slices.Grow(c.ints64, len(like.ints64))
	c.floats = slices.Grow(c.floats, len(like.floats))
	c.doubles = slices.Grow(c.doubles, len(like.doubles))
	c.data = slices.Grow(c.data, len(like.data))
	c.ends = slices.Grow(c.ends, len(like.ends))
}

// truncate keeps the values of the first rows rows.
func (c *flatColumn) truncate(rows int) {
	for _, p := range c.present[rows:] {
		if p {
			c.count--
		}
	}
	c.present = c.present[:rows]
	n := c.count
	switch c.kind {
	case flatBoolean:
		c.bools = c.bools[:n]
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		c.ints32 = c.ints32[:n]
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		c.ints64 = c.ints64[:n]
	case flatFloat:
		c.floats = c.floats[:n]
	case flatDouble:
		c.doubles = c.doubles[:n]
	case flatString, flatBinary:
		c.ends = c.ends[:n]
		c.data = c.data[:c.end(n-1)]
	case flatDecimalWide:
		c.data = c.data[:n*c.size]
	}
}

// end returns the end offset of BYTE_ARRAY value k, 0 before the first.
func (c *flatColumn) end(k int) int {
	if k < 0 {
		return 0
	}
	return c.ends[k]
}

// value returns non-null value k of the column as a Parquet value.
func (c *flatColumn) value(k int) parquet.Value {
	switch c.kind {
	case flatBoolean:
		return parquet.BooleanValue(c.bools[k])
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		return parquet.Int32Value(c.ints32[k])
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		return parquet.Int64Value(c.ints64[k])
	case flatFloat:
		return parquet.FloatValue(c.floats[k])
	case flatDouble:
		return parquet.DoubleValue(c.doubles[k])
	case flatString, flatBinary:
		return parquet.ByteArrayValue(c.data[c.end(k-1):c.ends[k]])
	default:
		return parquet.FixedLenByteArrayValue(c.data[k*c.size : (k+1)*c.size])
	}
}

// appendValues appends the Parquet values, with their definition levels,
// of rows from to to of the column, whose first non-null value is value k,
// and returns the index of the non-null value after them.
func (c *flatColumn) appendValues(dst []parquet.Value, from, to, k int) ([]parquet.Value, int) {
	def := 0
	if c.field.Nullable {
		def = 1
	}
	for _, p := range c.present[from:to] {
		if p {
			dst = append(dst, c.value(k).Level(0, def, c.index))
			k++
		} else {
			dst = append(dst, parquet.NullValue().Level(0, 0, c.index))
		}
	}
	return dst, k
}

// observeStats adds the null count and the bounds of the rows rows of the
// column to the file's statistics, as colStats.observe would have from the
// values one by one.
func (c *flatColumn) observeStats(rows int) {
	s := c.stats
	s.nullCount += int64(rows - c.count)
	if c.count == 0 || !hasBounds(s.typ) || s.noBounds {
		return
	}
	var lo, hi any
	switch c.kind {
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		a, b := bounds(c.ints32)
		lo, hi = c.fromInt64(int64(a)), c.fromInt64(int64(b))
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		a, b := bounds(c.ints64)
		lo, hi = c.fromInt64(a), c.fromInt64(b)
	case flatFloat:
		for _, x := range c.floats {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				s.observe(x)
				return
			}
		}
		lo, hi = bounds(c.floats)
	case flatDouble:
		for _, x := range c.doubles {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				s.observe(x)
				return
			}
		}
		lo, hi = bounds(c.doubles)
	case flatString:
		lo, hi = c.stringBounds()
		if lo == nil {
			return
		}
	case flatDecimalWide:
		lo, hi = c.wideBounds()
	}
	s.observe(lo)
	s.observe(hi)
}

// bounds returns the first of the smallest and of the largest values.
func bounds[T int32 | int64 | float32 | float64](values []T) (lo, hi T) {
	lo, hi = values[0], values[0]
	for _, x := range values[1:] {
		if x < lo {
			lo = x
		}
		if x > hi {
			hi = x
		}
	}
	return lo, hi
}

// fromInt64 returns a physical INT32 or INT64 value of the column as the Go
// value readers return.
func (c *flatColumn) fromInt64(x int64) any {
	switch c.kind {
	case flatByte:
		return int8(x)
	case flatShort:
		return int16(x)
	case flatInteger:
		return int32(x)
	case flatDate:
		return DateFromDays(int32(x))
	case flatTimestamp, flatTimestampNTZ:
		return TimeFromMicros(x)
	case flatDecimal32, flatDecimal64:
		return NewDecimal(x, c.scale)
	}
	return x
}

// stringBounds returns the smallest and largest strings of the column, or
// nil after recording in the statistics that a string is not valid UTF-8.
func (c *flatColumn) stringBounds() (lo, hi any) {
	var a, b []byte
	for k := range c.count {
		x := c.data[c.end(k-1):c.ends[k]]
		if !utf8.Valid(x) {
			c.stats.observe(string(x))
			return nil, nil
		}
		if k == 0 || bytes.Compare(x, a) < 0 {
			a = x
		}
		if k == 0 || bytes.Compare(x, b) > 0 {
			b = x
		}
	}
	return string(a), string(b)
}

// wideBounds returns the smallest and largest FIXED_LEN_BYTE_ARRAY
// decimals of the column.
func (c *flatColumn) wideBounds() (lo, hi any) {
	var a, b []byte
	for k := range c.count {
		x := c.data[k*c.size : (k+1)*c.size]
		if k == 0 || compareTwosComplement(x, a) < 0 {
			a = x
		}
		if k == 0 || compareTwosComplement(x, b) > 0 {
			b = x
		}
	}
	return Decimal{Unscaled: fromTwosComplement(a), Scale: c.scale}, Decimal{Unscaled: fromTwosComplement(b), Scale: c.scale}
}

// compareTwosComplement orders two big-endian two's complement integers of
// the same length.
func compareTwosComplement(a, b []byte) int {
	if an, bn := a[0]&0x80 != 0, b[0]&0x80 != 0; an != bn {
		if an {
			return -1
		}
		return 1
	}
	return bytes.Compare(a, b)
}

// fromTwosComplement returns the integer of a big-endian two's complement.
func fromTwosComplement(b []byte) *big.Int {
	u := new(big.Int).SetBytes(b)
	if b[0]&0x80 != 0 {
		u.Sub(u, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return u
}
