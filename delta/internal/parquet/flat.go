package parquet

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/lakeside/lakeside/delta/internal/types"
)

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
// Parquet physical form: the non-null values follow each other in the one
// slice their physical type uses, and, once the column has a null, present
// says row by row whether the value is not null.
type flatColumn struct {
	field *types.StructField
	// pos is the field's position in the schema, leaf its leaf column's.
	pos, leaf int
	kind      flatKind
	// decimal columns: the scale, the precision and 10^precision when it
	// fits an int64.
	scale     int32
	precision int
	limit     int64
	// size is the byte length of a FIXED_LEN_BYTE_ARRAY value.
	size int

	// count is the number of non-null values. While the column has no
	// null (hasNull false), every row has a value and present is not kept:
	// most columns have no null, and appending to present was a good part
	// of the cost of a value.
	count   int
	hasNull bool
	present []bool
	bools   []bool
	ints32  []int32
	ints64  []int64
	floats  []float32
	doubles []float64
	// data holds the bytes of BYTE_ARRAY and FIXED_LEN_BYTE_ARRAY values;
	// ends the end offset of each in it.
	data []byte
	ends []int
	// huge holds the huge values (see hugeValueBytes) of a BYTE_ARRAY
	// column, in order, which take no bytes of data; hugeBytes is their
	// length.
	huge      []hugeValue
	hugeBytes int
}

// hugeValueBytes is the length from which a byte array value is huge. A
// huge value is held apart from the others, not appended to the bytes of
// its column: they would grow to hold it, copying all before it, and keep
// that room for the row groups after. A string is then not copied at all,
// and the copy of a []byte is dropped once handed to parquet-go. The
// Parquet statistics of a page with a huge bound have short ones (see
// byteArrayType). Values this long are rare: a data file of ordinary
// values is written exactly as it would be without the special case.
const hugeValueBytes = 1 << 20

// hugeValue is a huge value of a column and its index k among the
// column's values. Its bytes are only read, never written: they may be a
// string's.
type hugeValue struct {
	k     int
	bytes []byte
}

// addHuge appends the huge value x, whose bytes it keeps as they are.
func (c *flatColumn) addHuge(x []byte) {
	c.huge = append(c.huge, hugeValue{k: len(c.ends), bytes: x})
	c.hugeBytes += len(x)
	c.ends = append(c.ends, len(c.data))
}

// appendBytes appends a BYTE_ARRAY value, copying its bytes.
func (c *flatColumn) appendBytes(x []byte) {
	if len(x) >= hugeValueBytes {
		c.addHuge(bytes.Clone(x))
		return
	}
	c.data = append(c.data, x...)
	c.ends = append(c.ends, len(c.data))
}

// valueBytes returns the bytes of byte array value k, where h is the index
// in huge of the first huge value from k on, which it moves past k.
func (c *flatColumn) valueBytes(k int, h *int) []byte {
	if *h < len(c.huge) && c.huge[*h].k == k {
		*h++
		return c.huge[*h-1].bytes
	}
	return c.data[c.end(k-1):c.ends[k]]
}

// hugeFrom returns the index in huge of the first huge value from value k
// on.
func (c *flatColumn) hugeFrom(k int) int {
	h, _ := slices.BinarySearchFunc(c.huge, k, func(v hugeValue, k int) int { return v.k - k })
	return h
}

// releaseHuge drops the bytes of the huge values, once parquet-go has
// copied them: until truncated, the column then reads them as empty.
func (c *flatColumn) releaseHuge() {
	for i := range c.huge {
		c.huge[i].bytes = nil
	}
}

// stringBytes returns the bytes of s, not copied: they must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// newFlatColumn returns the column of a leaf field, whose type parquetSchema
// accepted.
func newFlatColumn(f *types.StructField, pos, leaf int) *flatColumn {
	c := &flatColumn{field: f, pos: pos, leaf: leaf}
	switch t := f.Type.(type) {
	case types.DecimalType:
		c.scale, c.precision = int32(t.Scale), t.Precision
		switch {
		case t.Precision <= 9:
			c.kind, c.limit = flatDecimal32, decimalLimit(t.Precision)
		case t.Precision <= 18:
			c.kind, c.limit = flatDecimal64, decimalLimit(t.Precision)
		default:
			c.kind, c.size = flatDecimalWide, decimalByteLen(t.Precision)
		}
	case types.PrimitiveType:
		c.kind = map[types.PrimitiveType]flatKind{
			types.TypeBoolean: flatBoolean, types.TypeByte: flatByte, types.TypeShort: flatShort, types.TypeInteger: flatInteger,
			types.TypeLong: flatLong, types.TypeFloat: flatFloat, types.TypeDouble: flatDouble, types.TypeString: flatString,
			types.TypeBinary: flatBinary, types.TypeDate: flatDate, types.TypeTimestamp: flatTimestamp, types.TypeTimestampNTZ: flatTimestampNTZ,
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
			return errNull(c.field)
		}
		c.addNull()
		return nil
	}
	if !c.put(v) {
		n, err := types.Normalize(c.field.Type, v)
		if err != nil {
			return errColumn(c.field, err)
		}
		if !c.put(n) {
			return errColumn(c.field, fmt.Errorf("%w: %T for %s", types.ErrInvalidValue, v, c.field.Type))
		}
	}
	c.addValue()
	return nil
}

