package typemap

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// truncation is the object BoundedJSON renders for a value too large.
type truncation struct {
	Truncated bool            `json:"truncated"`
	Bytes     int             `json:"bytes"`
	Prefix    json.RawMessage `json:"prefix"`
}

// parseTruncation reads the object of a truncated value, failing the test
// when raw is not one.
func parseTruncation(t *testing.T, raw json.RawMessage) truncation {
	t.Helper()
	if len(raw) == 0 || raw[0] != '{' {
		t.Fatalf("rendered %.80s…, want a truncated value's object", raw)
	}
	var tr truncation
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tr); err != nil || !tr.Truncated {
		t.Fatalf("rendered %.80s…: %v, truncated %v", raw, err, tr.Truncated)
	}
	return tr
}

// TestBoundedJSONTruncatesALargeText renders a 10 MB text: the rendering
// stays within the bound, says that it is truncated and how large the value
// is, and holds the value's start.
func TestBoundedJSONTruncatesALargeText(t *testing.T) {
	const limit = 64 << 10
	text := strings.Repeat("lakeside ", 10<<20/9)
	for _, kind := range []store.Kind{store.KindString, store.KindNumeric} {
		raw := BoundedJSON(store.Value{Kind: kind, Bytes: []byte(text)}, limit)
		if len(raw) > limit+100 {
			t.Fatalf("kind %v: rendered %d bytes, want at most the bound and the marker", kind, len(raw))
		}
		tr := parseTruncation(t, raw)
		var prefix string
		if err := json.Unmarshal(tr.Prefix, &prefix); err != nil {
			t.Fatalf("kind %v: prefix %.80s…: %v", kind, tr.Prefix, err)
		}
		if tr.Bytes != len(text) || len(prefix) != limit || !strings.HasPrefix(text, prefix) {
			t.Fatalf("kind %v: bytes %d (want %d), prefix of %d bytes (want %d) that starts the text: %v",
				kind, tr.Bytes, len(text), len(prefix), limit, strings.HasPrefix(text, prefix))
		}
	}
}

// TestBoundedJSONRendersAValueWithinTheBoundWhole renders values of the
// bound's size and one byte less as JSON does, with no marker.
func TestBoundedJSONRendersAValueWithinTheBoundWhole(t *testing.T) {
	const limit = 1000
	for _, n := range []int{limit - 1, limit} {
		for _, v := range []store.Value{
			{Kind: store.KindString, Bytes: bytes.Repeat([]byte("a"), n)},
			{Kind: store.KindBytes, Bytes: bytes.Repeat([]byte{0xff}, n)},
			{Kind: store.KindArray, Elems: []store.Value{{Kind: store.KindString, Bytes: bytes.Repeat([]byte("b"), n)}}},
		} {
			if got, want := BoundedJSON(v, limit), JSON(v); !bytes.Equal(got, want) {
				t.Fatalf("kind %v of %d bytes: rendered %.80s…, want %.80s…", v.Kind, n, got, want)
			}
		}
	}
	for _, v := range []store.Value{{}, {Kind: store.KindInt64, Int: 1 << 40}, {Kind: store.KindBool, Int: 1}} {
		if got, want := BoundedJSON(v, 1), JSON(v); !bytes.Equal(got, want) {
			t.Fatalf("kind %v: rendered %s, want %s", v.Kind, got, want)
		}
	}
}

// TestBoundedJSONCutsTextAtACharacterBoundary cuts texts of 2-, 3- and
// 4-byte characters at every offset of a character: the prefix is whole
// characters, the longest that fit.
func TestBoundedJSONCutsTextAtACharacterBoundary(t *testing.T) {
	for _, ch := range []string{"é", "€", "𝄞"} {
		text := "x" + strings.Repeat(ch, 100)
		for limit := 10; limit < 10+len(ch); limit++ {
			tr := parseTruncation(t, BoundedJSON(store.Value{Kind: store.KindString, Bytes: []byte(text)}, limit))
			var prefix string
			if err := json.Unmarshal(tr.Prefix, &prefix); err != nil {
				t.Fatal(err)
			}
			want := 1 + (limit-1)/len(ch)*len(ch)
			if !utf8.ValidString(prefix) || !strings.HasPrefix(text, prefix) || len(prefix) != want {
				t.Fatalf("%q at limit %d: prefix %q (%d bytes), want the first %d bytes", ch, limit, prefix, len(prefix), want)
			}
		}
	}
}

// TestBoundedJSONTruncatesBytea renders a 10 MB bytea: the prefix is the
// base64 of the value's first bytes and the start of the whole value's
// base64.
func TestBoundedJSONTruncatesBytea(t *testing.T) {
	const limit = 64<<10 + 1
	data := make([]byte, 10<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	raw := BoundedJSON(store.Value{Kind: store.KindBytes, Bytes: data}, limit)
	if len(raw) > limit*4/3+100 {
		t.Fatalf("rendered %d bytes, want at most the bound's base64 and the marker", len(raw))
	}
	tr := parseTruncation(t, raw)
	var prefix string
	if err := json.Unmarshal(tr.Prefix, &prefix); err != nil {
		t.Fatal(err)
	}
	got, err := base64.StdEncoding.DecodeString(prefix)
	if err != nil {
		t.Fatalf("prefix is not base64: %v", err)
	}
	if tr.Bytes != len(data) || len(got) != limit-limit%3 || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("bytes %d (want %d), prefix of %d bytes (want %d)", tr.Bytes, len(data), len(got), limit-limit%3)
	}
	if !strings.HasPrefix(base64.StdEncoding.EncodeToString(data), prefix) {
		t.Fatal("the prefix does not start the whole value's base64")
	}
}

