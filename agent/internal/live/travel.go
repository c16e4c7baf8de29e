package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

var (
	errNoMirror = errors.New("no Delta mirror of the table yet")
	errBadKey   = errors.New("bad key")
)

// softDeleteColumn marks deleted rows in a mirror written with soft deletes.
const softDeleteColumn = "_deleted"

// travelRows are a mirror's rows at one version, in key order.
type travelRows struct {
	version int64
	keys    []string
	rows    map[string]Row
	keyVals map[string][]store.Value
	rel     *store.Relation
	types   *typemap.Map
}

// known returns nil when the hub has seen the table, and otherwise why not.
func (h *Hub) known(table string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tables[table] != nil {
		return nil
	}
	return h.missingLocked(table)
}

// relation returns the newest schema version of a table.
func (h *Hub) relation(table string) *store.Relation {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tables[table]; t != nil {
		return t.rel
	}
	return nil
}

// readMirror reads the local Delta mirror of table at the version at
// says. Values are rendered exactly as the live rows are, so a client sees
// one format.
func (h *Hub) readMirror(ctx context.Context, table string, at travelTo) (*travelRows, error) {
	rel := h.relation(table)
	if rel == nil {
		return nil, h.known(table)
	}
	if h.tablesDir == "" {
		return nil, errNoMirror
	}
	t, err := delta.Open(ctx, filepath.Join(h.tablesDir, rel.DirName()))
	if err != nil {
		return nil, errNoMirror
	}
	var snap *delta.Snapshot
	switch {
	case at.byVersion:
		snap, err = t.SnapshotAt(ctx, at.version)
	case at.byTime:
		snap, err = t.SnapshotAsOf(ctx, at.asOf)
	default:
		snap, err = t.Snapshot(ctx)
	}
	if err != nil {
		return nil, err
	}
	return mirrorRows(ctx, h.types, table, snap, rel)
}

// mirrorRows reads the rows of a mirror's snapshot, laid out per rel.
func mirrorRows(ctx context.Context, types *typemap.Map, table string, snap *delta.Snapshot, rel *store.Relation) (*travelRows, error) {
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s at version %d: %w", table, snap.Version(), err)
	}
	byType := map[string]typemap.Type{}
	for _, c := range rel.Columns {
		byType[c.Name] = types.Lookup(c.TypeOID)
	}
	fields := snap.Schema().Fields
	tr := &travelRows{version: snap.Version(), rows: map[string]Row{}, keyVals: map[string][]store.Value{}, rel: rel, types: types}
	for _, row := range rows {
		byName := map[string]store.Value{}
		values := map[string]json.RawMessage{}
		deleted := false
		for i, f := range fields {
			if f.Name == softDeleteColumn {
				deleted, _ = row[i].(bool)
				continue
			}
			v := byType[f.Name].FromDelta(row[i], f.Type)
			byName[f.Name] = v
			values[f.Name] = typemap.JSON(v)
		}
		if deleted {
			continue
		}
		var ordered []store.Value
		for _, c := range rel.Columns {
			ordered = append(ordered, byName[c.Name])
		}
		keyVals, key := keyOf(rel, ordered)
		tr.rows[key] = Row{Key: key, Values: values}
		tr.keyVals[key] = keyVals
		tr.keys = append(tr.keys, key)
	}
	slices.SortFunc(tr.keys, func(a, b string) int { return compareKeys(tr.keyVals[a], tr.keyVals[b]) })
	return tr, nil
}

// page returns up to limit rows after the given key.
func (tr *travelRows) page(after string, limit int) ([]Row, string, error) {
	start := 0
	if after != "" {
		afterKey, ok := tr.keyVals[after]
		if !ok {
			v, err := keyValues(tr.types, tr.rel, after)
			if err != nil {
				return nil, "", fmt.Errorf("%w: %v", errBadKey, err)
			}
			afterKey = v
		}
		for start < len(tr.keys) && compareKeys(tr.keyVals[tr.keys[start]], afterKey) <= 0 {
			start++
		}
	}
	end := min(start+limit, len(tr.keys))
	out := make([]Row, 0, end-start)
	for _, k := range tr.keys[start:end] {
		out = append(out, tr.rows[k])
	}
	next := ""
	if end < len(tr.keys) {
		next = tr.keys[end-1]
	}
	return out, next, nil
}

// find returns the row with the given key.
func (tr *travelRows) find(key string) (Row, bool, error) {
	if r, ok := tr.rows[key]; ok {
		return r, true, nil
	}
	want, err := keyValues(tr.types, tr.rel, key)
	if err != nil {
		return Row{}, false, fmt.Errorf("%w: %v", errBadKey, err)
	}
	for k, kv := range tr.keyVals {
		if compareKeys(kv, want) == 0 {
			return tr.rows[k], true, nil
		}
	}
	return Row{}, false, nil
}
