package live

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// pagedTable is a table of TestPagingAgreesInMemoryAndFromMirror: its
// schema, its rows, and PostgreSQL's order of its key.
type pagedTable struct {
	name, schema, insert, orderBy string
}

// pagedTables are keyed by text, by float8 (NaN, infinities, -0), by
// numeric (unconstrained, and of a Delta decimal) and by a composite key,
// each row numbered by id.
var pagedTables = []pagedTable{
	{name: "by_text", schema: `CREATE TABLE by_text (k text PRIMARY KEY, id int NOT NULL)`,
		insert:  `INSERT INTO by_text VALUES ('', 1), ('a', 2), ('B', 3), ('b', 4), ('é', 5), ('Z', 6), ('a b', 7), ('10', 8), ('9', 9), ('ä', 10), ('a%b?', 11)`,
		orderBy: `k COLLATE "C"`},
	{name: "by_float", schema: `CREATE TABLE by_float (k float8 PRIMARY KEY, id int NOT NULL)`,
		insert:  `INSERT INTO by_float VALUES ('NaN', 1), ('Infinity', 2), ('-Infinity', 3), ('-0', 4), (1.5, 5), (-2, 6), (1e300, 7), (2.5e-300, 8), (10, 9), (9, 10)`,
		orderBy: `k`},
	{name: "by_numeric", schema: `CREATE TABLE by_numeric (k numeric PRIMARY KEY, id int NOT NULL)`,
		insert:  `INSERT INTO by_numeric VALUES (9, 1), (10, 2), (-1, 3), (-2, 4), (1.5, 5), (0.25, 6), (100, 7), ('NaN', 8), ('Infinity', 9), ('-Infinity', 10), (0, 11)`,
		orderBy: `k`},
	{name: "by_decimal", schema: `CREATE TABLE by_decimal (k numeric(8,2) PRIMARY KEY, id int NOT NULL)`,
		insert:  `INSERT INTO by_decimal VALUES (9, 1), (10, 2), (-1, 3), (-2, 4), (1.5, 5), (0.25, 6), (100, 7), (0, 8)`,
		orderBy: `k`},
	{name: "by_pair", schema: `CREATE TABLE by_pair (a text, b float8, id int NOT NULL, PRIMARY KEY (a, b))`,
		insert:  `INSERT INTO by_pair VALUES ('x', 'NaN', 1), ('x', 1, 2), ('x', '-Infinity', 3), ('y', 0, 4), ('', 2, 5), ('x y', -1, 6), ('x', 10, 7), ('x', 9, 8), ('X', 'NaN', 9)`,
		orderBy: `a COLLATE "C", b`},
}

// TestPagingAgreesInMemoryAndFromMirror pages tables of non-integer keys
// through the rows the hub keeps and through their mirrors (time travel
// to the latest version): both give the rows in PostgreSQL's order, with
// the same cursors, and find each row by its key.
func TestPagingAgreesInMemoryAndFromMirror(t *testing.T) {
	t.Parallel()
	names := make([]string, len(pagedTables))
	schema := make([]string, len(pagedTables))
	for i, pt := range pagedTables {
		names[i], schema[i] = pt.name, pt.schema
	}
	f := newFixtureOf(t, Config{TablesDir: t.TempDir()}, names, schema...)
	for _, pt := range pagedTables {
		f.exec(pt.insert)
	}
	f.waitHub()
	f.waitApplied()
	versions := f.mirrorVersions()
	for _, pt := range pagedTables {
		t.Run(pt.name, func(t *testing.T) {
			table := "public." + pt.name
			want := f.idsInOrder(pt.name, pt.orderBy)
			v, ok := versions[table]
			if !ok {
				t.Fatalf("no mirror of %s", table)
			}
			travel := "version=" + strconv.FormatInt(v, 10)
			for _, limit := range []int{1, 3, len(want)} {
				mem := f.pageAll(table, "", limit)
				mirror := f.pageAll(table, travel, limit)
				if !slices.Equal(mem.ids, want) {
					t.Errorf("limit %d: in memory, ids %v; PostgreSQL orders them %v", limit, mem.ids, want)
				}
				if !slices.Equal(mirror.ids, want) {
					t.Errorf("limit %d: from the mirror, ids %v; PostgreSQL orders them %v", limit, mirror.ids, want)
				}
				if !slices.Equal(mem.cursors, mirror.cursors) {
					t.Errorf("limit %d: cursors in memory %q, from the mirror %q", limit, mem.cursors, mirror.cursors)
				}
			}
			for i, key := range f.pageAll(table, "", len(want)).keys {
				for _, query := range []string{"", "?" + travel} {
					var row Row
					if code := f.get("/api/v1/tables/"+table+"/rows/"+url.PathEscape(key)+query, &row); code != http.StatusOK ||
						row.Key != key || string(row.Values["id"]) != want[i] {
						t.Errorf("row %s%s: status %d, %+v; want id %s", key, query, code, row, want[i])
					}
				}
			}
		})
	}
}

