package typemap

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// pgtypeTimestamp decodes src with pgtype alone, as a timestamptz (zone) or
// a timestamp: the decoder that parseISOTimestamp stands in front of.
func pgtypeTimestamp(zone bool, src []byte) (store.Value, error) {
	m := pgtype.NewMap()
	if zone {
		return scanner(m, pgtype.TimestamptzOID, func(v pgtype.Timestamptz) store.Value {
			return store.Value{Kind: store.KindTimestamp, Int: infinityInt(v.InfinityModifier, v.Time.UnixMicro())}
		})(src)
	}
	return scanner(m, pgtype.TimestampOID, func(v pgtype.Timestamp) store.Value {
		return store.Value{Kind: store.KindTimestamp, Int: infinityInt(v.InfinityModifier, v.Time.UnixMicro())}
	})(src)
}

// pgText prints t as PostgreSQL does with DateStyle ISO in UTC: the
// fraction without trailing zeros, "+00" for a timestamptz.
func pgText(t time.Time, zone bool) string {
	s := t.Format("2006-01-02 15:04:05.999999")
	if zone {
		s += "+00"
	}
	return s
}

// TestTimestampTextDecodesAsPgtype checks that the timestamp decoders give
// what pgtype gives for the text PostgreSQL prints, over random instants of
// years 1 to 9999 and every fraction length, and for texts the fast parse
// leaves to pgtype (infinities, BC, a five-digit year, other offsets) or
// that neither reads (a day the month lacks), and that the fast parse takes
// the common ones without allocating.
func TestTimestampTextDecodesAsPgtype(t *testing.T) {
	d := New()
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro(), time.Date(9999, 12, 31, 23, 59, 59, 999999, time.UTC).UnixMicro()
	var texts []string
	for i := range 20000 {
		us := lo + rng.Int64N(hi-lo+1)
		us -= us % []int64{1, 10, 100, 1000, 10000, 100000, 1000000}[i%7]
		texts = append(texts, pgText(time.UnixMicro(us).UTC(), true), pgText(time.UnixMicro(us).UTC(), false))
	}
	texts = append(texts, "2024-02-29 00:00:00+00", "2023-02-29 00:00:00+00", "2024-04-31 12:00:00", "2024-13-01 00:00:00",
		"1970-01-01 00:00:00+00", "1969-12-31 23:59:59.999999+00", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999",
		"infinity", "-infinity", "0044-03-15 00:00:00+00 BC", "0044-03-15 10:00:00 BC", "10000-01-01 00:00:00+00",
		"2024-03-31 01:30:00+02", "2024-03-31 01:30:00-03:30", "2024-03-31 01:30:00.+00", "2024-03-31 01:30:00.1234567+00",
		"2024-03-31T01:30:00+00", "2024-03-31 24:00:00+00", "2024-03-31 1:30:00+00", "")
	fast := 0
	for _, text := range texts {
		for _, zone := range []bool{true, false} {
			decode := d.Decoder(store.Column{TypeOID: pgtype.TimestampOID})
			if zone {
				decode = d.Decoder(store.Column{TypeOID: pgtype.TimestamptzOID})
			}
			got, gotErr := decode.Value([]byte(text))
			want, wantErr := pgtypeTimestamp(zone, []byte(text))
			if (gotErr != nil) != (wantErr != nil) || got.Kind != want.Kind || got.Int != want.Int {
				t.Fatalf("%q (zone %v) decodes to %+v, %v; pgtype gives %+v, %v", text, zone, got, gotErr, want, wantErr)
			}
			if _, ok := parseISOTimestamp([]byte(text), zone); ok {
				fast++
			}
		}
	}
	// Each random instant is read by the fast parse in its own form only.
	if fast < 40000 {
		t.Errorf("the fast parse read %d texts, want at least the 40000 random ones", fast)
	}
	decode, text := d.Decoder(store.Column{TypeOID: pgtype.TimestamptzOID}), []byte("2026-01-01 00:16:40.5+00")
	var into store.Value
	if n := testing.AllocsPerRun(100, func() { decode(&into, text) }); n != 0 {
		t.Errorf("decoding a timestamptz took %.0f allocations", n)
	}
}

