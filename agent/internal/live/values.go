package live

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// jsonValue renders a captured value as JSON without losing anything:
// 64-bit integers, numerics and timestamps become strings, so that no
// JavaScript client rounds them.
func jsonValue(v store.Value) json.RawMessage {
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
			b = append(b, jsonValue(e)...)
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

// typeName returns the PostgreSQL name of a column type, for clients.
func typeName(m *pgtype.Map, oid uint32) string {
	if t, ok := m.TypeForOID(oid); ok {
		return t.Name
	}
	return "oid:" + strconv.FormatUint(uint64(oid), 10)
}

// parseKeyText turns the text of a key value given by a client into a value
// comparable with the captured ones.
func parseKeyText(oid uint32, text string) (store.Value, error) {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return store.Value{}, fmt.Errorf("%q is not an integer", text)
		}
		kind := map[uint32]store.Kind{pgtype.Int2OID: store.KindInt16, pgtype.Int4OID: store.KindInt32, pgtype.Int8OID: store.KindInt64}[oid]
		return store.Value{Kind: kind, Int: n}, nil
	case pgtype.BoolOID:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return store.Value{}, fmt.Errorf("%q is not a boolean", text)
		}
		v := store.Value{Kind: store.KindBool}
		if b {
			v.Int = 1
		}
		return v, nil
	case pgtype.DateOID:
		t, err := time.Parse("2006-01-02", text)
		if err != nil {
			return store.Value{}, fmt.Errorf("%q is not a date", text)
		}
		return store.Value{Kind: store.KindDate, Int: t.Unix() / 86400}, nil
	case pgtype.NumericOID:
		return store.Value{Kind: store.KindNumeric, Bytes: []byte(text)}, nil
	}
	return store.Value{Kind: store.KindString, Bytes: []byte(text)}, nil
}
