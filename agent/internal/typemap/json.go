package typemap

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// JSON renders a queued value as JSON, for the live view, without losing anything:
// 64-bit integers, numerics and timestamps become strings, so that no
// JavaScript client rounds them. It renders the whole value, however large:
// the live view renders the values it holds and sends with BoundedJSON, and
// only key values with JSON.
func JSON(v store.Value) json.RawMessage {
	switch v.Kind {
	case store.KindNull, store.KindUnchanged:
		return json.RawMessage("null")
	case store.KindBool:
		if v.Int != 0 {
			return json.RawMessage("true")
		}
		return json.RawMessage("false")
	case store.KindInt16, store.KindInt32:
		return json.RawMessage(strconv.FormatInt(v.Int, 10))
	case store.KindInt64:
		return quote(strconv.FormatInt(v.Int, 10))
	case store.KindFloat32:
		return floatJSON(float64(math.Float32frombits(uint32(v.Int))), 32)
	case store.KindFloat64:
		return floatJSON(math.Float64frombits(uint64(v.Int)), 64)
	case store.KindNumeric, store.KindString:
		return quote(string(v.Bytes))
	case store.KindBytes:
		return quote(base64.StdEncoding.EncodeToString(v.Bytes))
	case store.KindDate:
		switch v.Int {
		case store.InfinityInt:
			return quote("infinity")
		case store.NegativeInfinityInt:
			return quote("-infinity")
		}
		return quote(time.Unix(v.Int*86400, 0).UTC().Format("2006-01-02"))
	case store.KindTimestamp:
		switch v.Int {
		case store.InfinityInt:
			return quote("infinity")
		case store.NegativeInfinityInt:
			return quote("-infinity")
		}
		return quote(time.UnixMicro(v.Int).UTC().Format("2006-01-02T15:04:05.999999Z07:00"))
	case store.KindTime:
		d := time.Duration(v.Int) * time.Microsecond
		return quote(time.Time{}.Add(d).Format("15:04:05.999999"))
	case store.KindArray:
		b := []byte{'['}
		for i, e := range v.Elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, JSON(e)...)
		}
		return append(b, ']')
	}
	return json.RawMessage("null")
}

// BoundedJSON renders v as JSON does unless it is a text, numeric, bytea
// or array value whose Size is more than limit bytes. Such a value is
// rendered as an object, which JSON never renders, so that no client can
// take it for the value itself:
//
//	{"truncated":true,"bytes":<the value's Size>,"prefix":<its start>}
//
// The prefix of a text or numeric value is a string of its first limit bytes
// at most, cut at a UTF-8 character boundary; of a bytea value, the base64
// of its first bytes, a whole number of 3-byte groups so that it is the
// start of the whole value's base64; of an array, an array of its first
// elements, whole, whose sizes add up to limit at most. Only the prefix is
// converted and escaped, never the whole value: the live view holds many
// renderings of a value, and one value of hundreds of megabytes would
// otherwise be copied several times over to show its first lines. limit
// must be positive.
func BoundedJSON(v store.Value, limit int) json.RawMessage {
	switch v.Kind {
	case store.KindNumeric, store.KindString, store.KindBytes:
		if len(v.Bytes) > limit {
			return truncatedJSON(v, len(v.Bytes), limit)
		}
	case store.KindArray:
		if size := Size(v); size > limit {
			return truncatedJSON(v, size, limit)
		}
	}
	return JSON(v)
}

// BoundedJSONFromDelta renders a value read from a Delta column of type dt
// as BoundedJSON renders the value FromDelta returns, converting only the
// start of a string longer than limit bytes (FromDelta would copy it whole).
func (t Type) BoundedJSONFromDelta(v any, dt delta.DataType, limit int) json.RawMessage {
	if s, ok := v.(string); ok && len(s) > limit {
		return truncatedJSON(t.FromDelta(s[:limit+1], dt), len(s), limit)
	}
	return BoundedJSON(t.FromDelta(v, dt), limit)
}

// Size is the size in bytes BoundedJSON measures a value by: the bytes of
// its text (text, numeric and the types kept as text) or of a bytea; for an
// array, the sum of its elements' sizes; and 8, the size of its queued form,
// for any other value (a number, boolean, date, time or NULL).
func Size(v store.Value) int {
	switch v.Kind {
	case store.KindNumeric, store.KindString, store.KindBytes:
		return len(v.Bytes)
	case store.KindArray:
		n := 0
		for _, e := range v.Elems {
			n += Size(e)
		}
		return n
	}
	return 8
}

