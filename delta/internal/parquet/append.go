package parquet

import (
	"errors"
	"fmt"
	"math"
	"math/big"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// RowBuilder appends one row to a Writer value by value, each in the
// physical form its leaf column stores: no value of the row is boxed in an
// interface and no Row is built, which is what most of the cost of a row
// given as a Row is. It is for a writer of many rows whose values come in
// another form than the Go values of a Row (a change queue's, say).
//
// Fields are numbered as in the writer's schema. A field the file does not
// store (a partition column, whose value the table keeps in the file's add
// action) takes no value, and a field given no value is null. End adds
// the row. After a call that fails, End drops the row and returns that
// error; the writer takes rows again after it.
type RowBuilder struct {
	w   *Writer
	g   *rowGroupColumns
	err error
}

// fieldColumn locates a field of the full schema among a row group's
// columns: the leaf column flat, or the nested column nested, or neither
// (-1) for a field the file does not store.
type fieldColumn struct {
	flat, nested int
}

// Row starts a row. The builder is the writer's own: the next call of Row
// starts the next row, and Write must not be called before End.
func (w *Writer) Row() *RowBuilder {
	b := &w.row
	b.w, b.err = w, nil
	if w.closed {
		b.err = errors.New("write rows: writer is closed")
		return b
	}
	c := w.columns
	if c.err != nil {
		b.err = c.err
		return b
	}
	g := c.filling
	if g.rows == g.capRows {
		g.grow(c.maxRows, c.expectRows, c.maxBytes)
	}
	b.g = g
	if w.fieldCols == nil {
		w.fieldCols = make([]fieldColumn, len(w.full.Fields))
		for i := range w.fieldCols {
			w.fieldCols[i] = fieldColumn{flat: -1, nested: -1}
		}
		for k, col := range g.cols {
			w.fieldCols[w.dataIdx[col.pos]].flat = k
		}
		for k, col := range g.nested {
			w.fieldCols[w.dataIdx[col.pos]].nested = k
		}
	}
	return b
}

// column returns the leaf column of field, ready for the row's value, or
// nil after recording why it is not.
func (b *RowBuilder) column(field int) *flatColumn {
	if b.err != nil {
		return nil
	}
	if field < 0 || field >= len(b.w.fieldCols) || b.w.fieldCols[field].flat < 0 {
		b.err = fmt.Errorf("write rows: %w: field %d is not a leaf data column", types.ErrInvalidValue, field)
		return nil
	}
	// A second value for the column in this row is found by End.
	return b.g.cols[b.w.fieldCols[field].flat]
}

// fail records the error of a value for column c.
func (b *RowBuilder) fail(c *flatColumn, err error) {
	b.err = errColumn(c.field, err)
}

// errKind is the error of a value given to a column of another type.
func errKind(what string, c *flatColumn) error {
	return fmt.Errorf("%w: %s for %s", types.ErrInvalidValue, what, c.field.Type)
}

// Null sets the field to null.
func (b *RowBuilder) Null(field int) {
	if b.err != nil {
		return
	}
	if field >= 0 && field < len(b.w.fieldCols) && b.w.fieldCols[field].nested >= 0 {
		b.Value(field, nil)
		return
	}
	if c := b.column(field); c != nil {
		if !c.field.Nullable {
			b.err = errNull(c.field)
			return
		}
		c.addNull()
	}
}

// Bool sets a boolean field.
func (b *RowBuilder) Bool(field int, v bool) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatBoolean:
		b.fail(c, errKind("a boolean", c))
	default:
		c.bools = append(c.bools, v)
		c.addValue()
	}
}

// Int sets a byte, short, integer or long field, which must hold v.
func (b *RowBuilder) Int(field int, v int64) {
	c := b.column(field)
	if c == nil {
		return
	}
	var lo, hi int64
	switch c.kind {
	case flatLong:
		c.ints64 = append(c.ints64, v)
		c.addValue()
		return
	case flatByte:
		lo, hi = math.MinInt8, math.MaxInt8
	case flatShort:
		lo, hi = math.MinInt16, math.MaxInt16
	case flatInteger:
		lo, hi = math.MinInt32, math.MaxInt32
	default:
		b.fail(c, errKind("an integer", c))
		return
	}
	if v < lo || v > hi {
		b.fail(c, fmt.Errorf("%w: %d is out of range for %s", types.ErrInvalidValue, v, c.field.Type))
		return
	}
	c.ints32 = append(c.ints32, int32(v))
	c.addValue()
}

