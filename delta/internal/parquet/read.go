package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// ReadFile reads the columns of st from a Parquet file with arrow-go and
// returns its rows in st's field order, using the Go types listed in the
// package documentation of delta. Columns, nested ones too, are matched by
// their fields' physical names: a field with a column mapping physical name
// by that name exactly, any other by its name (exactly, else ignoring case).
// Columns of st missing from the file read as null.
func ReadFile(ctx context.Context, path string, st *types.StructType) ([]types.Row, error) {
	rows := []types.Row{}
	err := ReadBatches(ctx, path, st, func(batch []types.Row) error {
		rows = append(rows, batch...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// BatchRows is the most rows ReadBatches hands over at once.
const BatchRows = 16 * 1024

// readerProperties are the Parquet reader's properties: arrow-go's
// defaults, but for its limits on the size of a page (64 MiB compressed,
// 256 MiB not), which a page holding one large value passes (a value of a
// column may be up to PostgreSQL's 1 GB); Parquet's own limit, a page's
// size being an int32, is kept.
func readerProperties() *pq.ReaderProperties {
	props := pq.NewReaderProperties(memory.DefaultAllocator)
	props.MaxCompressedPageSize = math.MaxInt32
	props.MaxUncompressedPageSize = math.MaxInt32
	return props
}

// ReadBatches reads a Parquet file as ReadFile does, and hands its rows to
// fn in order, at most BatchRows at a time, which fn may keep. The memory
// it holds is a batch's, whatever the file's size. Every row of the file
// is handed over, in file order across its row groups: the n-th row handed
// over is the row of index n-1, as deletion vectors count rows.
//
// A corrupt file fails with an error: arrow-go panics on many (a nil page
// header, an unknown logical type or encoding, arrays shorter than they
// say), and those panics are turned into the error.
func ReadBatches(ctx context.Context, path string, st *types.StructType, fn func([]types.Row) error) (err error) {
	// inFn is set while fn runs: its panics are the caller's own.
	inFn := false
	defer func() {
		if r := recover(); r != nil {
			if inFn {
				panic(r)
			}
			err = fmt.Errorf("read parquet %s: corrupt file: %v", path, r)
		}
	}()
	fn0 := fn
	fn = func(rows []types.Row) error {
		inFn = true
		err := fn0(rows)
		inFn = false // not on a panic, which is left to go on
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read parquet: %w", err)
	}
	pr, err := file.OpenParquetFile(path, false, file.WithReadProps(readerProperties()))
	if err != nil {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	defer pr.Close()
	if err := checkColumnChunks(pr, info.Size()); err != nil {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	dropArrowSchema(pr)
	newRows := func(n int) []types.Row {
		rows := make([]types.Row, n)
		for i := range rows {
			rows[i] = make(types.Row, len(st.Fields))
		}
		return rows
	}
	psch := pr.MetaData().Schema
	var leaves []int
	for i := 0; i < psch.NumColumns(); i++ {
		if _, idx := matchField(st, psch.ColumnRoot(i).Name()); idx >= 0 {
			leaves = append(leaves, i)
		}
	}
	if len(leaves) == 0 {
		// No column of st is in the file: its rows are all null.
		for left := pr.NumRows(); left > 0; left -= BatchRows {
			if err := fn(newRows(int(min(left, BatchRows)))); err != nil {
				return err
			}
		}
		return nil
	}
	if pr.NumRows() == 0 {
		return nil
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: BatchRows}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	defer rr.Release()
	convs := make([]converter, len(rr.Schema().Fields()))
	idxs := make([]int, len(convs))
	for c, af := range rr.Schema().Fields() {
		f, idx := matchField(st, af.Name)
		if idxs[c] = idx; idx < 0 {
			continue
		}
		if convs[c], err = makeConverter(f.Type, af.Type); err != nil {
			return fmt.Errorf("read parquet %s: column %q: %w", path, f.Name, err)
		}
	}
	for rr.Next() {
		rec := rr.RecordBatch()
		rows := newRows(int(rec.NumRows()))
		for c, conv := range convs {
			if conv == nil {
				continue
			}
			get, idx := conv(rec.Column(c)), idxs[c]
			for i := range rows {
				rows[i][idx] = get(i)
			}
		}
		if err := fn(rows); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read parquet %s: %w", path, err)
	}
	return nil
}

// arrowSchemaKey is the key of the file metadata under which Arrow writers
// (arrow-go, arrow-rs: delta-rs, delta-kernel-rs) store the Arrow schema of
// the file, in Arrow's IPC format.
const arrowSchemaKey = "ARROW:schema"

// dropArrowSchema removes the stored Arrow schema from the file's metadata
// before arrow-go reads it: the columns are read as their Parquet types say,
// which the converters take, and arrow-go decodes a stored schema trusting
// the lengths it holds, so that a corrupt one allocates without bound (a
// fatal out of memory, which no recover catches).
func dropArrowSchema(pr *file.Reader) {
	md := pr.MetaData().FileMetaData
	kept := md.KeyValueMetadata[:0:0]
	for _, kv := range md.KeyValueMetadata {
		if kv.Key != arrowSchemaKey {
			kept = append(kept, kv)
		}
	}
	md.KeyValueMetadata = kept
}

// checkColumnChunks checks that the column chunks the footer of a file of
// size bytes describes lie within the file. arrow-go reads a chunk into a
// buffer of the length the footer gives, for a column of a struct in a
// goroutine of its own: a corrupt length would allocate without bound, or
// crash the process (makeslice: len out of range) out of reach of any
// recover.
func checkColumnChunks(pr *file.Reader, size int64) error {
	md := pr.MetaData()
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		if rg.NumColumns() != md.Schema.NumColumns() {
			return fmt.Errorf("row group %d has %d columns, the schema %d", g, rg.NumColumns(), md.Schema.NumColumns())
		}
		for c := range rg.NumColumns() {
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d: %w", g, err)
			}
			// Where arrow-go starts reading the chunk.
			start := col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
				start = col.DictionaryPageOffset()
			}
			if n := col.TotalCompressedSize(); start < 0 || n < 0 || start > size || n > size-start {
				return fmt.Errorf("row group %d, column %d: %d bytes at offset %d do not fit in the file's %d", g, c, n, start, size)
			}
		}
	}
	return nil
}

// matchField finds the field of st whose column in a file is named name:
// the field of that physical name, else a field without a physical name of
// its own whose name equals it ignoring case. A physical name is matched
// exactly because, unlike a display name, it must never be confused with
// another column's.
func matchField(st *types.StructType, name string) (*types.StructField, int) {
	for i, f := range st.Fields {
		if f.PhysicalName() == name {
			return f, i
		}
	}
	for i, f := range st.Fields {
		if !f.HasPhysicalName() && strings.EqualFold(f.Name, name) {
			return f, i
		}
	}
	return nil, -1
}

// converter binds to one arrow array and returns the Go value of row i.
type converter func(arr arrow.Array) func(i int) any

func withNulls(arr arrow.Array, get func(i int) any) func(i int) any {
	if arr.NullN() == 0 {
		return get
	}
	return func(i int) any {
		if arr.IsNull(i) {
			return nil
		}
		return get(i)
	}
}

// makeConverter returns a converter from arrow values of type at to Go values
// of the Delta type dt.
func makeConverter(dt types.DataType, at arrow.DataType) (converter, error) {
	mismatch := fmt.Errorf("%w: file type %s does not match %s", types.ErrInvalidSchema, at, dt)
	switch t := dt.(type) {
	case types.PrimitiveType:
		return primitiveConverter(t, at, mismatch)
	case types.DecimalType:
		scale := int32(t.Scale)
		switch a := at.(type) {
		case *arrow.Decimal128Type:
			fileScale := a.Scale
			return func(arr arrow.Array) func(int) any {
				d := arr.(*array.Decimal128)
				return withNulls(arr, func(i int) any {
					return rescaleOrKeep(types.Decimal{Unscaled: d.Value(i).BigInt(), Scale: fileScale}, scale)
				})
			}, nil
		case *arrow.Decimal256Type:
			fileScale := a.Scale
			return func(arr arrow.Array) func(int) any {
				d := arr.(*array.Decimal256)
				return withNulls(arr, func(i int) any {
					return rescaleOrKeep(types.Decimal{Unscaled: d.Value(i).BigInt(), Scale: fileScale}, scale)
				})
			}, nil
		case *arrow.Int32Type, *arrow.Int64Type:
			return func(arr arrow.Array) func(int) any {
				return withNulls(arr, func(i int) any {
					return types.Decimal{Unscaled: big.NewInt(intAt(arr, i)), Scale: scale}
				})
			}, nil
		}
		return nil, mismatch
	case *types.ArrayType:
		var values arrow.DataType
		switch a := at.(type) {
		case *arrow.ListType:
			values = a.Elem()
		case *arrow.LargeListType:
			values = a.Elem()
		default:
			return nil, mismatch
		}
		el, err := makeConverter(t.ElementType, values)
		if err != nil {
			return nil, err
		}
		return func(arr arrow.Array) func(int) any {
			l := arr.(array.ListLike)
			get := el(l.ListValues())
			return withNulls(arr, func(i int) any {
				start, end := l.ValueOffsets(i)
				out := make([]any, 0, end-start)
				for j := start; j < end; j++ {
					out = append(out, get(int(j)))
				}
				return out
			})
		}, nil
	case *types.MapType:
		mt, ok := at.(*arrow.MapType)
		if !ok {
			return nil, mismatch
		}
		kc, err := makeConverter(t.KeyType, mt.KeyType())
		if err != nil {
			return nil, err
		}
		vc, err := makeConverter(t.ValueType, mt.ItemType())
		if err != nil {
			return nil, err
		}
		return func(arr arrow.Array) func(int) any {
			m := arr.(*array.Map)
			keys, items := kc(m.Keys()), vc(m.Items())
			return withNulls(arr, func(i int) any {
				start, end := m.ValueOffsets(i)
				out := make([]types.MapEntry, 0, end-start)
				for j := start; j < end; j++ {
					out = append(out, types.MapEntry{Key: keys(int(j)), Value: items(int(j))})
				}
				return out
			})
		}, nil
	case *types.StructType:
		stt, ok := at.(*arrow.StructType)
		if !ok {
			return nil, mismatch
		}
		type sub struct {
			idx  int
			conv converter
		}
		var subs []sub
		for j, af := range stt.Fields() {
			f, idx := matchField(t, af.Name)
			if idx < 0 {
				continue
			}
			c, err := makeConverter(f.Type, af.Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			subs = append(subs, sub{idx: idx, conv: func(arr arrow.Array) func(int) any {
				return c(arr.(*array.Struct).Field(j))
			}})
		}
		n := len(t.Fields)
		return func(arr arrow.Array) func(int) any {
			gets := make([]func(int) any, len(subs))
			for k, s := range subs {
				gets[k] = s.conv(arr)
			}
			return withNulls(arr, func(i int) any {
				r := make(types.Row, n)
				for k, s := range subs {
					r[s.idx] = gets[k](i)
				}
				return r
			})
		}, nil
	}
	return nil, fmt.Errorf("%w: data type %v", types.ErrUnsupportedFeature, dt)
}

func rescaleOrKeep(d types.Decimal, scale int32) types.Decimal {
	if r, err := d.Rescale(scale); err == nil {
		return r
	}
	return d
}

// intAt returns an integer array value as int64.
func intAt(arr arrow.Array, i int) int64 {
	switch a := arr.(type) {
	case *array.Int8:
		return int64(a.Value(i))
	case *array.Int16:
		return int64(a.Value(i))
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Uint8:
		return int64(a.Value(i))
	case *array.Uint16:
		return int64(a.Value(i))
	case *array.Uint32:
		return int64(a.Value(i))
	case *array.Uint64:
		return int64(a.Value(i))
	}
	return 0
}

func isIntType(at arrow.DataType) bool {
	switch at.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		return true
	}
	return false
}

func primitiveConverter(t types.PrimitiveType, at arrow.DataType, mismatch error) (converter, error) {
	switch t {
	case types.TypeBoolean:
		if at.ID() != arrow.BOOL {
			return nil, mismatch
		}
		return func(arr arrow.Array) func(int) any {
			b := arr.(*array.Boolean)
			return withNulls(arr, func(i int) any { return b.Value(i) })
		}, nil
	case types.TypeByte, types.TypeShort, types.TypeInteger, types.TypeLong:
		if !isIntType(at) {
			return nil, mismatch
		}
		return func(arr arrow.Array) func(int) any {
			return withNulls(arr, func(i int) any {
				n := intAt(arr, i)
				switch t {
				case types.TypeByte:
					return int8(n)
				case types.TypeShort:
					return int16(n)
				case types.TypeInteger:
					return int32(n)
				}
				return n
			})
		}, nil
	case types.TypeFloat, types.TypeDouble:
		switch at.ID() {
		case arrow.FLOAT32:
			return func(arr arrow.Array) func(int) any {
				a := arr.(*array.Float32)
				return withNulls(arr, func(i int) any {
					if t == types.TypeFloat {
						return a.Value(i)
					}
					return float64(a.Value(i))
				})
			}, nil
		case arrow.FLOAT64:
			return func(arr arrow.Array) func(int) any {
				a := arr.(*array.Float64)
				return withNulls(arr, func(i int) any {
					if t == types.TypeFloat {
						return float32(a.Value(i))
					}
					return a.Value(i)
				})
			}, nil
		}
		return nil, mismatch
	case types.TypeString, types.TypeBinary:
		asString := t == types.TypeString
		switch at.ID() {
		case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.FIXED_SIZE_BINARY, arrow.STRING_VIEW, arrow.BINARY_VIEW:
		default:
			return nil, mismatch
		}
		return func(arr arrow.Array) func(int) any {
			var raw func(int) []byte
			var str func(int) string
			switch a := arr.(type) {
			case *array.String:
				str = a.Value
			case *array.LargeString:
				str = a.Value
			case *array.StringView:
				str = a.Value
			case *array.Binary:
				raw = a.Value
			case *array.LargeBinary:
				raw = a.Value
			case *array.BinaryView:
				raw = a.Value
			case *array.FixedSizeBinary:
				raw = a.Value
			}
			return withNulls(arr, func(i int) any {
				if asString {
					if str != nil {
						return str(i)
					}
					return string(raw(i))
				}
				if str != nil {
					return []byte(str(i))
				}
				return append([]byte{}, raw(i)...)
			})
		}, nil
	case types.TypeDate:
		switch at.ID() {
		case arrow.DATE32:
			return func(arr arrow.Array) func(int) any {
				a := arr.(*array.Date32)
				return withNulls(arr, func(i int) any { return types.DateFromDays(int32(a.Value(i))) })
			}, nil
		case arrow.DATE64:
			return func(arr arrow.Array) func(int) any {
				a := arr.(*array.Date64)
				return withNulls(arr, func(i int) any { return types.DateFromDays(int32(types.FloorDiv(int64(a.Value(i)), 86400000))) })
			}, nil
		}
		return nil, mismatch
	case types.TypeTimestamp, types.TypeTimestampNTZ:
		tt, ok := at.(*arrow.TimestampType)
		if !ok {
			return nil, mismatch
		}
		toMicros := func(v int64) int64 { return v }
		switch tt.Unit {
		case arrow.Second:
			toMicros = func(v int64) int64 { return v * 1_000_000 }
		case arrow.Millisecond:
			toMicros = func(v int64) int64 { return v * 1000 }
		case arrow.Nanosecond:
			toMicros = func(v int64) int64 { return types.FloorDiv(v, 1000) }
		}
		return func(arr arrow.Array) func(int) any {
			a := arr.(*array.Timestamp)
			return withNulls(arr, func(i int) any { return types.TimeFromMicros(toMicros(int64(a.Value(i)))) })
		}, nil
	}
	return nil, fmt.Errorf("%w: column type %q", types.ErrUnsupportedFeature, string(t))
}