// pagedRows is what paging a table through gave: the ids of its rows, the
// keys of its rows and the cursors (next) of its pages, in order.
type pagedRows struct {
	ids, keys, cursors []string
}

// pageAll pages a table through, limit rows a page, with the extra query
// (time travel) if not empty.
func (f *fixture) pageAll(table, query string, limit int) pagedRows {
	f.t.Helper()
	var out pagedRows
	after := ""
	for range 1000 {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if after != "" {
			q.Set("after", after)
		}
		path := "/api/v1/tables/" + table + "/rows?" + q.Encode()
		if query != "" {
			path += "&" + query
		}
		var page struct {
			Rows []Row
			Next string
		}
		if code := f.get(path, &page); code != http.StatusOK {
			f.t.Fatalf("GET %s: status %d", path, code)
		}
		for _, r := range page.Rows {
			out.ids = append(out.ids, string(r.Values["id"]))
			out.keys = append(out.keys, r.Key)
		}
		if page.Next == "" {
			return out
		}
		out.cursors = append(out.cursors, page.Next)
		after = page.Next
	}
	f.t.Fatalf("%s: paging does not end", table)
	return out
}

// idsInOrder returns the ids of a table's rows in PostgreSQL's order.
func (f *fixture) idsInOrder(table, orderBy string) []string {
	f.t.Helper()
	rows, err := f.conn.Query(context.Background(), `SELECT id FROM `+table+` ORDER BY `+orderBy)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		ids = append(ids, strconv.Itoa(id))
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return ids
}

// mirrorVersions returns the latest version of each table's mirror.
func (f *fixture) mirrorVersions() map[string]int64 {
	f.t.Helper()
	var listing struct {
		Tables []struct {
			Name     string
			Versions map[string]*int64
		}
	}
	if code := f.get("/api/v1/tables", &listing); code != http.StatusOK {
		f.t.Fatalf("tables: status %d", code)
	}
	out := map[string]int64{}
	for _, ti := range listing.Tables {
		if v := ti.Versions["mirror"]; v != nil {
			out[ti.Name] = *v
		}
	}
	return out
}