// TestBoundedJSONTruncatesAnArray renders a text array larger than the
// bound as the whole elements that fit.
func TestBoundedJSONTruncatesAnArray(t *testing.T) {
	elem := store.Value{Kind: store.KindString, Bytes: bytes.Repeat([]byte("e"), 300)}
	v := store.Value{Kind: store.KindArray, Elems: []store.Value{elem, elem, elem, elem}}
	tr := parseTruncation(t, BoundedJSON(v, 1000))
	var prefix []string
	if err := json.Unmarshal(tr.Prefix, &prefix); err != nil {
		t.Fatal(err)
	}
	if tr.Bytes != 1200 || len(prefix) != 3 || prefix[2] != string(elem.Bytes) {
		t.Fatalf("bytes %d (want 1200), prefix of %d elements (want 3)", tr.Bytes, len(prefix))
	}
}

// TestBoundedJSONFromDelta renders values read from Delta tables as
// BoundedJSON renders the values FromDelta returns, and a 10 MB string
// allocating a small part of its size.
func TestBoundedJSONFromDelta(t *testing.T) {
	const limit = 100
	m := New()
	text, numeric, bytea := m.Lookup(pgtype.TextOID), m.Lookup(pgtype.NumericOID), m.Lookup(pgtype.ByteaOID)
	for _, c := range []struct {
		t  Type
		v  any
		dt delta.DataType
	}{
		{text, strings.Repeat("€", 1000), delta.TypeString},
		{text, strings.Repeat("€", 33), delta.TypeString},
		{numeric, strings.Repeat("9", 1000), delta.TypeString},
		{bytea, bytes.Repeat([]byte{7}, 1000), delta.TypeBinary},
		{text, []any{strings.Repeat("a", 60), strings.Repeat("b", 60)}, &delta.ArrayType{ElementType: delta.TypeString}},
		{text, nil, delta.TypeString},
	} {
		got, want := c.t.BoundedJSONFromDelta(c.v, c.dt, limit), BoundedJSON(c.t.FromDelta(c.v, c.dt), limit)
		if !bytes.Equal(got, want) {
			t.Fatalf("%.40v: rendered %s, want %s", c.v, got, want)
		}
	}
	big := strings.Repeat("0123456789", 1<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text.BoundedJSONFromDelta(big, delta.TypeString, 64<<10)
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("rendering a string of %d bytes allocated %d bytes", len(big), n)
	}
}

// TestBoundedJSONDoesNotCopyTheValue renders a 10 MB text and a 10 MB bytea
// allocating a small part of their size: only the prefix is converted.
func TestBoundedJSONDoesNotCopyTheValue(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 1<<20)
	for _, kind := range []store.Kind{store.KindString, store.KindBytes} {
		v := store.Value{Kind: kind, Bytes: big}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		BoundedJSON(v, 64<<10)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("kind %v: rendering a value of %d bytes allocated %d bytes", kind, len(big), n)
		}
	}
}

// TestKeysOfYearsOutsideFourDigitsReadBack renders dates and timestamps
// before year 0 and after 9999, which PostgreSQL holds (4713 BC to
// 5874897 AD, 294276 AD for a timestamp) and JSON writes with a sign or
// more digits ("-0001-12-31", "10000-03-01"), and parses each back as a
// key, as a client gives the key of a row or the cursor of a page:
// FuzzKeyValues (agent/internal/live) found that a timestamp key given
// with an offset, 0000-01-01T00:00:00+01:00, rendered as a cursor that
// did not parse. A timestamp past the range of microseconds is an error.
func TestKeysOfYearsOutsideFourDigitsReadBack(t *testing.T) {
	m := New()
	for _, year := range []int{-4713, -401, -400, -1, 0, 1, 2000, 2399, 2400, 9999, 10000, 294276, 5874897} {
		for _, day := range []time.Time{
			time.Date(year, 2, 28, 0, 0, 0, 0, time.UTC),
			time.Date(year, 3, 1, 0, 0, 0, 0, time.UTC),
			time.Date(year, 12, 31, 0, 0, 0, 0, time.UTC),
		} {
			d := store.Value{Kind: store.KindDate, Int: daysSinceEpoch(day)}
			tests := []struct {
				oid uint32
				v   store.Value
			}{{pgtype.DateOID, d}}
			if year <= 294276 {
				ts := store.Value{Kind: store.KindTimestamp, Int: day.Add(13*time.Hour + 5*time.Microsecond).UnixMicro()}
				tests = append(tests, struct {
					oid uint32
					v   store.Value
				}{pgtype.TimestamptzOID, ts})
			}
			for _, tc := range tests {
				var text string
				if err := json.Unmarshal(JSON(tc.v), &text); err != nil {
					t.Fatal(err)
				}
				back, err := m.ParseKey(tc.oid, text)
				if err != nil || Compare(back, tc.v) != 0 || back.Kind != tc.v.Kind {
					t.Errorf("%s (oid %d) reads back as %+v, %v; want %+v", text, tc.oid, back, err, tc.v)
				}
			}
		}
	}
	if _, err := m.ParseKey(pgtype.TimestamptzOID, "0000-01-01T00:00:00+01:00"); err != nil {
		t.Error(err)
	}
	for _, text := range []string{"300000-01-01T00:00:00Z", "-300000-01-01T00:00:00Z", "1000000000-01-01", "-0001-02-29", "10000-13-01", "99999"} {
		for _, oid := range []uint32{pgtype.DateOID, pgtype.TimestamptzOID} {
			if v, err := m.ParseKey(oid, text); err == nil {
				t.Errorf("%s (oid %d) reads as %+v", text, oid, v)
			}
		}
	}
}
