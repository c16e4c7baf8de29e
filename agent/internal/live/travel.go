package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

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

// readMirror reads the local Delta mirror of table at a version, as of a
// time (version < 0), or at its latest version (version < 0 and a zero
// time). Values are rendered exactly as the live rows are, so a client sees
// one format.
func (h *Hub) readMirror(ctx context.Context, table string, version int64, asOf time.Time) (*travelRows, error) {
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
	case version >= 0:
		snap, err = t.SnapshotAt(ctx, version)
	case !asOf.IsZero():
		snap, err = t.SnapshotAsOf(ctx, asOf)
	default:
		snap, err = t.Snapshot(ctx)
	}
	if err != nil {
		return nil, err
	}
	return mirrorRows(ctx, table, snap, rel)
}

// mirrorRows reads the rows of a mirror's snapshot, laid out per rel.
func mirrorRows(ctx context.Context, table string, snap *delta.Snapshot, rel *store.Relation) (*travelRows, error) {
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s at version %d: %w", table, snap.Version(), err)
	}
	oids := map[string]uint32{}
	for _, c := range rel.Columns {
		oids[c.Name] = c.TypeOID
	}
	fields := snap.Schema().Fields
	tr := &travelRows{version: snap.Version(), rows: map[string]Row{}, keyVals: map[string][]store.Value{}, rel: rel}
	for _, row := range rows {
		byName := map[string]store.Value{}
		values := map[string]json.RawMessage{}
		deleted := false
		for i, f := range fields {
			if f.Name == softDeleteColumn {
				deleted, _ = row[i].(bool)
				continue
			}
			v := storeValue(row[i], f.Type, oids[f.Name])
			byName[f.Name] = v
			values[f.Name] = jsonValue(v)
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
			v, err := keyValues(tr.rel, after)
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
	want, err := keyValues(tr.rel, key)
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

// storeValue converts a value read from a Delta table back to the captured
// form, given the Delta type and the PostgreSQL column type.
func storeValue(v any, dt delta.DataType, oid uint32) store.Value {
	switch x := v.(type) {
	case nil:
		return store.Value{}
	case bool:
		if x {
			return store.Value{Kind: store.KindBool, Int: 1}
		}
		return store.Value{Kind: store.KindBool}
	case int8:
		return store.Value{Kind: store.KindInt16, Int: int64(x)}
	case int16:
		return store.Value{Kind: store.KindInt16, Int: int64(x)}
	case int32:
		return store.Value{Kind: store.KindInt32, Int: int64(x)}
	case int64:
		if oid == pgtype.TimeOID {
			return store.Value{Kind: store.KindTime, Int: x}
		}
		return store.Value{Kind: store.KindInt64, Int: x}
	case float32:
		return store.Value{Kind: store.KindFloat32, Int: int64(math.Float32bits(x))}
	case float64:
		return store.Value{Kind: store.KindFloat64, Int: int64(math.Float64bits(x))}
	case delta.Decimal:
		return store.Value{Kind: store.KindNumeric, Bytes: []byte(x.String())}
	case string:
		if oid == pgtype.NumericOID {
			return store.Value{Kind: store.KindNumeric, Bytes: []byte(x)}
		}
		return store.Value{Kind: store.KindString, Bytes: []byte(x)}
	case []byte:
		return store.Value{Kind: store.KindBytes, Bytes: x}
	case time.Time:
		if dt == delta.TypeDate {
			return store.Value{Kind: store.KindDate, Int: x.Unix() / 86400}
		}
		return store.Value{Kind: store.KindTimestamp, Int: x.UnixMicro()}
	case []any:
		var elem delta.DataType
		if at, ok := dt.(*delta.ArrayType); ok {
			elem = at.ElementType
		}
		out := store.Value{Kind: store.KindArray, Elems: make([]store.Value, len(x))}
		for i, e := range x {
			out.Elems[i] = storeValue(e, elem, 0)
		}
		return out
	}
	return store.Value{Kind: store.KindString, Bytes: []byte(fmt.Sprint(v))}
}