// truncatedJSON renders the object that stands for a value of size bytes,
// of which v holds at least the first limit+1 (see BoundedJSON).
func truncatedJSON(v store.Value, size, limit int) json.RawMessage {
	var prefix json.RawMessage
	switch v.Kind {
	case store.KindBytes:
		n := min(len(v.Bytes), limit)
		if n >= 3 {
			n -= n % 3
		}
		prefix = quote(base64.StdEncoding.EncodeToString(v.Bytes[:n]))
	case store.KindArray:
		prefix = arrayPrefix(v.Elems, limit)
	default:
		prefix = quote(string(v.Bytes[:textCut(v.Bytes, limit)]))
	}
	b := make([]byte, 0, len(prefix)+64)
	b = append(b, `{"truncated":true,"bytes":`...)
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, `,"prefix":`...)
	b = append(b, prefix...)
	return append(b, '}')
}

// textCut returns the length of the longest start of text that is at most
// limit bytes and ends at a UTF-8 character boundary. It looks back no
// further than one character: text that is not UTF-8 there is cut at limit,
// and JSON encoding replaces the broken character.
func textCut(text []byte, limit int) int {
	if len(text) <= limit {
		return len(text)
	}
	cut := limit
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(text[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(text[cut]) {
		return limit
	}
	return cut
}

// arrayPrefix renders the JSON array of the first elements, whole, whose
// sizes add up to limit at most.
func arrayPrefix(elems []store.Value, limit int) json.RawMessage {
	b := []byte{'['}
	used := 0
	for i, e := range elems {
		if used += Size(e); used > limit {
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, JSON(e)...)
	}
	return append(b, ']')
}

func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

func floatJSON(f float64, bits int) json.RawMessage {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return quote(strconv.FormatFloat(f, 'g', -1, bits))
	}
	return json.RawMessage(strconv.FormatFloat(f, 'g', -1, bits))
}

// The key parsers of the rows of the type table (typemap.go): a key value
// a client of the live view writes as text, as the value it compares with.

// integerKey returns the key parser of integers of kind k, between lo and
// hi.
func integerKey(k store.Kind, lo, hi int64) func(string) (store.Value, error) {
	return func(text string) (store.Value, error) {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n < lo || n > hi {
			return store.Value{}, fmt.Errorf("%q is not an integer between %d and %d", text, lo, hi)
		}
		return store.Value{Kind: k, Int: n}, nil
	}
}

func boolKey(text string) (store.Value, error) {
	b, err := strconv.ParseBool(text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not a boolean", text)
	}
	v := store.Value{Kind: store.KindBool}
	if b {
		v.Int = 1
	}
	return v, nil
}

func dateKey(text string) (store.Value, error) {
	switch text {
	case "infinity":
		return store.Value{Kind: store.KindDate, Int: store.InfinityInt}, nil
	case "-infinity":
		return store.Value{Kind: store.KindDate, Int: store.NegativeInfinityInt}, nil
	}
	t, err := parseAnyYear("2006-01-02", text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not a date (YYYY-MM-DD)", cut(text))
	}
	return store.Value{Kind: store.KindDate, Int: daysSinceEpoch(t)}, nil
}

// parseAnyYear parses text with layout, whose year, as JSON renders it
// (time.Time.Format), may be before year 0 ("-0044") or after 9999
// ("10000"), which time.Parse does not read: the year is moved into
// 2000..2399 by whole 400-year cycles, after which the Gregorian calendar
// repeats, and the time parsed is moved back by as many.
func parseAnyYear(layout, text string) (time.Time, error) {
	t, err := time.Parse(layout, text)
	if err == nil {
		return t, nil
	}
	digits := strings.TrimPrefix(text, "-")
	n := 0
	for n < len(digits) && n < 10 && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	neg := len(digits) < len(text)
	if n < 4 || n > 9 || n == 4 && !neg {
		return time.Time{}, err
	}
	year, _ := strconv.Atoi(digits[:n])
	if neg {
		year = -year
	}
	cycles := (year - 2000) / 400
	if (year-2000)%400 < 0 {
		cycles--
	}
	t, err2 := time.Parse(layout, strconv.Itoa(year-cycles*400)+digits[n:])
	if err2 != nil {
		return time.Time{}, err
	}
	return t.AddDate(cycles*400, 0, 0), nil
}

// timestampKey reads a timestamp as JSON renders it (RFC 3339).
func timestampKey(text string) (store.Value, error) {
	switch text {
	case "infinity":
		return store.Value{Kind: store.KindTimestamp, Int: store.InfinityInt}, nil
	case "-infinity":
		return store.Value{Kind: store.KindTimestamp, Int: store.NegativeInfinityInt}, nil
	}
	t, err := parseAnyYear(time.RFC3339Nano, text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not an RFC 3339 timestamp", cut(text))
	}
	v := timestampValue(pgtype.Finite, t)
	if v.Kind != store.KindTimestamp {
		return store.Value{}, fmt.Errorf("%q is out of the range of a timestamp", cut(text))
	}
	return v, nil
}

// timeKey reads a time of day as JSON renders it (15:04:05.999999).
func timeKey(text string) (store.Value, error) {
	t, err := time.Parse("15:04:05.999999", text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not a time of day (15:04:05.999999)", cut(text))
	}
	return store.Value{Kind: store.KindTime, Int: t.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)).Microseconds()}, nil
}

