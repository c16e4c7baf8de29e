package parquet

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// parquetSchema returns the Parquet schema parquet-go writes for a Delta
// struct type (the table schema without its partition columns, or the
// checkpoint schema). Field order is kept, unlike parquet.Group which sorts
// fields by name. Each column is named by its field's physical name, nested
// ones too, and a field with a column mapping id carries it as its Parquet
// field_id, as column mapping asks of writers.
func parquetSchema(name string, st *types.StructType) (*parquet.Schema, error) {
	root, err := parquetGroup(st)
	if err != nil {
		return nil, err
	}
	return parquet.NewSchema(name, root), nil
}

func parquetGroup(st *types.StructType) (*groupNode, error) {
	g := &groupNode{fields: make([]parquet.Field, len(st.Fields))}
	for i, f := range st.Fields {
		n, err := parquetNode(f.Type, f.Nullable)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		if id := f.ColumnID(); id > 0 && id <= math.MaxInt32 {
			n = parquet.FieldID(n, int(id))
		}
		g.fields[i] = &namedField{Node: n, name: f.PhysicalName(), index: i}
	}
	return g, nil
}

// parquetNode maps a Delta type to a parquet-go node:
//
//	boolean        BOOLEAN
//	byte, short    INT32 with INT(8|16, signed)
//	integer, long  INT32, INT64
//	float, double  FLOAT, DOUBLE
//	decimal(p,s)   INT32 (p<=9), INT64 (p<=18) or FIXED_LEN_BYTE_ARRAY with DECIMAL(p,s)
//	string         BYTE_ARRAY with STRING
//	binary         BYTE_ARRAY
//	date           INT32 with DATE
//	timestamp      INT64 with TIMESTAMP(MICROS, isAdjustedToUTC=true)
//	timestamp_ntz  INT64 with TIMESTAMP(MICROS, isAdjustedToUTC=false)
//	array          3-level LIST: <name> (LIST) { repeated group list { <element> } }
//	map            MAP: <name> (MAP) { repeated group key_value { required key; value } }
//	struct         group
func parquetNode(dt types.DataType, nullable bool) (parquet.Node, error) {
	var n parquet.Node
	switch t := dt.(type) {
	case types.PrimitiveType:
		switch t {
		case types.TypeBoolean:
			n = parquet.Leaf(parquet.BooleanType)
		case types.TypeByte:
			n = parquet.Int(8)
		case types.TypeShort:
			n = parquet.Int(16)
		case types.TypeInteger:
			n = parquet.Leaf(parquet.Int32Type)
		case types.TypeLong:
			n = parquet.Leaf(parquet.Int64Type)
		case types.TypeFloat:
			n = parquet.Leaf(parquet.FloatType)
		case types.TypeDouble:
			n = parquet.Leaf(parquet.DoubleType)
		case types.TypeString:
			n = parquet.Leaf(byteArrayType{Type: parquet.String().Type(), text: true})
		case types.TypeBinary:
			n = parquet.Leaf(byteArrayType{Type: parquet.ByteArrayType})
		case types.TypeDate:
			n = parquet.Date()
		case types.TypeTimestamp:
			n = parquet.TimestampAdjusted(parquet.Microsecond, true)
		case types.TypeTimestampNTZ:
			n = parquet.Leaf(ntzType{parquet.TimestampAdjusted(parquet.Microsecond, false).Type()})
		default:
			return nil, fmt.Errorf("%w: column type %q", types.ErrUnsupportedFeature, string(t))
		}
	case types.DecimalType:
		switch {
		case t.Precision <= 9:
			n = parquet.Decimal(t.Scale, t.Precision, parquet.Int32Type)
		case t.Precision <= 18:
			n = parquet.Decimal(t.Scale, t.Precision, parquet.Int64Type)
		default:
			size := decimalByteLen(t.Precision)
			inner := parquet.Decimal(t.Scale, t.Precision, parquet.FixedLenByteArrayType(size)).Type()
			n = parquet.Leaf(flbaDecimalType{Type: inner, size: size})
		}
	case *types.ArrayType:
		el, err := parquetNode(t.ElementType, t.ContainsNull)
		if err != nil {
			return nil, err
		}
		n = parquet.List(el)
	case *types.MapType:
		k, err := parquetNode(t.KeyType, false)
		if err != nil {
			return nil, err
		}
		v, err := parquetNode(t.ValueType, t.ValueContainsNull)
		if err != nil {
			return nil, err
		}
		n = parquet.Map(k, v)
	case *types.StructType:
		g, err := parquetGroup(t)
		if err != nil {
			return nil, err
		}
		n = g
	default:
		return nil, fmt.Errorf("%w: data type %v", types.ErrUnsupportedFeature, dt)
	}
	if nullable {
		n = parquet.Optional(n)
	}
	return n, nil
}

// decimalByteLen returns the fewest bytes holding any two's complement
// unscaled value of the given precision: 10^p - 1 plus a sign bit.
func decimalByteLen(precision int) int {
	maxUnscaled := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(precision)), nil)
	maxUnscaled.Sub(maxUnscaled, big.NewInt(1))
	return (maxUnscaled.BitLen() + 1 + 7) / 8
}

