package parquet

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// StringStatsPrefixLength is the number of characters kept of string values
// in minValues and maxValues, as Spark does.
const StringStatsPrefixLength = 32

// maxRune is appended to a truncated maximum string so that it stays an
// upper bound of the values it stands for.
const maxRune = utf8.MaxRune

// statsCollector computes Spark-compatible statistics for the rows of one
// file: numRecords; minValues and maxValues for numbers, decimals, strings,
// dates and timestamps outside arrays and maps; nullCount for every column
// (nested struct fields get nested objects). Columns are keyed by their
// physical names, as column mapping asks of the stats in the log.
type statsCollector struct {
	numRecords int64
	cols       []*colStats
}

type colStats struct {
	name      string
	typ       types.DataType
	children  []*colStats // struct fields
	nullCount int64
	min, max  any
	noBounds  bool // a value (NaN, ±Inf) that JSON cannot bound
}

func newStatsCollector(st *types.StructType) *statsCollector {
	return &statsCollector{cols: newColStats(st)}
}

func newColStats(st *types.StructType) []*colStats {
	out := make([]*colStats, len(st.Fields))
	for i, f := range st.Fields {
		c := &colStats{name: f.PhysicalName(), typ: f.Type}
		if sub, ok := f.Type.(*types.StructType); ok {
			c.children = newColStats(sub)
		}
		out[i] = c
	}
	return out
}

// add records one row of normalised values, in field order.
func (s *statsCollector) add(row []any) {
	s.numRecords++
	for i, c := range s.cols {
		c.observe(row[i])
	}
}

// observeNulls records n null values; a null struct is null in each of its
// fields.
func (c *colStats) observeNulls(n int64) {
	if n == 0 {
		return
	}
	if _, ok := c.typ.(*types.StructType); ok {
		for _, ch := range c.children {
			ch.observeNulls(n)
		}
		return
	}
	c.nullCount += n
}

// observe records one value of the column: a null, a struct's fields, or
// a value for the bounds.
func (c *colStats) observe(v any) {
	if v == nil {
		c.observeNulls(1)
		return
	}
	if _, ok := c.typ.(*types.StructType); ok {
		r := v.(types.Row)
		for i, ch := range c.children {
			ch.observe(r[i])
		}
		return
	}
	if !hasBounds(c.typ) || c.noBounds {
		return
	}
	switch x := v.(type) {
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			c.noBounds, c.min, c.max = true, nil, nil
			return
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			c.noBounds, c.min, c.max = true, nil, nil
			return
		}
	case string:
		if !utf8.ValidString(x) {
			c.noBounds, c.min, c.max = true, nil, nil
			return
		}
	}
	if c.min == nil || compareValues(v, c.min) < 0 {
		c.min = keptBound(v)
	}
	if c.max == nil || compareValues(v, c.max) > 0 {
		c.max = keptBound(v)
	}
}

// keptBound returns what the stats keep of a new bound v: v, or the
// statsPrefix of a long string, as a string of its own. The stats of a
// column then hold about as much of a long value as they write, and do not
// keep alive the value they would share their bytes with.
//
// A kept prefix orders like the value, for the bounds of the file: if v is
// smaller than the kept minimum p, so is it than the minimum, whose prefix
// p is; if v is not smaller than p but smaller than the minimum m, then
// statsPrefix(p) ≤ statsPrefix(v) ≤ statsPrefix(m) by statsPrefix's order,
// and statsPrefix(p) = statsPrefix(m) = p, so v has the prefix p, which
// the stats keep; and likewise for the maximum.
func keptBound(v any) any {
	if s, ok := v.(string); ok && len(s) > keptStringBytes {
		if p := statsPrefix(s); len(p) < len(s) {
			return strings.Clone(p)
		}
	}
	return v
}

// keptStringBytes is the longest string the stats keep whole as a bound:
// the statsPrefix of a short string is about as long as the string, and
// copying it at every new bound would cost more than keeping the string
// alive.
const keptStringBytes = 256

// statsPrefix returns the beginning of s that its minValues and maxValues
// depend on: its first StringStatsPrefixLength characters, then any run of
// maxRune after them and the character that ends the run (truncateString
// and truncateMaxString make the same strings of it as of s).
//
// Prefixes keep the order of strings: if s ≤ t, then statsPrefix(s) ≤
// statsPrefix(t). Where s and t first differ, at character i, either both
// prefixes hold character i, and differ there as s and t do, or one of them
// ends before it; that one ends where it does because of characters s and
// t share, so the other ends there too and the prefixes are equal (if s is
// a prefix of t, statsPrefix(s) is one of statsPrefix(t) likewise). And
// statsPrefix(statsPrefix(s)) = statsPrefix(s).
func statsPrefix(s string) string {
	n, last := 0, false
	for i, r := range s {
		if last {
			return s[:i]
		}
		n++
		last = n > StringStatsPrefixLength && r != maxRune
	}
	return s
}