// TestBoolTextDecodesAsPgtype checks the boolean decoder against pgtype's
// for what PostgreSQL prints and for other spellings pgtype reads, and that
// it reads PostgreSQL's without allocating.
func TestBoolTextDecodesAsPgtype(t *testing.T) {
	decode := New().Decoder(store.Column{TypeOID: pgtype.BoolOID})
	for _, text := range []string{"t", "f", "true", "FALSE", "T", "y", "x", ""} {
		got, gotErr := decode.Value([]byte(text))
		var b pgtype.Bool
		wantErr := pgtype.NewMap().Scan(pgtype.BoolOID, pgtype.TextFormatCode, []byte(text), &b)
		if (gotErr != nil) != (wantErr != nil) || (gotErr == nil && (got.Kind != store.KindBool || (got.Int == 1) != b.Bool)) {
			t.Errorf("%q decodes to %+v, %v; pgtype gives %v, %v", text, got, gotErr, b.Bool, wantErr)
		}
	}
	text := []byte("t")
	var into store.Value
	if n := testing.AllocsPerRun(100, func() { decode(&into, text) }); n != 0 {
		t.Errorf("decoding a boolean took %.0f allocations", n)
	}
}

// TestIntegerTextDecodesAsPgtype checks the decoders of smallint, integer
// and bigint against pgtype's, for random values of every length, the ends
// of each range, values past them, and texts the fast parse leaves to
// pgtype, and that they read PostgreSQL's text without allocating.
func TestIntegerTextDecodesAsPgtype(t *testing.T) {
	d := New()
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"0", "-1", "32767", "-32768", "32768", "-32769", "2147483647", "-2147483648", "2147483648",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "999999999999999999", "-999999999999999999",
		"+5", " 5", "5 ", "-", "", "1e3", "0x10", "--1", "00012"}
	for i := range 5000 {
		v := rng.Int64() >> (i % 64)
		if i%2 == 1 {
			v = -v
		}
		texts = append(texts, strconv.FormatInt(v, 10))
	}
	m := pgtype.NewMap()
	// pgtype alone, scanning into the Go type of the column.
	general := map[uint32]valueFunc{
		pgtype.Int2OID: scanner(m, pgtype.Int2OID, func(v int16) store.Value { return store.Value{Kind: store.KindInt16, Int: int64(v)} }),
		pgtype.Int4OID: scanner(m, pgtype.Int4OID, func(v int32) store.Value { return store.Value{Kind: store.KindInt32, Int: int64(v)} }),
		pgtype.Int8OID: scanner(m, pgtype.Int8OID, func(v int64) store.Value { return store.Value{Kind: store.KindInt64, Int: v} }),
	}
	for _, oid := range []uint32{pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID} {
		decode := d.Decoder(store.Column{TypeOID: oid})
		for _, text := range texts {
			got, gotErr := decode.Value([]byte(text))
			want, wantErr := general[oid]([]byte(text))
			if (gotErr != nil) != (wantErr != nil) || got.Kind != want.Kind || got.Int != want.Int {
				t.Fatalf("%q (oid %d) decodes to %+v, %v; pgtype gives %+v, %v", text, oid, got, gotErr, want, wantErr)
			}
		}
		text := []byte("-1234")
		var into store.Value
		if n := testing.AllocsPerRun(100, func() { decode(&into, text) }); n != 0 {
			t.Errorf("decoding an integer (oid %d) took %.0f allocations", oid, n)
		}
	}
}

// FuzzParseISOTimestamp checks that whatever text the fast parses read,
// pgtype reads as the same instant, and strconv as the same integer.
func FuzzParseISOTimestamp(f *testing.F) {
	for _, s := range []string{"2024-02-29 23:59:59.5+00", "0001-01-01 00:00:00", "9999-12-31 23:59:59.999999+00", "2024-03-31 01:30:00+02", "-123", "999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if v, ok := parseInteger([]byte(text)); ok {
			if want, err := strconv.ParseInt(text, 10, 64); err != nil || want != v || strings.HasPrefix(text, "+") {
				t.Fatalf("%q: fast parse %d, strconv %d, %v", text, v, want, err)
			}
		}
		for _, zone := range []bool{true, false} {
			micros, ok := parseISOTimestamp([]byte(text), zone)
			if !ok {
				continue
			}
			want, err := pgtypeTimestamp(zone, []byte(text))
			if err != nil || want.Int != micros {
				t.Fatalf("%q (zone %v): fast parse %d, pgtype %d, %v", text, zone, micros, want.Int, err)
			}
			if strings.ContainsAny(text, "BCinfy") {
				t.Fatalf("%q read by the fast parse", text)
			}
		}
	})
}