// groupNode is a Parquet group whose fields keep their order.
type groupNode struct {
	fields []parquet.Field
}

func (g *groupNode) ID() int                                 { return 0 }
func (g *groupNode) String() string                          { return "group" }
func (g *groupNode) Type() parquet.Type                      { return parquet.Group{}.Type() }
func (g *groupNode) Optional() bool                          { return false }
func (g *groupNode) Repeated() bool                          { return false }
func (g *groupNode) Required() bool                          { return true }
func (g *groupNode) Leaf() bool                              { return false }
func (g *groupNode) Fields() []parquet.Field                 { return g.fields }
func (g *groupNode) Encoding() encoding.Encoding             { return nil }
func (g *groupNode) Compression() compress.Codec             { return nil }
func (g *groupNode) GoType() reflect.Type                    { return goStructOf(g.fields) }
func (f *namedField) Name() string                           { return f.name }
func (f *namedField) Value(base reflect.Value) reflect.Value { return base.Field(f.index) }

// namedField is a field of a groupNode.
type namedField struct {
	parquet.Node
	name  string
	index int
}

func goStructOf(fields []parquet.Field) reflect.Type {
	sf := make([]reflect.StructField, len(fields))
	for i, f := range fields {
		sf[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: f.GoType(),
			Tag:  reflect.StructTag(`parquet:` + strconv.Quote(f.Name())),
		}
	}
	return reflect.StructOf(sf)
}

// ntzType is TIMESTAMP(MICROS, isAdjustedToUTC=false) without the legacy
// TIMESTAMP_MICROS converted type, which would claim UTC adjustment.
type ntzType struct{ parquet.Type }

func (ntzType) ConvertedType() *deprecated.ConvertedType { return nil }

// flbaDecimalType is a DECIMAL stored as FIXED_LEN_BYTE_ARRAY. parquet-go
// orders such values as unsigned bytes, which is wrong for negative numbers,
// so the writer skips their statistics and this type writes a page index
// whose bounds are the full range of the type: correct, if not selective.
type flbaDecimalType struct {
	parquet.Type
	size int
}

func (t flbaDecimalType) NewColumnIndexer(int) parquet.ColumnIndexer {
	return &wideIndexer{size: t.size}
}

type wideIndexer struct {
	size       int
	nullPages  []bool
	nullCounts []int64
}

func (w *wideIndexer) Reset() { w.nullPages, w.nullCounts = w.nullPages[:0], w.nullCounts[:0] }

func (w *wideIndexer) IndexPage(numValues, numNulls int64, _, _ parquet.Value) {
	w.nullPages = append(w.nullPages, numValues == numNulls)
	w.nullCounts = append(w.nullCounts, numNulls)
}

func (w *wideIndexer) ColumnIndex() format.ColumnIndex {
	lo := make([]byte, w.size)
	hi := make([]byte, w.size)
	lo[0] = 0x80
	hi[0] = 0x7f
	for i := 1; i < w.size; i++ {
		hi[i] = 0xff
	}
	mins := make([][]byte, len(w.nullPages))
	maxs := make([][]byte, len(w.nullPages))
	for i, null := range w.nullPages {
		if null {
			mins[i], maxs[i] = []byte{}, []byte{}
		} else {
			mins[i], maxs[i] = lo, hi
		}
	}
	return format.ColumnIndex{
		NullPages:     append([]bool(nil), w.nullPages...),
		MinValues:     mins,
		MaxValues:     maxs,
		BoundaryOrder: format.Unordered,
		NullCounts:    append([]int64(nil), w.nullCounts...),
	}
}

// flbaDecimalPaths returns the column paths of FIXED_LEN_BYTE_ARRAY decimals
// in a schema, whose statistics parquet-go would get wrong.
func flbaDecimalPaths(st *types.StructType) [][]string {
	var out [][]string
	var walk func(dt types.DataType, path []string)
	walk = func(dt types.DataType, path []string) {
		switch t := dt.(type) {
		case types.DecimalType:
			if t.Precision > 18 {
				out = append(out, append([]string(nil), path...))
			}
		case *types.StructType:
			for _, f := range t.Fields {
				walk(f.Type, append(path, f.PhysicalName()))
			}
		case *types.ArrayType:
			walk(t.ElementType, append(path, "list", "element"))
		case *types.MapType:
			walk(t.KeyType, append(path, "key_value", "key"))
			walk(t.ValueType, append(path, "key_value", "value"))
		}
	}
	walk(st, nil)
	return out
}

// byteArrayType is the parquet-go type of a string (text) or binary
// column, whose pages give short bounds when they hold a huge value (see
// hugeValueBytes). parquet-go copies a page's bounds whole into the column
// index it builds, then cuts them to parquet.DefaultColumnIndexSizeLimit
// bytes, and into the statistics of the column chunk, which stay in memory
// until the file is closed and go into its footer. With short bounds a
// huge value is copied once fewer for each bound it is, and the footer
// does not hold it.
type byteArrayType struct {
	parquet.Type
	text bool
}

