package live

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// fuzzTable is a table of the hub the fuzz targets ask: its columns, the
// key columns first, and the keys of its rows as a client writes them.
type fuzzTable struct {
	name string
	cols []store.Column
	rows [][]string
}

func keyCol(name string, oid uint32) store.Column {
	return store.Column{Name: name, TypeOID: oid, TypeMod: -1, Key: true}
}

// fuzzTables are keyed by an integer, text, a float, a numeric, and two
// composite keys, one of text and an integer and one of every other type
// with a key parser.
var fuzzTables = []fuzzTable{
	{"public.by_int", []store.Column{keyCol("id", pgtype.Int8OID)},
		[][]string{{"-9223372036854775808"}, {"-1"}, {"0"}, {"7"}, {"9223372036854775807"}}},
	{"public.by_text", []store.Column{keyCol("k", pgtype.TextOID)},
		[][]string{{""}, {"a"}, {"a b"}, {`["x"]`}, {"null"}, {"é"}}},
	{"public.by_float", []store.Column{keyCol("k", pgtype.Float8OID)},
		[][]string{{"-Infinity"}, {"-2"}, {"-0"}, {"1.5"}, {"1e300"}, {"Infinity"}, {"NaN"}}},
	{"public.by_numeric", []store.Column{keyCol("k", pgtype.NumericOID)},
		[][]string{{"-Infinity"}, {"-1.25"}, {"0"}, {"10"}, {"1e20"}, {"Infinity"}, {"NaN"}}},
	{"public.by_pair", []store.Column{keyCol("a", pgtype.TextOID), keyCol("b", pgtype.Int4OID)},
		[][]string{{"x", "1"}, {"x", "2"}, {"y", "-5"}, {"", "0"}}},
	{"public.by_many", []store.Column{keyCol("b", pgtype.BoolOID), keyCol("i2", pgtype.Int2OID),
		keyCol("f4", pgtype.Float4OID), keyCol("m", 790 /* money */), keyCol("by", pgtype.ByteaOID), keyCol("d", pgtype.DateOID),
		keyCol("ts", pgtype.TimestamptzOID), keyCol("t", pgtype.TimestampOID), keyCol("tm", pgtype.TimeOID)},
		[][]string{
			{"false", "-32768", "-0.5", "-1.00", "", "1970-01-01", "2024-02-29T23:59:59.999999Z", "0001-01-01T00:00:00Z", "00:00:00"},
			{"true", "32767", "NaN", "12.34", "AAEC", "9999-12-31", "infinity", "-infinity", "23:59:59.999999"},
		}},
}

// fuzzEpoch and the LSNs are the stream state of the fuzz hub: its offset
// and the transactions it retains for resuming clients.
const (
	fuzzEpoch     = "7301234567890123456.16b3748"
	fuzzRetained  = 0x1000
	fuzzMiddleLSN = 0x2000
	fuzzOffset    = 0x3000
)