// hasBounds reports whether Spark records minValues and maxValues for a type.
func hasBounds(dt types.DataType) bool {
	switch t := dt.(type) {
	case types.DecimalType:
		return true
	case types.PrimitiveType:
		switch t {
		case types.TypeByte, types.TypeShort, types.TypeInteger, types.TypeLong, types.TypeFloat, types.TypeDouble,
			types.TypeString, types.TypeDate, types.TypeTimestamp, types.TypeTimestampNTZ:
			return true
		}
	}
	return false
}

// compareValues orders two non-null normalised values of the same type.
func compareValues(a, b any) int {
	switch x := a.(type) {
	case int8:
		return cmpOrdered(x, b.(int8))
	case int16:
		return cmpOrdered(x, b.(int16))
	case int32:
		return cmpOrdered(x, b.(int32))
	case int64:
		return cmpOrdered(x, b.(int64))
	case float32:
		return cmpOrdered(x, b.(float32))
	case float64:
		return cmpOrdered(x, b.(float64))
	case string:
		return cmpOrdered(x, b.(string))
	case types.Decimal:
		return x.Cmp(b.(types.Decimal))
	case time.Time:
		return x.Compare(b.(time.Time))
	}
	return 0
}

func cmpOrdered[T int8 | int16 | int32 | int64 | float32 | float64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// JSON returns the stats string.
func (s *statsCollector) JSON() (string, error) {
	var o types.OrderedObject
	o.Add("numRecords", s.numRecords)
	mins, maxs, nulls := statsObjects(s.cols)
	o.Add("minValues", mins)
	o.Add("maxValues", maxs)
	o.Add("nullCount", nulls)
	b, err := o.MarshalJSON()
	if err != nil {
		return "", fmt.Errorf("marshal stats: %w", err)
	}
	return string(b), nil
}

func statsObjects(cols []*colStats) (mins, maxs, nulls *types.OrderedObject) {
	mins, maxs, nulls = &types.OrderedObject{}, &types.OrderedObject{}, &types.OrderedObject{}
	for _, c := range cols {
		if c.children != nil {
			cmin, cmax, cnull := statsObjects(c.children)
			if cmin.Len() > 0 {
				mins.Add(c.name, cmin)
			}
			if cmax.Len() > 0 {
				maxs.Add(c.name, cmax)
			}
			nulls.Add(c.name, cnull)
			continue
		}
		nulls.Add(c.name, c.nullCount)
		if c.min != nil && !c.noBounds {
			mins.Add(c.name, statsValue(c.typ, c.min, false))
			if mx := statsValue(c.typ, c.max, true); mx != nil {
				maxs.Add(c.name, mx)
			}
		}
	}
	return mins, maxs, nulls
}

// statsValue formats a bound the way Spark writes it in stats JSON. It
// returns nil when no valid bound can be written.
func statsValue(dt types.DataType, v any, isMax bool) any {
	switch x := v.(type) {
	case float32:
		return json.Number(strconv.FormatFloat(float64(x), 'g', -1, 32))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case types.Decimal:
		return json.Number(x.String())
	case string:
		if isMax {
			s, ok := truncateMaxString(x, StringStatsPrefixLength)
			if !ok {
				return nil
			}
			return s
		}
		return truncateString(x, StringStatsPrefixLength)
	case time.Time:
		switch dt {
		case types.TypeDate:
			return x.Format("2006-01-02")
		case types.TypeTimestamp:
			ms := types.FloorDiv(x.UnixMicro(), 1000)
			return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
		default:
			ms := types.FloorDiv(x.UnixMicro(), 1000)
			return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000")
		}
	}
	return v
}

// truncateString returns the first n characters of s.
func truncateString(s string, n int) string {
	i := 0
	for pos := range s {
		if i == n {
			return s[:pos]
		}
		i++
	}
	return s
}

// truncateMaxString returns a string of about n characters that is greater
// than or equal to s in byte order: s itself when short enough, else a prefix
// followed by U+10FFFF. It reports false when no such string exists.
func truncateMaxString(s string, n int) (string, bool) {
	prefix := truncateString(s, n)
	if len(prefix) == len(s) {
		return s, true
	}
	// The prefix plus the largest character beats s unless s continues with
	// that character; extend the prefix past any such characters (slicing
	// s: a long run of them, appended one by one, took quadratic time).
	end := len(prefix)
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		if r != maxRune {
			return s[:end] + string(maxRune), true
		}
		end += size
	}
	return s, true
}