// addValue records the non-null value appended for one more row.
func (c *flatColumn) addValue() {
	if c.hasNull {
		c.present = append(c.present, true)
	}
	c.count++
}

// rows returns the number of rows given a value or a null.
func (c *flatColumn) rows() int {
	if c.hasNull {
		return len(c.present)
	}
	return c.count
}

// addNull records a null for one more row.
func (c *flatColumn) addNull() {
	if !c.hasNull {
		// Every row before has a value.
		c.present = growTo(c.present[:0], c.count+1)[:c.count]
		for i := range c.present {
			c.present[i] = true
		}
		c.hasNull = true
	}
	c.present = append(c.present, false)
}

// put appends v when it is of the Go type readers return for the column
// and needs no checking, stored as what types.Normalize makes of it (a time
// in any zone, for one); otherwise it reports false and appends nothing.
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
		switch {
		case !ok:
		case len(x) >= hugeValueBytes:
			c.addHuge(stringBytes(x))
		default:
			c.data = append(c.data, x...)
			c.ends = append(c.ends, len(c.data))
		}
		return ok
	case flatBinary:
		x, ok := v.([]byte)
		if ok {
			c.appendBytes(x)
		}
		return ok
	case flatDate:
		x, ok := v.(time.Time)
		if ok {
			c.ints32 = append(c.ints32, types.DaysSinceEpoch(x))
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
			c.ints64 = append(c.ints64, types.NTZMicros(x))
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
		x, ok := v.(types.Decimal)
		if !ok || x.Unscaled == nil || x.Scale != c.scale || types.DecimalDigits(x.Unscaled) > c.precision {
			return false
		}
		c.data = appendTwosComplement(c.data, x.Unscaled, c.size)
		c.ends = append(c.ends, len(c.data))
		return true
	}
	return false
}

// unscaled returns the unscaled value of a normalised decimal of an INT32
// or INT64 decimal column.
func (c *flatColumn) unscaled(v any) (int64, bool) {
	d, ok := v.(types.Decimal)
	if !ok || d.Unscaled == nil || d.Scale != c.scale || !d.Unscaled.IsInt64() {
		return 0, false
	}
	u := d.Unscaled.Int64()
	return u, u > -c.limit && u < c.limit
}

// reserve makes room for the values of rows rows, and dataBytes bytes of
// byte array values, in all.
func (c *flatColumn) reserve(rows, dataBytes int) {
	if c.hasNull {
		c.present = growTo(c.present, rows)
	}
	switch c.kind {
	case flatBoolean:
		c.bools = growTo(c.bools, rows)
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		c.ints32 = growTo(c.ints32, rows)
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		c.ints64 = growTo(c.ints64, rows)
	case flatFloat:
		c.floats = growTo(c.floats, rows)
	case flatDouble:
		c.doubles = growTo(c.doubles, rows)
	default:
		c.ends = growTo(c.ends, rows)
		c.data = growTo(c.data, dataBytes)
	}
}

// capBytes returns the memory the column's slices take, by their room.
func (c *flatColumn) capBytes() int {
	return cap(c.present) + cap(c.bools) + 4*cap(c.ints32) + 8*cap(c.ints64) + 4*cap(c.floats) +
		8*cap(c.doubles) + cap(c.data) + int(unsafe.Sizeof(0))*cap(c.ends) +
		int(unsafe.Sizeof(hugeValue{}))*cap(c.huge) + c.hugeBytes
}

// shrink drops the bytes of byte array values of the empty column when
// they have room for more than keepBytes: room a row group of ordinary
// values never takes, which would stay with the column for every row
// group after.
func (c *flatColumn) shrink(keepBytes int) {
	if cap(c.data) > keepBytes {
		c.data = nil
	}
}

// growTo returns s with room for n elements in all.
func growTo[T any](s []T, n int) []T {
	return slices.Grow(s, max(n-len(s), 0))
}

