package applier

import (
	"maps"

	"github.com/lakeside/lakeside/store"
)

// replacedIn returns the names of the data columns whose values in vals,
// a row of the mapping's schema version, are stored other than PostgreSQL
// holds them, or nil.
func (m *relMapping) replacedIn(cols []dataCol, vals []store.Value) []any {
	var out []any
	for _, i := range m.lossy {
		if i < len(vals) {
			if v := &vals[i]; v.Kind != store.KindNull && v.Kind != store.KindUnchanged && m.check[i](v) {
				out = append(out, cols[m.dst[i]].name)
			}
		}
	}
	return out
}

// noteReplaced counts the replaced values of a changelog row of table and
// logs the first replacement in each column.
func (a *Applier) noteReplaced(table string, columns []any) {
	if len(columns) == 0 {
		return
	}
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