// newFuzzHub returns a hub, over no queue, holding the rows of fuzzTables
// and two retained transactions; public.configured is configured but not
// captured yet.
func newFuzzHub(tb testing.TB) *Hub {
	tb.Helper()
	h := NewHub(nil, HubConfig{SourceTables: []string{"public.configured"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.epoch = fuzzEpoch
	for i, ft := range fuzzTables {
		schema, name, _ := strings.Cut(ft.name, ".")
		cols := append(ft.cols, store.Column{Name: "n", TypeOID: pgtype.Int4OID, TypeMod: -1})
		rel := &store.Relation{Key: store.RelationKey{OID: uint32(16384 + i), LSN: 0x100}, Schema: schema, Name: name,
			Table: ft.name, ReplicaIdentity: 'd', Columns: cols}
		ts := newTableState(rel, h.maxValue)
		for n, texts := range ft.rows {
			vals := make([]store.Value, len(cols))
			for c, text := range texts {
				v, err := h.types.ParseKey(cols[c].TypeOID, text)
				if err != nil {
					tb.Fatalf("%s: %q: %v", ft.name, text, err)
				}
				vals[c] = v
			}
			vals[len(texts)] = store.Value{Kind: store.KindInt32, Int: int64(n)}
			ts.apply(rel, &store.Change{Op: store.OpInsert, New: vals}, false)
		}
		h.tables[ft.name] = ts
	}
	change := Change{Table: "public.by_int", Op: "insert", Key: `["8"]`, Row: map[string]json.RawMessage{"id": json.RawMessage(`"8"`)}}
	h.retained = []retainedTxn{
		{lsn: fuzzMiddleLSN, xid: 7, commitTime: time.Unix(1700000000, 0), changes: []Change{change}},
		{lsn: fuzzOffset, xid: 8, commitTime: time.Unix(1700000001, 0), changes: []Change{change}},
	}
	h.retainedSince = fuzzRetained
	h.offset.Store(fuzzOffset)
	return h
}

// FuzzKeyValues parses arbitrary text as the key of a row (/rows/{key})
// and as the cursor of a page (?after=) of each table of newFuzzHub:
// keyValues must never panic and fails only with errBadKey. A key that
// parses re-encodes (keyString, the form of a row's key and of the next
// cursor) to a cursor that parses to an equal key and re-encodes the
// same; the page after it holds only rows after it, and a row found by it
// has an equal key.
func FuzzKeyValues(f *testing.F) {
	h := newFuzzHub(f)
	f.Fuzz(func(t *testing.T, table uint8, s string) {
		ft := fuzzTables[int(table)%len(fuzzTables)]
		src := memRows{h: h, table: ft.name, rel: h.tables[ft.name].rel}
		vals, err := keyValues(h.types, src.rel, s)
		if err != nil {
			if !errors.Is(err, errBadKey) {
				t.Fatalf("%s: %q: error %v does not wrap errBadKey", ft.name, s, err)
			}
			return
		}
		if len(vals) != len(src.rel.KeyColumns()) {
			t.Fatalf("%s: %q parsed as %d values", ft.name, s, len(vals))
		}
		cursor := keyString(vals)
		again, err := keyValues(h.types, src.rel, cursor)
		if err != nil {
			t.Fatalf("%s: %q parsed as %v, whose cursor %s does not parse: %v", ft.name, s, vals, cursor, err)
		}
		if compareKeys(again, vals) != 0 || keyString(again) != cursor {
			t.Fatalf("%s: %q parsed as %v, cursor %s, which parses as %v, cursor %s", ft.name, s, vals, cursor, again, keyString(again))
		}
		ctx := context.Background()
		// An empty ?after= is no cursor: the first page. A key of one
		// empty text is written [""] (keyString).
		if s != "" {
			page, err := readPage(ctx, h.types, src, s, 3)
			if err != nil {
				t.Fatalf("%s: page after %q: %v", ft.name, s, err)
			}
			for _, r := range page.Rows {
				if compareKeys(h.tables[ft.name].rows[r.Key].key, vals) <= 0 {
					t.Fatalf("%s: page after %q holds row %s", ft.name, s, r.Key)
				}
			}
		}
		row, found, err := findRow(ctx, h.types, src, s)
		if err != nil {
			t.Fatalf("%s: row %q: %v", ft.name, s, err)
		}
		if found && compareKeys(h.tables[ft.name].rows[row.Key].key, vals) != 0 {
			t.Fatalf("%s: row %q found as %s", ft.name, s, row.Key)
		}
	})
}

// FuzzRowsRequest asks GET /rows?query and GET /rows/{key}?query of a
// table of newFuzzHub, its name possibly replaced, with arbitrary query
// text (?after=, ?limit=, ?version=, ?as_of=) and key: the server must
// answer 200 with a page of at most limit rows or the row, or an error
// message with 400, 404 (a table or row it does not have, or time travel
// on a hub without mirrors) or 503 (a table not captured yet), always in
// JSON; and the cursor of a next page must be accepted.
func FuzzRowsRequest(f *testing.F) {
	h := newFuzzHub(f)
	s := NewServer(Config{Logger: h.log}, h, stubAgent{}, nil, nil)
	f.Fuzz(func(t *testing.T, table uint8, name, query, key string) {
		if name == "" {
			name = fuzzTables[int(table)%len(fuzzTables)].name
		}
		code, body := fuzzGet(t, s.serveRows, name, "", query)
		limit := defaultRowLimit
		if n, err := strconv.Atoi(queryValue(query, "limit")); err == nil {
			limit = n
		}
		if code == http.StatusOK {
			var page rowsPage
			if err := json.Unmarshal(body, &page); err != nil || len(page.Rows) > limit || page.Table != name {
				t.Fatalf("rows of %q?%s: %s, %v", name, query, body, err)
			}
			if page.Next != "" {
				next := url.Values{"after": {page.Next}, "limit": {strconv.Itoa(limit)}}.Encode()
				if code, body := fuzzGet(t, s.serveRows, name, "", next); code != http.StatusOK {
					t.Fatalf("rows of %q?%s: next page %s: %d %s", name, query, next, code, body)
				}
			}
		}
		code, body = fuzzGet(t, s.serveRow, name, key, query)
		if code == http.StatusOK {
			var row Row
			if err := json.Unmarshal(body, &row); err != nil || row.Key == "" {
				t.Fatalf("row %q of %q?%s: %s, %v", key, name, query, body, err)
			}
		}
	})
}

// queryValue returns the value of key in a query, as Request.URL.Query
// reads it.
func queryValue(query, key string) string {
	q, _ := url.ParseQuery(query)
	return q.Get(key)
}

// fuzzGet calls handler for table (and key, when not empty) with the
// query, and returns the status and body, after checking that the status
// is one the API answers a client's mistake with and that the body is
// JSON, an error message unless the status is 200.
func fuzzGet(t *testing.T, handler http.HandlerFunc, table, key, query string) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.URL.RawQuery = query
	r.SetPathValue("table", table)
	r.SetPathValue("key", key)
	w := httptest.NewRecorder()
	handler(w, r)
	body := w.Body.Bytes()
	switch w.Code {
	case http.StatusOK:
		if !json.Valid(body) {
			t.Fatalf("%q %q ?%s: 200 with %s", table, key, query, body)
		}
	case http.StatusBadRequest, http.StatusNotFound, http.StatusServiceUnavailable:
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Fatalf("%q %q ?%s: %d with %s", table, key, query, w.Code, body)
		}
	default:
		t.Fatalf("%q %q ?%s: %d %s", table, key, query, w.Code, body)
	}
	return w.Code, body
}

// FuzzStreamRequest opens a stream with arbitrary query text, as
// serveStream reads it: the tables (?tables=, comma-separated, repeated)
// and the offset to resume from (?offset=<epoch>:<lsn>). That is all a
// client asks: the frames it sends are read only to keep its pongs and
// close coming. Neither
// parseTables nor the hub's subscribe may panic; a request they refuse
// gets an error message, which the server sends as an error message
// before it closes. A stream the hub takes starts with its hello, names
// only known tables, and then resumes (the offset is the hub's, or one it
// retains) or takes snapshots (no offset, or a refetch). An offset that
// parses formats back to one that parses the same.
func FuzzStreamRequest(f *testing.F) {
	h := newFuzzHub(f)
	f.Fuzz(func(t *testing.T, query string) {
		q, _ := url.ParseQuery(query)
		offset := q.Get("offset")
		if epoch, lsn, err := parseOffset(offset); err == nil {
			again := epoch + ":" + strconv.FormatUint(uint64(lsn), 10)
			if e2, l2, err := parseOffset(again); err != nil || e2 != epoch || l2 != lsn {
				t.Fatalf("offset %q parsed as %q, %d; formatted as %q, parsed as %q, %d, %v", offset, epoch, lsn, again, e2, l2, err)
			}
		}
		tables, err := parseTables(q["tables"])
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		sub := newSubscriber(16 << 20)
		first, _, snapshot, err := h.subscribe(sub, tables, offset)
		if err != nil {
			if _, merr := json.Marshal(ErrorMessage{Type: TypeError, Message: err.Error()}); merr != nil || err.Error() == "" {
				t.Fatalf("tables %q, offset %q: error %q, %v", tables, offset, err, merr)
			}
			return
		}
		defer h.unsubscribe(sub)
		hello, ok := first[0].(Hello)
		if !ok || hello.Epoch != fuzzEpoch || hello.Offset != h.offsetString(fuzzOffset) {
			t.Fatalf("tables %q, offset %q: first message %+v", tables, offset, first[0])
		}
		for _, n := range sub.tableNames() {
			if h.tables[n] == nil {
				t.Fatalf("subscribed to unknown table %q", n)
			}
		}
		epoch, lsn, perr := parseOffset(offset)
		resumes := perr == nil && epoch == fuzzEpoch && lsn >= fuzzRetained && lsn <= fuzzOffset
		if resumes == snapshot {
			t.Fatalf("tables %q, offset %q: snapshot %v", tables, offset, snapshot)
		}
		for _, m := range first[1:] {
			if _, err := json.Marshal(m); err != nil {
				t.Fatalf("tables %q, offset %q: message %+v: %v", tables, offset, m, err)
			}
		}
	})
}
