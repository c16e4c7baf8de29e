// Package rowstest compares rows of Delta values in tests of delta and its
// Parquet engine: as canonical strings, ignoring their order.
package rowstest

import (
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// Canon returns a canonical string of a Go value as returned by readers, so
// that rows can be compared and sorted.
func Canon(v any) string {
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
	case types.Decimal:
		return "dec:" + x.String()
	case time.Time:
		return "t:" + x.UTC().Format(time.RFC3339Nano)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Canon(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case types.Row:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Canon(e)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []types.MapEntry:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = Canon(e.Key) + "=>" + Canon(e.Value)
		}
		sort.Strings(parts)
		return "map[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprintf("?%T:%v", v, v)
}

// CanonRows returns the canonical strings of rows, sorted.
func CanonRows(rows []types.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = Canon(r)
	}
	sort.Strings(out)
	return out
}

// AssertSameRows compares rows ignoring their order.
func AssertSameRows(t *testing.T, what string, got, want []types.Row) {
	t.Helper()
	g, w := CanonRows(got), CanonRows(want)
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

// head returns the first few of s, for messages.
func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
