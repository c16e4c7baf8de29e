package source

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// The table of testdata/sql/types.sql has a column of every type in
// the type mapping of docs/types.md. Columns whose mapping is "string" are read back by
// the test as ::text, the rest in pgx's binary format, so the captured text
// decoding is checked against an independent decoder.

const typesSelect = `SELECT id, b, i2, i4, i8, f4, f8, n, nu, t, vc, ch, u::text, j::text, jb::text, e::text, iv::text, ip,
	ba, d, ts, tstz, tm, ai, at, an, atz, big FROM types WHERE id = $1`

const typesInsert = `
INSERT INTO types VALUES
 (1, true, -32768, 2147483647, -9223372036854775808, 1.5, 3.141592653589793, 123456789.125, 0.1,
  'plain', 'varchar', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.50]}', '{"b": {"c": null}}', 'happy',
  '1 year 2 mons 3 days 04:05:06.789', '192.168.0.1/24', '\x00ff10', '2024-02-29', '2024-10-27 02:30:00',
  '2024-03-31 01:30:00', '23:59:59.999999', '{1,NULL,3}', '{"a,b","c\"d",NULL,""}', '{1.5,NaN}',
  '{"2024-03-31 03:30:00",NULL}', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)),
 (2, false, 0, 0, 0, 'NaN', '-Infinity', -0.001, '1234567890123456789012345678901234567890.0123456789',
  'grüße 日本語 🎉 ''quoted'' \ back', '', '     ', '00000000-0000-0000-0000-000000000000', '[]', '[]', 'sad',
  '-00:00:01', '::1', '', '0044-03-15 BC', '1900-01-01 00:00:00', '2024-03-31 03:30:00', '00:00:00',
  '{}', '{}', '{}', '{}', 'small'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 1, 1, 1, 'Infinity', 'NaN', 0, 'NaN', 'x', 'y', 'z', NULL, 'null', '"s"', 'ok', '0', '10.0.0.0/8',
  '\x', 'infinity', '-infinity', 'infinity', '12:00', '{{1,2},{3,4}}', '{{a},{b}}', NULL, NULL, NULL)`

func TestTypesRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"timezone": "Europe/Berlin"})
	sql, err := os.ReadFile("../../../testdata/sql/types.sql")
	if err != nil {
		t.Fatal(err)
	}
	h.exec(string(sql))
	h.cfg.Tables = []Table{{"public", "types"}}
	h.start()
	h.waitStreaming()

	ctx := context.Background()
	// Each step is one transaction; the expected rows are read right after it.
	type step struct {
		sql  string
		op   store.Op
		ids  []int64
		xid  uint32
		want map[int64][]any
		// arrays holds the text of each row's array columns, ai and at.
		arrays map[int64][2]string
	}
	steps := []*step{
		{sql: typesInsert, op: store.OpInsert, ids: []int64{1, 2, 3, 4}},
		// Only i4 changes: the TOASTed big column is not sent and must be
		// marked unchanged, never null.
		{sql: `UPDATE types SET i4 = i4 - 1 WHERE id = 1`, op: store.OpUpdate, ids: []int64{1}},
		{sql: `UPDATE types SET (b, i2, n, nu, t, ba, d, tstz, ai, at, big) = (NOT b, 7, 1.001, -0.5, 'changed', '\xdead', '1970-01-01', '1969-12-31 23:59:59.5+00', '{7}', '{x}', 'now small') WHERE id = 2`, op: store.OpUpdate, ids: []int64{2}},
		{sql: `DELETE FROM types WHERE id = 3`, op: store.OpDelete, ids: []int64{3}},
		{sql: `TRUNCATE types`, op: store.OpTruncate},
	}
	for _, s := range steps {
		s.xid = h.xid(s.sql)
		s.want, s.arrays = map[int64][]any{}, map[int64][2]string{}
		for _, id := range s.ids {
			var ai, at *string
			if err := h.conn.QueryRow(ctx, `SELECT ai::text, at::text FROM types WHERE id = $1`, id).Scan(&ai, &at); err == nil && ai != nil && at != nil {
				s.arrays[id] = [2]string{*ai, *at}
			}
			rows, err := h.conn.Query(ctx, typesSelect, id)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				s.want[id] = vals
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
		}
	}
	h.waitXid(steps[len(steps)-1].xid)
	txns, rels := h.txns()
	byXid := map[uint32]*store.Txn{}
	for _, txn := range txns {
		byXid[txn.Xid] = txn
	}
	for i, s := range steps {
		txn := byXid[s.xid]
		if txn == nil {
			t.Fatalf("step %d (%s): transaction %d not captured", i, s.sql[:20], s.xid)
		}
		if s.op == store.OpTruncate {
			if len(txn.Changes) != 1 || txn.Changes[0].Op != store.OpTruncate || rels[txn.Changes[0].Relation].Name != "types" {
				t.Fatalf("truncate captured as %+v", txn.Changes)
			}
			continue
		}
		if len(txn.Changes) != len(s.ids) {
			t.Fatalf("step %d: %d changes, want %d", i, len(txn.Changes), len(s.ids))
		}
		for j, c := range txn.Changes {
			rel := rels[c.Relation]
			if rel == nil {
				t.Fatalf("step %d: change refers to unknown schema version %+v", i, c.Relation)
			}
			if c.Op != s.op {
				t.Fatalf("step %d: op %v, want %v", i, c.Op, s.op)
			}
			id := s.ids[j]
			if s.op == store.OpDelete {
				if !c.OldIsKey || c.Old[0].Kind != store.KindInt64 || c.Old[0].Int != id {
					t.Fatalf("delete old key = %+v", c.Old)
				}
				continue
			}
			for k, col := range rel.Columns {
				want := s.want[id][k]
				got := c.New[k]
				if col.Name == "big" && s.op == store.OpUpdate && id == 1 {
					if got.Kind != store.KindUnchanged {
						t.Errorf("unchanged TOAST column captured as %+v, want KindUnchanged", got.Kind)
					}
					continue
				}
				if k := slices.Index([]string{"ai", "at"}, col.Name); k >= 0 && got.Kind == store.KindString {
					// An array of more than one dimension is queued as
					// its text, which a list of elements would not hold.
					if text := s.arrays[id][k]; string(got.Bytes) != text || !strings.HasPrefix(text, "{{") {
						t.Errorf("step %d row %d column %s: got text %q, want the text of a multi-dimensional array %q", i, id, col.Name, got.Bytes, text)
					}
					continue
				}
				if err := compareValue(col.Name, col.TypeOID, got, want); err != nil {
					t.Errorf("step %d row %d column %s (oid %d): %v", i, id, col.Name, col.TypeOID, err)
				}
			}
		}
	}
}

// compareValue checks a captured value against what pgx read.
func compareValue(col string, oid uint32, got store.Value, want any) error {
	if want == nil {
		if got.Kind != store.KindNull {
			return fmt.Errorf("got %+v, want NULL", got)
		}
		return nil
	}
	exp, err := expectedValue(want)
	if err != nil {
		return err
	}
	if oid == pgtype.DateOID {
		exp = dateValue(want)
	}
	if col == "nu" || col == "n" || col == "an" {
		return compareNumeric(got, exp)
	}
	if (got.Kind == store.KindFloat64 || got.Kind == store.KindFloat32) && got.Kind == exp.Kind &&
		isNaN(got) && isNaN(exp) {
		return nil
	}
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		return fmt.Errorf("got %s, want %s", describe(got), describe(exp))
	}
	return nil
}

func isNaN(v store.Value) bool {
	if v.Kind == store.KindFloat32 {
		return math.IsNaN(float64(math.Float32frombits(uint32(v.Int))))
	}
	return math.IsNaN(math.Float64frombits(uint64(v.Int)))
}

// dateValue maps a date pgx read (a time.Time at UTC midnight, or an
// infinity) to days since the epoch.
func dateValue(v any) store.Value {
	switch x := v.(type) {
	case time.Time:
		return store.Value{Kind: store.KindDate, Int: x.Unix() / 86400}
	case pgtype.InfinityModifier:
		if x > 0 {
			return store.Value{Kind: store.KindDate, Int: store.InfinityInt}
		}
		return store.Value{Kind: store.KindDate, Int: store.NegativeInfinityInt}
	}
	return store.Value{}
}