// TestMirrorPagesAcrossFilesAsMemory writes rows to several data files of
// a mirror as the applier does (each file a run of keys in the files' byte
// order, disjoint from the others) and pages them from the mirror and from
// memory (loaded from the mirror, as a restarted hub does). Keyed by
// float8 or text, the byte order is the key order and a page reads the
// files from the cursor's on; keyed by numeric it is not, and a page
// merges the files. Both give the rows in PostgreSQL's order, with the
// same cursors, and find every row, by a key equal in value too.
func TestMirrorPagesAcrossFilesAsMemory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oid     uint32
		typmod  int32
		ordered bool
		exact   bool
		keys    []string // in PostgreSQL's order
	}{
		{"float8", pgtype.Float8OID, -1, true, true, []string{"-Infinity", "-2", "-0", "0.25", "1.5", "9", "10", "1e300", "Infinity", "NaN"}},
		{"text", pgtype.TextOID, -1, true, true, []string{"", "10", "9", "B", "Z", "a", "a b", "b", "ä", "é"}},
		{"numeric", pgtype.NumericOID, -1, false, false, []string{"-Infinity", "-2", "-1", "0", "0.25", "1.5", "9", "10", "100", "Infinity", "NaN"}},
		{"decimal", pgtype.NumericOID, 8<<16 | 2 + 4, false, true, []string{"-2.00", "-1.00", "0.00", "0.25", "1.50", "9.00", "10.00", "100.00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHub(nil, HubConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			ms := writeMirror(t, h, store.Column{Name: "k", TypeOID: tc.oid, TypeMod: tc.typmod, Key: true}, tc.keys, 3)
			if ms.ordered != tc.ordered || ms.exact != tc.exact || len(ms.files) < 3 {
				t.Fatalf("%d files, ordered %v, exact %v; want 3 or more, ordered %v, exact %v",
					len(ms.files), ms.ordered, ms.exact, tc.ordered, tc.exact)
			}
			mem := loadMemRows(t, h, ms)
			want := make([]string, len(tc.keys))
			for i := range want {
				want[i] = strconv.Itoa(i)
			}
			for _, limit := range []int{1, 2, 3, 4, len(tc.keys)} {
				memIDs, memCursors := pageSource(t, h, mem, limit)
				mirrorIDs, mirrorCursors := pageSource(t, h, ms, limit)
				if !slices.Equal(memIDs, want) || !slices.Equal(mirrorIDs, want) {
					t.Errorf("limit %d: ids in memory %v, from the mirror %v; want %v", limit, memIDs, mirrorIDs, want)
				}
				if !slices.Equal(memCursors, mirrorCursors) {
					t.Errorf("limit %d: cursors in memory %q, from the mirror %q", limit, memCursors, mirrorCursors)
				}
			}
			for i, k := range tc.keys {
				if tc.name == "numeric" && k == "1.5" {
					k = "1.50" // equal in value, written otherwise
				}
				for _, src := range []rowSource{mem, ms} {
					row, ok, err := findRow(context.Background(), h.types, src, k)
					if err != nil || !ok || string(row.Values["id"]) != strconv.Itoa(i) {
						t.Errorf("%T: key %q: %+v, %v, %v; want id %d", src, k, row, ok, err, i)
					}
				}
			}
		})
	}
}