// NewColumnBuffer returns parquet-go's column buffer, whose pages have
// short bounds when they hold a huge value.
func (t byteArrayType) NewColumnBuffer(columnIndex, numValues int) parquet.ColumnBuffer {
	return &boundedColumnBuffer{ColumnBuffer: t.Type.NewColumnBuffer(columnIndex, numValues), text: t.text}
}

// boundedColumnBuffer is a column buffer of byte arrays whose pages have
// short bounds when they hold a huge value. (It takes parquet-go's methods
// of column buffers, unexported ones too, from the one it holds.)
type boundedColumnBuffer struct {
	parquet.ColumnBuffer
	text bool
}

// Page returns the values of the buffer as a page, with short bounds if it
// has a huge one: a page of ordinary values is returned as it is, after a
// look at its size.
func (b *boundedColumnBuffer) Page() parquet.Page {
	p := b.hugePage()
	if p == nil {
		p = b.ColumnBuffer.Page()
	}
	if p.Size() < hugeValueBytes {
		return p
	}
	lo, hi, ok := p.Bounds()
	if !ok || len(lo.ByteArray()) < hugeValueBytes && len(hi.ByteArray()) < hugeValueBytes {
		return p
	}
	if x := lo.ByteArray(); len(x) >= hugeValueBytes {
		lo = parquet.ByteArrayValue(bytes.Clone(x[:boundPrefixLen(x)])).Level(lo.RepetitionLevel(), lo.DefinitionLevel(), lo.Column())
	}
	if x := hi.ByteArray(); len(x) >= hugeValueBytes {
		// Without a short upper bound, the page keeps the value.
		if bound := upperBound(x, b.text); bound != nil {
			hi = parquet.ByteArrayValue(bound).Level(hi.RepetitionLevel(), hi.DefinitionLevel(), hi.Column())
		}
	}
	return &boundedPage{Page: p, lo: lo, hi: hi}
}

// hugePage returns the page of a buffer that holds one value, a huge one,
// or nil for any other buffer. parquet-go copies the values of a buffer
// of one value into a new buffer to make its page, taking them for
// unordered (orderOfUint32 calls fewer than two offsets unordered); this
// page refers to the value where the buffer holds it.
func (b *boundedColumnBuffer) hugePage() parquet.Page {
	if b.ColumnBuffer.Len() != 1 {
		return nil
	}
	var v [1]parquet.Value
	if n, _ := b.ColumnBuffer.ReadValuesAt(v[:], 0); n != 1 {
		return nil
	}
	x := v[0].ByteArray()
	if len(x) < hugeValueBytes {
		return nil
	}
	return b.ColumnBuffer.Type().NewPage(b.ColumnBuffer.Column(), 1, encoding.ByteArrayValues(x, []uint32{0, uint32(len(x))}))
}

// boundPrefixBytes is about how many bytes of a huge value a short bound
// keeps: more than the column index keeps of a bound
// (parquet.DefaultColumnIndexSizeLimit), so that the index is the one
// parquet-go would write with the whole value, and few enough to be cheap.
const boundPrefixBytes = 64

// boundPrefixLen returns the length of the prefix of a huge value x that a
// short bound keeps: boundPrefixBytes, less the bytes of a character cut
// there, so that the prefix of a string is one.
func boundPrefixLen(x []byte) int {
	n := boundPrefixBytes
	for i := 1; i < utf8.UTFMax && !utf8.RuneStart(x[n]); i++ {
		n--
	}
	return n
}

// upperBound returns a short value larger than the huge value x, which
// begins as x does for more than the column index keeps, or nil if it
// finds none: for a string, its prefix followed by U+10FFFF; for a binary
// value, its prefix with the last byte that is not 0xff incremented.
func upperBound(x []byte, text bool) []byte {
	p := x[:boundPrefixLen(x)]
	if text {
		bound := append(bytes.Clone(p), string(utf8.MaxRune)...)
		if bytes.Compare(bound, x) <= 0 {
			// x goes on with U+10FFFF, or bytes that are not UTF-8.
			return nil
		}
		return bound
	}
	for i := len(p) - 1; i >= parquet.DefaultColumnIndexSizeLimit; i-- {
		if p[i] != 0xff {
			bound := bytes.Clone(p[:i+1])
			bound[i]++
			return bound
		}
	}
	return nil
}

// boundedPage is a page of byte arrays that has short bounds for a huge
// smallest or largest value: a prefix of it for the smallest, a larger
// value that begins alike for the largest (see upperBound). Parquet lets
// the bounds of a column chunk's statistics be such values, as long as
// they are still values of the column's logical type (parquet.thrift,
// Statistics); parquet-go's column index keeps the same beginning of them
// as of the values.
type boundedPage struct {
	parquet.Page
	lo, hi parquet.Value
}

// Bounds returns the short bounds of the page.
func (p *boundedPage) Bounds() (lo, hi parquet.Value, ok bool) { return p.lo, p.hi, true }