func describe(v store.Value) string {
	if v.Kind == store.KindString || v.Kind == store.KindNumeric {
		return fmt.Sprintf("{%d %q}", v.Kind, v.Bytes)
	}
	return fmt.Sprint(v)
}

// expectedValue maps a value pgx decoded to the store value the
// mapping gives it.
func expectedValue(v any) (store.Value, error) {
	switch x := v.(type) {
	case nil:
		return store.Value{}, nil
	case bool:
		if x {
			return store.Value{Kind: store.KindBool, Int: 1}, nil
		}
		return store.Value{Kind: store.KindBool}, nil
	case int16:
		return store.Value{Kind: store.KindInt16, Int: int64(x)}, nil
	case int32:
		return store.Value{Kind: store.KindInt32, Int: int64(x)}, nil
	case int64:
		return store.Value{Kind: store.KindInt64, Int: x}, nil
	case float32:
		return store.Value{Kind: store.KindFloat32, Int: int64(math.Float32bits(x))}, nil
	case float64:
		return store.Value{Kind: store.KindFloat64, Int: int64(math.Float64bits(x))}, nil
	case string:
		return store.Value{Kind: store.KindString, Bytes: []byte(x)}, nil
	case []byte:
		return store.Value{Kind: store.KindBytes, Bytes: x}, nil
	case pgtype.Numeric:
		return store.Value{Kind: store.KindNumeric, Bytes: []byte(numericText(x))}, nil
	case pgtype.Time:
		return store.Value{Kind: store.KindTime, Int: x.Microseconds}, nil
	case pgtype.InfinityModifier:
		if x > 0 {
			return store.Value{Kind: store.KindTimestamp, Int: store.InfinityInt}, nil
		}
		return store.Value{Kind: store.KindTimestamp, Int: store.NegativeInfinityInt}, nil
	case time.Time:
		return store.Value{Kind: store.KindTimestamp, Int: x.UnixMicro()}, nil
	case netip.Prefix:
		// inet's output function omits the mask of a single host.
		text := x.String()
		if x.IsSingleIP() {
			text = x.Addr().String()
		}
		return store.Value{Kind: store.KindString, Bytes: []byte(text)}, nil
	case []any:
		out := store.Value{Kind: store.KindArray, Elems: make([]store.Value, len(x))}
		for i, e := range x {
			ev, err := expectedValue(e)
			if err != nil {
				return store.Value{}, err
			}
			out.Elems[i] = ev
		}
		return out, nil
	}
	return store.Value{}, fmt.Errorf("no expectation for %T", v)
}

func numericText(n pgtype.Numeric) string {
	if n.NaN {
		return "NaN"
	}
	switch n.InfinityModifier {
	case pgtype.Infinity:
		return "Infinity"
	case pgtype.NegativeInfinity:
		return "-Infinity"
	}
	r := new(big.Rat).SetInt(n.Int)
	if n.Exp > 0 {
		r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.Exp)), nil)))
	} else if n.Exp < 0 {
		r.Quo(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(-n.Exp)), nil)))
	}
	return r.RatString()
}

// compareNumeric compares numerics (or arrays of them) by value.
func compareNumeric(got, want store.Value) error {
	if got.Kind == store.KindArray && want.Kind == store.KindArray {
		if len(got.Elems) != len(want.Elems) {
			return fmt.Errorf("got %d elements, want %d", len(got.Elems), len(want.Elems))
		}
		for i := range got.Elems {
			if err := compareNumeric(got.Elems[i], want.Elems[i]); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
		return nil
	}
	if got.Kind != store.KindNumeric {
		return fmt.Errorf("kind %d, want numeric", got.Kind)
	}
	var n pgtype.Numeric
	if err := n.Scan(string(got.Bytes)); err != nil {
		return fmt.Errorf("captured %q is not a number: %v", got.Bytes, err)
	}
	if numericText(n) != string(want.Bytes) {
		return fmt.Errorf("got %q, want %s", got.Bytes, want.Bytes)
	}
	if strings.Contains(string(got.Bytes), "e") {
		return fmt.Errorf("got %q in exponent form, want exact digits", got.Bytes)
	}
	return nil
}
