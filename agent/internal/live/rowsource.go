package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// rowSource serves the current rows of one table in key order: the rows the
// hub keeps in memory (memRows), or the rows of a mirror snapshot
// (mirrorScan), for tables too large to keep and for time travel. The key
// order is PostgreSQL's for the mapped types (compareKeys): numbers by
// value, floats with NaN above every number and -0 equal to 0, text by
// bytes, NULL first.
type rowSource interface {
	// relation returns the schema version whose key columns key the rows.
	relation() *store.Relation
	// version returns the mirror version the rows are read from, or nil
	// for the rows in memory.
	version() *int64
	// page returns up to limit rows whose keys follow after (nil: from the
	// first row), in key order, and whether rows follow the last one.
	page(ctx context.Context, after []store.Value, limit int) (rows []Row, more bool, err error)
	// find returns the row whose key equals key.
	find(ctx context.Context, key []store.Value) (Row, bool, error)
}

// rowsPage is a page of rows as GET /rows answers it. The fields are in
// the order of their names, the order the page had when it was a map.
type rowsPage struct {
	// Next is the cursor to ask for the following page with (?after=):
	// the key of the last row, set only when rows follow it.
	Next  string `json:"next,omitempty"`
	Rows  []Row  `json:"rows"`
	Table string `json:"table"`
	// Version is the mirror version the rows were read from.
	Version *int64 `json:"version,omitempty"`
}

// withRows calls f with the source of a table's rows: its mirror at the
// version at says when at asks for one or when the table is too large to
// keep, its rows in memory otherwise. f reads a mirror, and sends what it
// reads, in a worker slot (see mirrorReads.work).
func (h *Hub) withRows(ctx context.Context, table string, at travelTo, f func(rowSource) error) error {
	rel, overflow, err := h.rowsOf(table)
	if err != nil {
		return err
	}
	if !at.set() && !overflow {
		return f(memRows{h: h, table: table, rel: rel})
	}
	return h.mirrorReads.work(ctx, func() error {
		ms, err := h.scanMirror(ctx, table, at)
		if err != nil {
			return err
		}
		return f(ms)
	})
}

// rowsOf returns the newest schema version of a table and whether it is
// served from its mirror, or why the hub has no rows of it.
func (h *Hub) rowsOf(table string) (*store.Relation, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tables[table]
	if t == nil {
		return nil, false, h.missingLocked(table)
	}
	return t.rel, t.overflow, nil
}

// readPage reads the page of src after the cursor after ("": from the first
// row): up to limit rows, and the cursor of the page that follows.
func readPage(ctx context.Context, types *typemap.Map, src rowSource, after string, limit int) (rowsPage, error) {
	var from []store.Value
	if after != "" {
		var err error
		if from, err = keyValues(types, src.relation(), after); err != nil {
			return rowsPage{}, err
		}
	}
	rows, more, err := src.page(ctx, from, limit)
	if err != nil {
		return rowsPage{}, err
	}
	p := rowsPage{Rows: rows, Version: src.version()}
	if p.Rows == nil {
		p.Rows = []Row{}
	}
	if more && len(rows) > 0 {
		p.Next = rows[len(rows)-1].Key
	}
	return p, nil
}

// findRow returns the row of src whose key a client gives.
func findRow(ctx context.Context, types *typemap.Map, src rowSource, key string) (Row, bool, error) {
	want, err := keyValues(types, src.relation(), key)
	if err != nil {
		return Row{}, false, err
	}
	return src.find(ctx, want)
}

// keyValues parses a key or a cursor a client gives: a JSON array of the
// key values as the API renders them (null for NULL), or for a one-column
// key the plain text.
func keyValues(types *typemap.Map, rel *store.Relation, s string) ([]store.Value, error) {
	keyCols := rel.KeyColumns()
	if !utf8.ValidString(s) {
		// Keys are rendered as JSON, which holds only UTF-8: a key
		// that is not could be neither rendered nor found again.
		return nil, fmt.Errorf("%w: key must be UTF-8 text", errBadKey)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal([]byte(s), &parts); err != nil || len(parts) != len(keyCols) {
		if len(keyCols) != 1 {
			return nil, fmt.Errorf("%w: key must be a JSON array of %d values", errBadKey, len(keyCols))
		}
		text, _ := json.Marshal(s)
		parts = []json.RawMessage{text}
	}
	out := make([]store.Value, len(keyCols))
	for i, ci := range keyCols {
		v, err := keyValue(types, rel.Columns[ci].TypeOID, parts[i])
		if err != nil {
			return nil, fmt.Errorf("%w: key column %s: %v", errBadKey, rel.Columns[ci].Name, err)
		}
		out[i] = v
	}
	return out, nil
}

// keyValue parses one value of a key of type oid: null, a JSON string of
// its text, or its text.
func keyValue(types *typemap.Map, oid uint32, part json.RawMessage) (store.Value, error) {
	if string(bytes.TrimSpace(part)) == "null" {
		return store.Value{Kind: store.KindNull}, nil
	}
	var text string
	if err := json.Unmarshal(part, &text); err != nil {
		text = string(part)
	}
	return types.ParseKey(oid, text)
}

// indexAfter returns the index of the first of ks, sorted in key order,
// whose key follows after (0 when after is nil: every key does); key
// returns the key values of one.
func indexAfter[K any](ks []K, after []store.Value, key func(K) []store.Value) int {
	if after == nil {
		return 0
	}
	i, _ := slices.BinarySearchFunc(ks, after, func(k K, after []store.Value) int {
		if c := compareKeys(key(k), after); c != 0 {
			return c
		}
		return -1 // equal keys come before: start after them
	})
	return i
}

// indexOf returns the index of the one of ks, sorted in key order, whose
// key equals want, and whether there is one.
func indexOf[K any](ks []K, want []store.Value, key func(K) []store.Value) (int, bool) {
	return slices.BinarySearchFunc(ks, want, func(k K, want []store.Value) int { return compareKeys(key(k), want) })
}

// memRows is the rowSource of the rows the hub keeps of a table.
type memRows struct {
	h     *Hub
	table string
	rel   *store.Relation
}

func (m memRows) relation() *store.Relation { return m.rel }

func (memRows) version() *int64 { return nil }

func (m memRows) page(_ context.Context, after []store.Value, limit int) ([]Row, bool, error) {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	t := m.h.tables[m.table]
	if t == nil {
		return nil, false, m.h.missingLocked(m.table)
	}
	keys := t.sortedKeys()
	start := indexAfter(keys, after, t.keyVals)
	end := min(start+limit, len(keys))
	rows := make([]Row, 0, end-start)
	for _, k := range keys[start:end] {
		rows = append(rows, Row{Key: k, Values: t.rows[k].json})
	}
	return rows, end < len(keys), nil
}

func (m memRows) find(_ context.Context, key []store.Value) (Row, bool, error) {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	t := m.h.tables[m.table]
	if t == nil {
		return Row{}, false, m.h.missingLocked(m.table)
	}
	if r := t.rows[keyString(key)]; r != nil {
		return Row{Key: keyString(key), Values: r.json}, true, nil
	}
	// A key written otherwise, such as 1.50 for 1.5.
	keys := t.sortedKeys()
	i, ok := indexOf(keys, key, t.keyVals)
	if !ok {
		return Row{}, false, nil
	}
	return Row{Key: keys[i], Values: t.rows[keys[i]].json}, true, nil
}
