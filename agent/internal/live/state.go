package live

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// tableState holds a table's current rows, as of the hub's offset.
type tableState struct {
	name string
	rel  *store.Relation // the newest schema version seen
	rows map[string]*rowState
	// bytes is the size of the rows' keys and JSON values.
	bytes int
	// maxValue bounds each rendered value (HubConfig.MaxValueBytes).
	maxValue int
	// overflow is set once the table had too many rows to keep: rows is
	// then nil and the table is served from its mirror.
	overflow bool
	// seededTo is the end LSN of the last transaction the rows loaded from
	// the table's mirror hold; the queue's changes up to it are skipped.
	seededTo store.LSN
	// sorted holds the keys of rows in key order while sortedOK: a change
	// that adds or removes a key clears it, and sortedKeys sorts again
	// when asked, so that pages and snapshots do not sort every time.
	sorted   []string
	sortedOK bool
}

// rowState is one current row.
type rowState struct {
	key  []store.Value
	json map[string]json.RawMessage
	// bytes is the size of its key, column names and JSON values, set by
	// tableState.setRow.
	bytes int
}

// newTableState returns the state of a table of no rows yet, whose values
// are rendered bounded by maxValue bytes.
func newTableState(rel *store.Relation, maxValue int) *tableState {
	return &tableState{name: rel.TableName(), rel: rel, rows: map[string]*rowState{}, maxValue: maxValue}
}

// keyOf returns the key values of a row laid out per rel, and their string
// form (keyString).
func keyOf(rel *store.Relation, vals []store.Value) ([]store.Value, string) {
	var key []store.Value
	rel.KeyOf(func(i int) {
		if i < len(vals) {
			key = append(key, vals[i])
		}
	})
	return key, keyString(key)
}

// keyString returns the string form of key values: the JSON array of the
// values, which identifies a row to clients and is the cursor of its page.
// Key values are rendered whole, never truncated: the key identifies the
// row, and clients send it back.
func keyString(key []store.Value) string {
	b := []byte{'['}
	for i, v := range key {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, typemap.JSON(v)...)
	}
	return string(append(b, ']'))
}

// apply applies one change and describes it for clients. ok is false for a
// change that does not alter the visible state.
//
// With wantOut false, and for a table served from its mirror, nothing is
// rendered: the hub neither keeps nor streams the change.
func (t *tableState) apply(rel *store.Relation, c *store.Change, wantOut bool) (out Change, ok bool) {
	t.rel = rel
	if t.overflow && !wantOut {
		return out, false
	}
	out.Table = t.name
	out.Op = c.Op.String()
	if t.overflow {
		// No rows are kept: the change is rendered only if a client
		// is sent it. A change holding a value over the bound is rendered
		// now, so that the value is not retained whole.
		raw := *c
		out.raw, out.rel, out.maxValue = &raw, rel, t.maxValue
		if holdsLarge(raw.New, t.maxValue) || holdsLarge(raw.Old, t.maxValue) {
			out.render()
		}
		return out, true
	}
	switch c.Op {
	case store.OpTruncate:
		if t.rows != nil {
			clear(t.rows)
		}
		t.bytes = 0
		t.sortedOK = false
		return out, true
	case store.OpDelete:
		_, k := keyOf(rel, c.Old)
		t.removeKey(k)
		out.Key = k
		return out, true
	}
	key, k := keyOf(rel, c.New)
	var prev *rowState
	if c.Op == store.OpUpdate && c.Old != nil {
		if _, oldKey := keyOf(rel, c.Old); oldKey != k {
			prev = t.rows[oldKey]
			t.removeKey(oldKey)
			out.OldKey = oldKey
		}
	}
	if prev == nil {
		prev = t.rows[k]
	}
	row := &rowState{key: key, json: make(map[string]json.RawMessage, len(rel.Columns))}
	for i, col := range rel.Columns {
		v := c.New[i]
		if v.Kind == store.KindUnchanged {
			// An unchanged TOASTed value keeps the value the row had; when
			// the row is not kept here, the client keeps the value it has.
			if prev != nil {
				if old, ok := prev.json[col.Name]; ok {
					row.json[col.Name] = old
				}
			}
			continue
		}
		row.json[col.Name] = typemap.BoundedJSON(v, t.maxValue)
	}
	if !t.overflow {
		t.setRow(k, row)
	}
	out.Key, out.Row = k, row.json
	return out, true
}

