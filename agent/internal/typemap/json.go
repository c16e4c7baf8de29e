package typemap

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/lakeside/lakeside/store"
)

// JSON renders a queued value as JSON, for the live view, without losing anything:
// 64-bit integers, numerics and timestamps become strings, so that no
// JavaScript client rounds them.
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
	t, err := time.Parse("2006-01-02", text)
	if err != nil {
		return store.Value{}, fmt.Errorf("%q is not a date", text)
	}
	return store.Value{Kind: store.KindDate, Int: t.Unix() / 86400}, nil
}

func numericKey(text string) (store.Value, error) {
	return store.Value{Kind: store.KindNumeric, Bytes: []byte(text)}, nil
}