// Float sets a float field.
func (b *RowBuilder) Float(field int, v float32) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatFloat:
		b.fail(c, errKind("a float", c))
	default:
		c.floats = append(c.floats, v)
		c.addValue()
	}
}

// Double sets a double field.
func (b *RowBuilder) Double(field int, v float64) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatDouble:
		b.fail(c, errKind("a double", c))
	default:
		c.doubles = append(c.doubles, v)
		c.addValue()
	}
}

// Bytes sets a string field to the text v holds, or a binary field to v.
// The bytes are copied.
func (b *RowBuilder) Bytes(field int, v []byte) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatString && c.kind != flatBinary:
		b.fail(c, errKind("bytes", c))
	default:
		c.appendBytes(v)
		c.addValue()
	}
}

// Date sets a date field to the day that many days after 1970-01-01.
func (b *RowBuilder) Date(field int, days int32) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatDate:
		b.fail(c, errKind("a date", c))
	default:
		c.ints32 = append(c.ints32, days)
		c.addValue()
	}
}

// Timestamp sets a timestamp field (with or without time zone) to the
// instant that many microseconds after 1970-01-01 00:00:00 UTC.
func (b *RowBuilder) Timestamp(field int, micros int64) {
	c := b.column(field)
	switch {
	case c == nil:
	case c.kind != flatTimestamp && c.kind != flatTimestampNTZ:
		b.fail(c, errKind("a timestamp", c))
	default:
		c.ints64 = append(c.ints64, micros)
		c.addValue()
	}
}

// Decimal sets a decimal field to unscaled × 10^-scale, where scale is the
// column's and the value has no more digits than its precision.
func (b *RowBuilder) Decimal(field int, unscaled int64, scale int32) {
	c := b.column(field)
	switch {
	case c == nil:
		return
	case c.kind != flatDecimal32 && c.kind != flatDecimal64 && c.kind != flatDecimalWide:
		b.fail(c, errKind("a decimal", c))
		return
	case scale != c.scale:
		b.fail(c, fmt.Errorf("%w: a decimal of scale %d for %s", types.ErrInvalidValue, scale, c.field.Type))
		return
	case c.kind == flatDecimalWide:
		// More than 18 digits of precision: any int64 fits.
		c.data = appendTwosComplement(c.data, big.NewInt(unscaled), c.size)
		c.ends = append(c.ends, len(c.data))
	case unscaled <= -c.limit || unscaled >= c.limit:
		b.fail(c, fmt.Errorf("%w: %d × 10^-%d has more digits than %s", types.ErrInvalidValue, unscaled, scale, c.field.Type))
		return
	case c.kind == flatDecimal32:
		c.ints32 = append(c.ints32, int32(unscaled))
	default:
		c.ints64 = append(c.ints64, unscaled)
	}
	c.addValue()
}

// Value sets a field of any type to a Go value, as Write takes it.
func (b *RowBuilder) Value(field int, v any) {
	if b.err != nil {
		return
	}
	if field >= 0 && field < len(b.w.fieldCols) {
		if k := b.w.fieldCols[field].nested; k >= 0 {
			c := b.g.nested[k]
			if len(c.values) != b.g.rows {
				b.err = fmt.Errorf("write rows: %w: two values for column %q in one row", types.ErrInvalidValue, c.field.Name)
				return
			}
			b.err = c.add(v)
			return
		}
	}
	if c := b.column(field); c != nil {
		b.err = c.add(v)
	}
}

// End adds the row, its fields given no value null, and returns the first
// error of the row, which it then drops.
func (b *RowBuilder) End() error {
	g := b.g
	if b.err == nil {
		for _, c := range g.cols {
			switch n := c.rows() - g.rows; {
			case n == 1:
			case n == 0 && c.field.Nullable:
				c.addNull()
			case n == 0:
				b.err = errNull(c.field)
			default:
				b.err = fmt.Errorf("write rows: %w: two values for column %q in one row", types.ErrInvalidValue, c.field.Name)
			}
			if b.err != nil {
				break
			}
		}
	}
	if b.err == nil {
		for _, c := range g.nested {
			if len(c.values) == g.rows {
				// A null, as nestedColumn.add takes it, without the
				// call: most changelog rows have three.
				if !c.field.Nullable {
					b.err = errNull(c.field)
					break
				}
				c.values = append(c.values, nil)
			}
		}
	}
	if err := b.err; err != nil {
		if g != nil {
			g.truncate(g.rows, len(g.nested))
		}
		return err
	}
	g.rows++
	c := b.w.columns
	c.stats.numRecords++
	if c.full(g) {
		return c.flush()
	}
	return nil
}
