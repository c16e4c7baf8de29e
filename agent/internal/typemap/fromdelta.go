package typemap

import (
	"fmt"
	"math"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// FromDelta converts a value read from a Delta column of type dt, whose
// PostgreSQL type is t, back to the queued form.
func (t Type) FromDelta(v any, dt delta.DataType) store.Value {
	switch x := v.(type) {
	case nil:
		return store.Value{}
	case bool:
		if x {
			return store.Value{Kind: store.KindBool, Int: 1}
		}
		return store.Value{Kind: store.KindBool}
	case int8:
		return store.Value{Kind: store.KindInt16, Int: int64(x)}
	case int16:
		return store.Value{Kind: store.KindInt16, Int: int64(x)}
	case int32:
		return store.Value{Kind: store.KindInt32, Int: int64(x)}
	case int64:
		if t.Kind == store.KindTime {
			return store.Value{Kind: store.KindTime, Int: x}
		}
		return store.Value{Kind: store.KindInt64, Int: x}
	case float32:
		return store.Value{Kind: store.KindFloat32, Int: int64(math.Float32bits(x))}
	case float64:
		return store.Value{Kind: store.KindFloat64, Int: int64(math.Float64bits(x))}
	case delta.Decimal:
		return store.Value{Kind: store.KindNumeric, Bytes: []byte(x.String())}
	case string:
		if t.Kind == store.KindNumeric {
			return store.Value{Kind: store.KindNumeric, Bytes: []byte(x)}
		}
		return store.Value{Kind: store.KindString, Bytes: []byte(x)}
	case []byte:
		return store.Value{Kind: store.KindBytes, Bytes: x}
	case time.Time:
		if dt == delta.TypeDate {
			return store.Value{Kind: store.KindDate, Int: x.Unix() / 86400}
		}
		return store.Value{Kind: store.KindTimestamp, Int: x.UnixMicro()}
	case []any:
		var elemType delta.DataType
		if at, ok := dt.(*delta.ArrayType); ok {
			elemType = at.ElementType
		}
		var elem Type
		if t.Elem != nil {
			elem = *t.Elem
		}
		out := store.Value{Kind: store.KindArray, Elems: make([]store.Value, len(x))}
		for i, e := range x {
			out.Elems[i] = elem.FromDelta(e, elemType)
		}
		return out
	}
	return store.Value{Kind: store.KindString, Bytes: []byte(fmt.Sprint(v))}
}