// truncate keeps the values of the first rows rows.
func (c *flatColumn) truncate(rows int) {
	if c.hasNull {
		for _, p := range c.present[rows:] {
			if p {
				c.count--
			}
		}
		c.present = c.present[:rows]
		c.hasNull = rows > 0
	} else {
		c.count = rows
	}
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
	case flatString, flatBinary, flatDecimalWide:
		c.ends = c.ends[:n]
		c.data = c.data[:c.end(n-1)]
		for len(c.huge) > 0 && c.huge[len(c.huge)-1].k >= n {
			last := &c.huge[len(c.huge)-1]
			c.hugeBytes -= len(last.bytes)
			*last = hugeValue{}
			c.huge = c.huge[:len(c.huge)-1]
		}
		if len(c.huge) == 0 {
			// releaseHuge leaves the bytes it dropped counted.
			c.hugeBytes = 0
		}
	}
}

// end returns the end offset of byte array value k, 0 before the first.
func (c *flatColumn) end(k int) int {
	if k < 0 {
		return 0
	}
	return c.ends[k]
}

// appendValues appends the Parquet values, with their definition levels,
// of rows from to to of the column, whose first non-null value is value k,
// and returns the index of the non-null value after them.
func (c *flatColumn) appendValues(dst []parquet.Value, from, to, k int) ([]parquet.Value, int) {
	def := 0
	if c.field.Nullable {
		def = 1
	}
	n := len(dst)
	dst = slices.Grow(dst, to-from)[:n+to-from]
	out := dst[n:]
	var present []bool // nil: no null
	if c.hasNull {
		present = c.present[from:to]
	}
	switch c.kind {
	case flatBoolean:
		k = leveled(out, present, c.bools, k, def, func(v *parquet.Value, x bool) { *v = parquet.BooleanValue(x) })
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		k = leveled(out, present, c.ints32, k, def, func(v *parquet.Value, x int32) { *v = parquet.Int32Value(x) })
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		k = leveled(out, present, c.ints64, k, def, func(v *parquet.Value, x int64) { *v = parquet.Int64Value(x) })
	case flatFloat:
		k = leveled(out, present, c.floats, k, def, func(v *parquet.Value, x float32) { *v = parquet.FloatValue(x) })
	case flatDouble:
		k = leveled(out, present, c.doubles, k, def, func(v *parquet.Value, x float64) { *v = parquet.DoubleValue(x) })
	default:
		value := parquet.ByteArrayValue
		if c.kind == flatDecimalWide {
			value = parquet.FixedLenByteArrayValue
		}
		start := c.end(k - 1)
		if len(c.huge) == 0 {
			k = leveled(out, present, c.ends, k, def, func(v *parquet.Value, end int) {
				*v = value(c.data[start:end])
				start = end
			})
			break
		}
		j, h := k, c.hugeFrom(k)
		k = leveled(out, present, c.ends, k, def, func(v *parquet.Value, end int) {
			*v = value(c.valueBytes(j, &h))
			j++
		})
	}
	return dst, k
}

// leveled sets out[i] to the Parquet value of row i: null if not present[i],
// else the value set(&out[i], vals[k]) makes, at definition level def, k
// counting from the given k up; a nil present has every value. It returns
// the k after the last value. (Values are set in place: a Value returned by
// a function call, or by Value.Level, is copied through the stack at
// several times the cost.)
func leveled[T any](out []parquet.Value, present []bool, vals []T, k, def int, set func(*parquet.Value, T)) int {
	if present == nil {
		for i := range out {
			set(&out[i], vals[k])
			out[i].SetDefinitionLevel(def)
			k++
		}
		return k
	}
	for i, p := range present[:len(out)] {
		if p {
			set(&out[i], vals[k])
			out[i].SetDefinitionLevel(def)
			k++
		} else {
			out[i] = parquet.NullValue()
		}
	}
	return k
}

// colBounds are the statistics of the values of a column in a row group.
type colBounds struct {
	nulls int64
	// lo and hi are the smallest and largest values, nil when the column
	// has none or its type no bounds; unbounded is a value (NaN, ±Inf, a
	// string that is not UTF-8) that leaves the column without bounds.
	lo, hi, unbounded any
	// values are the values of a nested column, observed one by one.
	values []any
}

// addTo adds the statistics to the file's, as colStats.observe would have
// from the values one by one.
func (b colBounds) addTo(s *colStats) {
	nulls := b.nulls
	for _, v := range b.values {
		if v == nil {
			nulls++ // counted at once below
			continue
		}
		s.observe(v)
	}
	s.observeNulls(nulls)
	switch {
	case b.unbounded != nil:
		s.observe(b.unbounded)
	case b.lo != nil:
		s.observe(b.lo)
		s.observe(b.hi)
	}
}