// render fills Key, OldKey and Row of a change kept raw, each value bounded
// by maxValue. Unchanged TOASTed values are left out: the client keeps the
// value it has.
func (c *Change) render() {
	raw, rel, maxValue := c.raw, c.rel, c.maxValue
	if raw == nil {
		return
	}
	c.raw, c.rel = nil, nil
	switch raw.Op {
	case store.OpTruncate:
		return
	case store.OpDelete:
		_, c.Key = keyOf(rel, raw.Old)
		return
	}
	_, c.Key = keyOf(rel, raw.New)
	if raw.Op == store.OpUpdate && raw.Old != nil {
		if _, oldKey := keyOf(rel, raw.Old); oldKey != c.Key {
			c.OldKey = oldKey
		}
	}
	c.Row = make(map[string]json.RawMessage, len(rel.Columns))
	for i, col := range rel.Columns {
		if i < len(raw.New) && raw.New[i].Kind != store.KindUnchanged {
			c.Row[col.Name] = typemap.BoundedJSON(raw.New[i], maxValue)
		}
	}
}

// holdsLarge reports whether one of vals is larger than maxValue bytes:
// one that is rendered truncated.
func holdsLarge(vals []store.Value, maxValue int) bool {
	for _, v := range vals {
		if typemap.Size(v) > maxValue {
			return true
		}
	}
	return false
}

// size estimates a change's encoded size: the size of its rendered values,
// or of the values of a change kept raw (none larger than the bound: see
// tableState.apply).
func (c *Change) size() int {
	n := 32 + len(c.Key) + len(c.OldKey)
	for _, v := range c.Row {
		n += len(v) + 8
	}
	if c.raw != nil {
		for _, vals := range [][]store.Value{c.raw.Old, c.raw.New} {
			for _, v := range vals {
				n += len(v.Bytes) + 8
			}
		}
	}
	return n
}

// setRow sets the row of key k.
func (t *tableState) setRow(k string, row *rowState) {
	old, ok := t.rows[k]
	if ok {
		t.bytes -= old.bytes
	} else {
		t.sortedOK = false
	}
	row.bytes = len(k)
	for col, v := range row.json {
		row.bytes += len(col) + len(v)
	}
	t.rows[k] = row
	t.bytes += row.bytes
}

// removeKey removes the row of key k.
func (t *tableState) removeKey(k string) {
	if old, ok := t.rows[k]; ok {
		t.bytes -= old.bytes
		delete(t.rows, k)
		t.sortedOK = false
	}
}

// sortedKeys returns the keys of the current rows in primary-key order.
// The slice is the table's: callers must not change it.
func (t *tableState) sortedKeys() []string {
	if t.sortedOK {
		return t.sorted
	}
	keys := t.sorted[:0]
	for k := range t.rows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := compareKeys(t.rows[a].key, t.rows[b].key); c != 0 {
			return c
		}
		return strings.Compare(a, b) // keys equal in value, such as arrays
	})
	t.sorted, t.sortedOK = keys, true
	return keys
}

// keyVals returns the key values of the row of key k.
func (t *tableState) keyVals(k string) []store.Value {
	return t.rows[k].key
}

// compareKeys orders key values as PostgreSQL's default operators would for
// the mapped types: numbers by value, text by bytes, NULL first.
func compareKeys(a, b []store.Value) int {
	for i := range min(len(a), len(b)) {
		if c := typemap.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}
