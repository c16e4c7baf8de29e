package delta

import (
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// canon returns a canonical string of a Go value as returned by readers, so
// that rows can be compared and sorted.
func canon(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case int8, int16, int32, int64:
		return fmt.Sprintf("%T:%d", x, x)
	case float32:
		if math.IsNaN(float64(x)) {
			return "f32:NaN"
		}
		return "f32:" + strconv.FormatFloat(float64(x), 'g', -1, 32)
	case float64:
		if math.IsNaN(x) {
			return "f64:NaN"
		}
		return "f64:" + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return strconv.Quote(x)
	case []byte:
		return "0x" + hex.EncodeToString(x)
	case Decimal:
		return "dec:" + x.String()
	case time.Time:
		return "t:" + x.UTC().Format(time.RFC3339Nano)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canon(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case Row:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canon(e)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []MapEntry:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canon(e.Key) + "=>" + canon(e.Value)
		}
		sort.Strings(parts)
		return "map[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("?%T:%v", v, v)
}

func canonRows(rows []Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = canon(r)
	}
	sort.Strings(out)
	return out
}

// assertSameRows compares rows ignoring order.
func assertSameRows(t *testing.T, what string, got, want []Row) {
	t.Helper()
	g, w := canonRows(got), canonRows(want)
	if len(g) != len(w) {
		t.Errorf("%s: got %d rows, want %d\n got: %v\nwant: %v", what, len(g), len(w), head(g), head(w))
		return
	}
	for i := range g {
		if g[i] != w[i] {
			t.Errorf("%s: row %d differs\n got: %s\nwant: %s", what, i, g[i], w[i])
			return
		}
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func mustDec(t *testing.T, s string) Decimal {
	t.Helper()
	d, err := ParseDecimal(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