// floatKey returns the key parser of floats of kind k and the given bits.
func floatKey(k store.Kind, bits int) func(string) (store.Value, error) {
	return func(text string) (store.Value, error) {
		f, err := strconv.ParseFloat(text, bits)
		if err != nil {
			return store.Value{}, fmt.Errorf("%q is not a number", cut(text))
		}
		if bits == 32 {
			return store.Value{Kind: k, Int: int64(math.Float32bits(float32(f)))}, nil
		}
		return store.Value{Kind: k, Int: int64(math.Float64bits(f))}, nil
	}
}

// byteaKey reads bytes as JSON renders them (base64).
func byteaKey(text string) (store.Value, error) {
	b, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not base64", cut(text))
	}
	return store.Value{Kind: store.KindBytes, Bytes: b}, nil
}

// PostgreSQL's limits of a numeric: digits before and after the point.
const (
	maxNumericIntDigits  = 131072
	maxNumericFracDigits = 16383
)

// numericKey reads a numeric as PostgreSQL's input does (sign, digits,
// point, exponent, NaN, Infinity) and returns it as PostgreSQL prints it:
// a plain decimal, so that it compares with the queued ones. A value out
// of numeric's range is refused before its digits are written out.
func numericKey(text string) (store.Value, error) {
	s := strings.TrimSpace(text)
	switch strings.ToLower(strings.TrimPrefix(s, "+")) {
	case "nan":
		return store.Value{Kind: store.KindNumeric, Bytes: []byte("NaN")}, nil
	case "infinity", "inf":
		return store.Value{Kind: store.KindNumeric, Bytes: []byte("Infinity")}, nil
	case "-infinity", "-inf":
		return store.Value{Kind: store.KindNumeric, Bytes: []byte("-Infinity")}, nil
	}
	bad := fmt.Errorf("%q is not a numeric", cut(text))
	neg := strings.HasPrefix(s, "-")
	if neg || strings.HasPrefix(s, "+") {
		s = s[1:]
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return store.Value{}, bad
	}
	shift := 0
	if hasExp {
		e, err := strconv.Atoi(exp)
		if err != nil || exp == "" {
			return store.Value{}, bad
		}
		if e > maxNumericIntDigits || e < -maxNumericFracDigits-maxNumericIntDigits {
			return store.Value{}, fmt.Errorf("%q is out of numeric's range", cut(text))
		}
		shift = e
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	point := len(intPart) - (len(intPart+frac) - len(digits)) + shift // digits before the point
	scale := max(len(frac)-shift, 0)
	if point > maxNumericIntDigits || scale > maxNumericFracDigits {
		return store.Value{}, fmt.Errorf("%q is out of numeric's range", cut(text))
	}
	var b strings.Builder
	if neg && digits != "" {
		b.WriteByte('-')
	}
	switch {
	case digits == "":
		b.WriteByte('0')
	case point <= 0:
		b.WriteByte('0')
	case point >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", point-len(digits)))
	default:
		b.WriteString(digits[:point])
	}
	if scale > 0 {
		b.WriteByte('.')
		fd := ""
		switch {
		case digits == "":
		case point <= 0:
			fd = strings.Repeat("0", -point) + digits
		case point < len(digits):
			fd = digits[point:]
		}
		b.WriteString(fd)
		b.WriteString(strings.Repeat("0", max(scale-len(fd), 0)))
	}
	return store.Value{Kind: store.KindNumeric, Bytes: []byte(b.String())}, nil
}

func allDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// cut shortens a client's text for an error message.
func cut(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
