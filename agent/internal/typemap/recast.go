package typemap

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// Recast converts v, a value of a Delta column whose type was from, to the
// Go value of Delta type to, for a column whose PostgreSQL type changed:
// numbers widen or narrow when they fit, any primitive becomes its text in
// PostgreSQL's output form, and text is parsed as the new type. It reports
// false when v has no value of type to; the caller then stores null and
// says so (_replaced).
func Recast(v any, from, to delta.DataType) (any, bool) {
	if v == nil {
		return nil, true
	}
	if from.String() == to.String() {
		return v, true
	}
	switch t := to.(type) {
	case *delta.ArrayType:
		elems, ok := v.([]any)
		f, fromArray := from.(*delta.ArrayType)
		if !ok || !fromArray {
			return nil, false
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			if out[i], ok = Recast(e, f.ElementType, t.ElementType); !ok {
				return nil, false
			}
		}
		return out, true
	case delta.PrimitiveType:
		if t == delta.TypeString {
			s, ok := deltaText(v, from)
			return s, ok
		}
	}
	if s, ok := v.(string); ok {
		return parseText(s, to)
	}
	out, err := delta.Normalize(to, v)
	return out, err == nil
}

// deltaText returns the text PostgreSQL prints for a primitive Delta value
// (the session settings of capture: ISO dates, UTC, hex bytea).
func deltaText(v any, from delta.DataType) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case delta.Decimal:
		return x.String(), true
	case []byte:
		return `\x` + hex.EncodeToString(x), true
	case time.Time:
		if from == delta.TypeDate {
			return x.UTC().Format("2006-01-02"), true
		}
		return x.UTC().Format("2006-01-02 15:04:05.999999") + "+00", true
	}
	return "", false
}

// parseText parses PostgreSQL's text of a value as Delta type to.
func parseText(s string, to delta.DataType) (any, bool) {
	s = strings.TrimSpace(s)
	switch to {
	case delta.TypeBoolean:
		b, err := strconv.ParseBool(s)
		return b, err == nil
	case delta.TypeShort, delta.TypeInteger, delta.TypeLong:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, false
		}
		out, err := delta.Normalize(to, n)
		return out, err == nil
	case delta.TypeFloat, delta.TypeDouble:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, false
		}
		out, err := delta.Normalize(to, f)
		return out, err == nil
	case delta.TypeDate:
		d, err := time.Parse("2006-01-02", s)
		return d, err == nil
	case delta.TypeTimestamp:
		for _, layout := range []string{"2006-01-02 15:04:05.999999Z07", "2006-01-02 15:04:05.999999Z07:00", "2006-01-02 15:04:05.999999", "2006-01-02"} {
			if t, err := time.Parse(layout, s); err == nil {
				return delta.TimeFromMicros(t.UnixMicro()), true
			}
		}
		return nil, false
	}
	if _, ok := to.(delta.DecimalType); ok {
		out, err := delta.Normalize(to, s)
		return out, err == nil
	}
	return nil, false
}
