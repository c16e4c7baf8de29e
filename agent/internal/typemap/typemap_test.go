package typemap

import (
	"cmp"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// sampleText is a value of each row's type as PostgreSQL prints it in
// capture's session settings.
var sampleText = map[string]string{
	"bool":        "t",
	"int2":        "-32768",
	"int4":        "2147483647",
	"int8":        "-9223372036854775808",
	"float4":      "1.5",
	"float8":      "-2.25e-300",
	"numeric":     "-12345.678",
	"money":       "-$1,234.56",
	"bytea":       `\x00ff10`,
	"date":        "2024-02-29",
	"timestamptz": "2024-02-29 23:59:59.123456+00",
	"timestamp":   "1999-12-31 00:00:00.5",
	"time":        "23:59:59.999999",
}

// TestEveryRowRoundTrips checks that the rows of the type table agree with
// themselves: for each type and an array of it, a value its decoder reads
// has the row's kind, converts to the row's Delta type without a warning
// or a replacement, and comes back from Delta (Type.FromDelta) as the same
// JSON the live view renders for the queued value.
func TestEveryRowRoundTrips(t *testing.T) {
	m := New()
	for _, r := range rows() {
		text, ok := sampleText[r.Name]
		if !ok {
			t.Errorf("row %s (oid %d) has no sample value in this test", r.Name, r.OID)
			continue
		}
		arrayOID := map[uint32]uint32{}
		if pt, ok := m.pg.TypeForName("_" + r.Name); ok {
			arrayOID[r.OID] = pt.OID
		} else if r.OID == oidMoney {
			arrayOID[r.OID] = oidMoneyArray
		}
		cases := []struct {
			col  store.Column
			text string
			kind store.Kind
		}{
			{store.Column{Name: r.Name, TypeOID: r.OID, TypeMod: -1}, text, r.Kind},
		}
		if a, ok := arrayOID[r.OID]; ok {
			elem := `"` + strings.ReplaceAll(text, `\`, `\\`) + `"`
			cases = append(cases, struct {
				col  store.Column
				text string
				kind store.Kind
			}{store.Column{Name: r.Name + "[]", TypeOID: a, TypeMod: -1, Dims: 1}, "{" + elem + ",NULL}", store.KindArray})
		} else {
			t.Errorf("row %s: no array type", r.Name)
		}
		for _, c := range cases {
			v, err := m.Decoder(c.col).Value([]byte(c.text))
			if err != nil {
				t.Errorf("%s: decode %q: %v", c.col.Name, c.text, err)
				continue
			}
			if v.Kind != c.kind {
				t.Errorf("%s: %q decoded as kind %d, the row says %d", c.col.Name, c.text, v.Kind, c.kind)
			}
			dt := m.DeltaType(c.col)
			var w countWarner
			got := ConverterFor(dt, c.col.Name, &w)(&v)
			if check := ReplacedCheckFor(dt); check != nil && check(&v) || w.n != 0 {
				t.Errorf("%s: %q is replaced or warned about (%d warnings) on the way to %s", c.col.Name, c.text, w.n, dt)
			}
			back := m.Lookup(c.col.TypeOID).FromDelta(got, dt)
			if g, want := string(JSON(back)), string(JSON(v)); g != want {
				t.Errorf("%s: %q as %s comes back from Delta as %s, want %s", c.col.Name, c.text, dt, g, want)
			}
			if c.kind == store.KindArray {
				continue
			}
			// A client that gives the value as the live view renders it
			// as a key finds it.
			var keyText string
			if err := json.Unmarshal(JSON(v), &keyText); err != nil {
				keyText = string(JSON(v))
			}
			if kv, err := m.ParseKey(c.col.TypeOID, keyText); err != nil || Compare(kv, v) != 0 {
				t.Errorf("%s: key %q reads as %+v, %v; want the value %+v", c.col.Name, keyText, kv, err, v)
			}
		}
	}
}

// TestTypesWithoutARowKeepTheirText checks the fallback: a type the table
// has no row for, and an array of one, is read and stored as its text.
func TestTypesWithoutARowKeepTheirText(t *testing.T) {
	m := New()
	for _, oid := range []uint32{25, 2950, 3802, 1186, 99999} { // text, uuid, jsonb, interval, unknown
		col := store.Column{TypeOID: oid, TypeMod: -1}
		if dt := m.DeltaType(col); dt != delta.TypeString {
			t.Errorf("oid %d: Delta type %s, want string", oid, dt)
		}
		v, err := m.Decoder(col).Value([]byte("1 day"))
		if err != nil || v.Kind != store.KindString || string(v.Bytes) != "1 day" {
			t.Errorf("oid %d: decoded %+v, %v", oid, v, err)
		}
	}
	if name := m.TypeName(99999); name != "oid:99999" {
		t.Errorf("unknown type named %q", name)
	}
}

// TestParseKeyKeepsToTheColumnsRange checks that a client's key text is
// parsed as the column's type and refused outside its range.
func TestParseKeyKeepsToTheColumnsRange(t *testing.T) {
	m := New()
	for _, c := range []struct {
		oid  uint32
		text string
		ok   bool
	}{
		{21, "32767", true}, {21, "32768", false}, {23, "-2147483648", true}, {23, "2147483648", false},
		{20, "9223372036854775807", true}, {20, "1e3", false}, {16, "true", true}, {16, "yes", false},
		{1082, "2024-02-29", true}, {1082, "2023-02-29", false}, {25, "anything", true},
	} {
		v, err := m.ParseKey(c.oid, c.text)
		if (err == nil) != c.ok {
			t.Errorf("oid %d, %q: err %v, want ok %v", c.oid, c.text, err, c.ok)
			continue
		}
		if err == nil && c.oid != 25 && v.Kind != m.Lookup(c.oid).Kind {
			t.Errorf("oid %d, %q: kind %d, want the row's %d", c.oid, c.text, v.Kind, m.Lookup(c.oid).Kind)
		}
	}
}

// TestNumericKeysReadAsPostgreSQLReadsThem checks that a client's numeric
// key is read with PostgreSQL's syntax into the text PostgreSQL prints,
// that values beyond numeric's range are refused without being written
// out, and that comparing numerics follows PostgreSQL's order.
func TestNumericKeysReadAsPostgreSQLReadsThem(t *testing.T) {
	m := New()
	for text, want := range map[string]string{
		"12.50": "12.50", "00012.50": "12.50", "-0": "0", "0.000": "0.000", "1.5e3": "1500",
		"123.456e-1": "12.3456", "5e-3": "0.005", "0.00123e0": "0.00123", "+7": "7", " 42 ": "42",
		"NaN": "NaN", "-infinity": "-Infinity", "inf": "Infinity", ".5": "0.5", "5.": "5", "1E2": "100",
	} {
		v, err := m.ParseKey(1700, text)
		if err != nil || string(v.Bytes) != want {
			t.Errorf("%q: got %q, %v; want %q", text, v.Bytes, err, want)
		}
	}
	for _, text := range []string{"1e999999", "-1e131073", "1e-999999", "1e-16384", "", ".", "--5", "1e", "1x", "0x10", "1,5"} {
		if v, err := m.ParseKey(1700, text); err == nil {
			t.Errorf("%q: got %q, want an error", text, v.Bytes)
		}
	}
	order := []string{"-Infinity", "-1e3", "-999.99", "-0.5", "-0.05", "0", "0.000001", "0.5", "1", "1.5", "10", "12.5", "100", "1e20", "Infinity", "NaN"}
	var vals []store.Value
	for _, text := range order {
		v, err := m.ParseKey(1700, text)
		if err != nil {
			t.Fatal(err)
		}
		vals = append(vals, v)
	}
	for i := range vals {
		for j := range vals {
			if got, want := Compare(vals[i], vals[j]), cmp.Compare(i, j); got != want {
				t.Errorf("Compare(%s, %s) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
	a, _ := m.ParseKey(1700, "12.50")
	b, _ := m.ParseKey(1700, "12.5")
	if Compare(a, b) != 0 {
		t.Error("12.50 and 12.5 compare unequal")
	}
}