// writeMirror writes a mirror of a table keyed by key, with an int column
// id, whose rows have the keys given (as text) and ids in their order,
// perFile rows a data file in the files' byte order, and returns its scan.
func writeMirror(t *testing.T, h *Hub, key store.Column, keys []string, perFile int) *mirrorScan {
	t.Helper()
	rel := &store.Relation{Key: store.RelationKey{OID: 16384, LSN: 0x100}, Schema: "public", Name: "keyed", ReplicaIdentity: 'd',
		Columns: []store.Column{key, {Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1}}}
	kt := h.types.DeltaType(key)
	schema := delta.NewStructType(delta.NewField("k", kt, false), delta.NewField("id", delta.TypeInteger, false))
	conv := typemap.ConverterFor(kt, "k", quiet{})
	type encoded struct {
		key []byte
		row delta.Row
	}
	rows := make([]encoded, len(keys))
	for i, k := range keys {
		v, err := h.types.ParseKey(key.TypeOID, k)
		if err != nil {
			t.Fatal(err)
		}
		dv := conv(&v)
		rows[i] = encoded{key: typemap.AppendKeyValue(nil, dv), row: delta.Row{dv, int32(i)}}
	}
	slices.SortFunc(rows, func(a, b encoded) int { return bytes.Compare(a.key, b.key) })
	root := t.TempDir()
	var adds []*delta.Add
	for start := 0; start < len(rows); start += perFile {
		part := rows[start:min(start+perFile, len(rows))]
		data := make([]delta.Row, len(part))
		for i, r := range part {
			data[i] = r.row
		}
		add, err := delta.WriteDataFile(context.Background(), root, schema, nil, nil, data, delta.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		add.Tags = map[string]string{tagMirrorMinKey: hex.EncodeToString(part[0].key), tagMirrorMaxKey: hex.EncodeToString(part[len(part)-1].key)}
		adds = append(adds, add)
	}
	ms, err := h.mirrorScanOf(rel, mirrorLayout{root: root, version: 1, schema: schema, conf: map[string]string{confMirrorKey: `["k"]`}, adds: adds})
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// loadMemRows has the hub keep the rows of a mirror, as a restarted hub
// loads them, and returns their source.
func loadMemRows(t *testing.T, h *Hub, ms *mirrorScan) rowSource {
	t.Helper()
	ts := newTableState(ms.rel, h.maxValue)
	err := ms.each(context.Background(), func(row Row, key []store.Value) bool {
		ts.setRow(row.Key, &rowState{key: key, json: row.Values})
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	h.tables[ms.rel.TableName()] = ts
	return memRows{h: h, table: ms.rel.TableName(), rel: ms.rel}
}

// pageSource pages a row source through, limit rows a page, and returns
// the ids of its rows and the cursors of its pages.
func pageSource(t *testing.T, h *Hub, src rowSource, limit int) (ids, cursors []string) {
	t.Helper()
	after := ""
	for range 1000 {
		p, err := readPage(context.Background(), h.types, src, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			ids = append(ids, string(r.Values["id"]))
		}
		if p.Next == "" {
			return ids, cursors
		}
		cursors = append(cursors, p.Next)
		after = p.Next
	}
	t.Fatalf("%T: paging does not end", src)
	return nil, nil
}

// TestResponsesEncodeAsTheMapsTheyReplaced: the API's typed responses
// encode byte for byte as the maps they replaced did, which encoded their
// keys sorted.
func TestResponsesEncodeAsTheMapsTheyReplaced(t *testing.T) {
	v0, v7 := int64(0), int64(7)
	rows := []Row{{Key: `["a"]`, Values: map[string]json.RawMessage{"k": json.RawMessage(`"a"`)}}}
	info := TableInfo{Name: "public.t", Columns: []ColumnInfo{{Name: "k", Type: "text"}}, Key: []string{"k"}}
	history := []historyEntry{{Version: 8, Timestamp: "2024-01-01T00:00:00Z", Operation: "WRITE"}}
	reason := "source is starting"
	// mapListing is a table's listing as it was, its versions a map.
	type mapListing struct {
		TableInfo
		Versions map[string]*int64 `json:"versions"`
	}
	for _, tc := range []struct {
		name      string
		typed, as any
	}{
		{"rows in memory", rowsPage{Table: "public.t", Rows: []Row{}}, map[string]any{"table": "public.t", "rows": []Row{}}},
		{"rows with next", rowsPage{Table: "public.t", Rows: rows, Next: rows[0].Key},
			map[string]any{"table": "public.t", "rows": rows, "next": rows[0].Key}},
		{"rows of version 0", rowsPage{Table: "public.t", Rows: rows, Version: &v0},
			map[string]any{"table": "public.t", "rows": rows, "version": v0}},
		{"rows of a version with next", rowsPage{Table: "public.t", Rows: rows, Version: &v7, Next: rows[0].Key},
			map[string]any{"table": "public.t", "rows": rows, "version": v7, "next": rows[0].Key}},
		{"tables", tablesList{Tables: []tableListing{{TableInfo: info, Versions: tableVersions{Mirror: &v7}}}},
			map[string]any{"tables": []mapListing{{TableInfo: info, Versions: map[string]*int64{"mirror": &v7, "changelog": nil}}}}},
		{"no tables", tablesList{Tables: []tableListing{}}, map[string]any{"tables": []tableListing{}}},
		{"history", historyPage{Table: "public.t", History: history}, map[string]any{"table": "public.t", "history": history}},
		{"history with next", historyPage{Table: "public.t", History: history, NextBefore: &history[0].Version},
			map[string]any{"table": "public.t", "history": history, "next_before": history[0].Version}},
		{"ready", readiness{Status: "ready"}, map[string]string{"status": "ready"}},
		{"not ready", readiness{Status: "not ready", Reason: &reason}, map[string]string{"status": "not ready", "reason": reason}},
		{"error", errorBody{Error: "bad key"}, map[string]string{"error": "bad key"}},
	} {
		got, want := httptest.NewRecorder(), httptest.NewRecorder()
		writeJSON(got, http.StatusOK, tc.typed)
		writeJSON(want, http.StatusOK, tc.as)
		if got.Body.String() != want.Body.String() {
			t.Errorf("%s: %s, want %s", tc.name, got.Body, want.Body)
		}
	}
}
