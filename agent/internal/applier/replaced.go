package applier

import (
	"maps"
	"slices"

	"github.com/lakeside/lakeside/store"
)

// replaced are the data columns of a changelog row whose values are stored
// other than PostgreSQL holds them: names, in the order of the row's
// schema version, and of those the values capture did not keep, being too
// large (store.KindTooLarge), with their sizes.
type replaced struct {
	names    []any
	tooLarge map[string]int64
}

// replacedIn returns the data columns whose values in vals, a row of the
// mapping's schema version, are stored other than PostgreSQL holds them,
// or nil.
func (m *relMapping) replacedIn(cols []dataCol, vals []store.Value) *replaced {
	var out *replaced
	add := func(i int) {
		if out == nil {
			out = &replaced{}
		}
		name := cols[m.dst[i]].name
		out.names = append(out.names, name)
		if vals[i].Kind == store.KindTooLarge {
			if out.tooLarge == nil {
				out.tooLarge = map[string]int64{}
			}
			out.tooLarge[name] = vals[i].Int
		}
	}
	for _, i := range m.lossy {
		if i < len(vals) {
			if v := &vals[i]; v.Kind != store.KindNull && v.Kind != store.KindUnchanged && m.check[i](v) {
				add(i)
			}
		}
	}
	// Any column may hold a value too large to keep; the lossy ones'
	// checks found theirs.
	for i := range vals {
		if vals[i].Kind == store.KindTooLarge {
			if _, lossy := slices.BinarySearch(m.lossy, i); !lossy {
				add(i)
			}
		}
	}
	return out
}

// noteReplaced counts the replaced values of a changelog row of table and
// logs the first replacement in each column.
func (a *Applier) noteReplaced(table string, r *replaced) {
	if r == nil {
		return
	}
	columns := r.names
	a.mu.Lock()
	if a.replaced == nil {
		a.replaced = map[string]int64{}
	}
	a.replaced[table] += int64(len(columns))
	a.mu.Unlock()
	a.warnMu.Lock()
	defer a.warnMu.Unlock()
	for _, c := range columns {
		key := table + "." + c.(string)
		if a.replacedColumns[key] {
			continue
		}
		if a.replacedColumns == nil {
			a.replacedColumns = map[string]bool{}
		}
		a.replacedColumns[key] = true
		if size, ok := r.tooLarge[c.(string)]; ok {
			a.log.Warn("a value larger than capture keeps (source.max_value_size) is stored as null; the changelog lists the column in _replaced (logged once per column)",
				"table", table, "column", c, "bytes", size)
			continue
		}
		a.log.Warn("a value could not be stored as PostgreSQL holds it; the changelog lists the column in _replaced (logged once per column)",
			"table", table, "column", c)
	}
}

// Replaced returns how many values each changelog stored other than
// PostgreSQL holds them since start, by source table.
func (a *Applier) Replaced() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.replaced)
}
