package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