// holdsBytes reports whether the column's values are byte arrays, held
// in data.
func (c *flatColumn) holdsBytes() bool {
	switch c.kind {
	case flatString, flatBinary, flatDecimalWide:
		return true
	}
	return false
}

// bounds returns the statistics of the first rows rows of the column.
func (c *flatColumn) bounds(rows int) colBounds {
	b := colBounds{nulls: int64(rows - c.count)}
	if c.count == 0 || !hasBounds(c.field.Type) {
		return b
	}
	switch c.kind {
	case flatByte, flatShort, flatInteger, flatDate, flatDecimal32:
		lo, hi := minMax(c.ints32)
		b.lo, b.hi = c.fromInt64(int64(lo)), c.fromInt64(int64(hi))
	case flatLong, flatTimestamp, flatTimestampNTZ, flatDecimal64:
		lo, hi := minMax(c.ints64)
		b.lo, b.hi = c.fromInt64(lo), c.fromInt64(hi)
	case flatFloat:
		for _, x := range c.floats {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				b.unbounded = x
				return b
			}
		}
		b.lo, b.hi = minMax(c.floats)
	case flatDouble:
		for _, x := range c.doubles {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				b.unbounded = x
				return b
			}
		}
		b.lo, b.hi = minMax(c.doubles)
	case flatString:
		b.lo, b.hi, b.unbounded = c.stringBounds()
	case flatDecimalWide:
		b.lo, b.hi = c.wideBounds()
	}
	return b
}

// minMax returns the first of the smallest and of the largest values.
func minMax[T int32 | int64 | float32 | float64](values []T) (lo, hi T) {
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
		return types.DateFromDays(int32(x))
	case flatTimestamp, flatTimestampNTZ:
		return types.TimeFromMicros(x)
	case flatDecimal32, flatDecimal64:
		return types.NewDecimal(x, c.scale)
	}
	return x
}

// stringBounds returns the smallest and largest strings of the column, or
// the first that is not valid UTF-8; of each, only the beginning the stats
// keep of it (see keptBound): the statsPrefix of a bound, the beginning of
// an invalid string up to its first invalid byte, which is not valid UTF-8
// either.
func (c *flatColumn) stringBounds() (lo, hi, unbounded any) {
	if !c.allUTF8() {
		h := 0
		for k := range c.count {
			if x := c.valueBytes(k, &h); !utf8.Valid(x) {
				return nil, nil, string(invalidPrefix(x))
			}
		}
	}
	var a, b []byte
	h := 0
	for k := range c.count {
		x := c.valueBytes(k, &h)
		switch {
		case k == 0:
			a, b = x, x
		case compareBytes(x, a) < 0:
			a = x
		case compareBytes(x, b) > 0:
			b = x
		}
	}
	return boundString(a), boundString(b), nil
}

// boundString returns the statsPrefix of a string bound, as a string of
// its own.
func boundString(x []byte) string {
	return strings.Clone(statsPrefix(unsafe.String(unsafe.SliceData(x), len(x))))
}

// invalidPrefix returns the beginning of x, which is not valid UTF-8,
// through its first byte that starts no valid character. Alone, that byte
// (not ASCII) is no valid character either, so the prefix is not valid
// UTF-8.
func invalidPrefix(x []byte) []byte {
	for i := 0; i < len(x); {
		r, size := utf8.DecodeRune(x[i:])
		if r == utf8.RuneError && size == 1 {
			return x[:i+1]
		}
		i += size
	}
	return x
}

// allUTF8 reports whether every value of a string column is valid UTF-8,
// checking the values' bytes in one piece: they are when the whole is and
// no value but the first starts with a continuation byte (none starts or
// ends inside a character), and every huge value is. One check of a row
// group's bytes costs a small part of one check per value.
func (c *flatColumn) allUTF8() bool {
	if !utf8.Valid(c.data[:c.end(c.count-1)]) {
		return false
	}
	for _, v := range c.huge {
		if !utf8.Valid(v.bytes) {
			return false
		}
	}
	for _, start := range c.ends[:max(c.count-1, 0)] {
		if start < len(c.data) && !utf8.RuneStart(c.data[start]) {
			return false
		}
	}
	return true
}

// compareBytes is bytes.Compare, comparing first bytes that differ without
// a call: the values of a column mostly differ there, and the call costs
// more than the comparison.
func compareBytes(x, y []byte) int {
	if len(x) > 0 && len(y) > 0 && x[0] != y[0] {
		if x[0] < y[0] {
			return -1
		}
		return 1
	}
	return bytes.Compare(x, y)
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
	return types.Decimal{Unscaled: fromTwosComplement(a), Scale: c.scale}, types.Decimal{Unscaled: fromTwosComplement(b), Scale: c.scale}
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
