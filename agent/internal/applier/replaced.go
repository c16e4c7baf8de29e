package applier

import (
	"bytes"
	"maps"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// A value is stored exactly where its Delta type can hold it. Where it
// cannot, what is stored instead is never silent: the changelog row lists
// the column in _replaced, the table's count of replaced values goes up
// (Applier.Replaced, a metric), and the first replacement in each column
// is logged. The replacements:
//
//	date         outside 0001-01-01 to 9999-12-31 (the range of Delta
//	             dates), infinities included: the nearer end
//	timestamp    outside 0001-01-01 00:00 to 9999-12-31 23:59:59.999999,
//	             infinities included: the nearer end (a time past 294246 AD
//	             or before 290307 BC, which capture queues as text because
//	             an int64 cannot count its microseconds, too)
//	decimal(p,s) NaN, Infinity, -Infinity, or more integer digits than p-s: null
//	array        an element replaced as its type says
//
// A value whose kind does not fit its column (as capture queued it) is
// written as null or as its text, and is replaced too.

// replacedCheck reports whether a value of a column is stored other than
// PostgreSQL holds it; nil for a type whose values are all stored exactly.
type replacedCheck func(v *store.Value) bool

// replacedCheckFor returns the check of a column of Delta type dt.
func replacedCheckFor(dt delta.DataType) replacedCheck {
	switch t := dt.(type) {
	case delta.DecimalType:
		return func(v *store.Value) bool {
			return v.Kind != store.KindNumeric || !fitsDecimal(v.Bytes, t.Precision, t.Scale)
		}
	case *delta.ArrayType:
		elem := replacedCheckFor(t.ElementType)
		if elem == nil {
			return func(v *store.Value) bool { return v.Kind != store.KindArray }
		}
		return func(v *store.Value) bool {
			if v.Kind != store.KindArray {
				return true
			}
			for i := range v.Elems {
				if k := v.Elems[i].Kind; k != store.KindNull && elem(&v.Elems[i]) {
					return true
				}
			}
			return false
		}
	case delta.PrimitiveType:
		switch t {
		case delta.TypeDate:
			return func(v *store.Value) bool {
				return v.Kind != store.KindDate || v.Int > int64(maxDate) || v.Int < int64(minDate)
			}
		case delta.TypeTimestamp:
			return func(v *store.Value) bool {
				return v.Kind != store.KindTimestamp || v.Int > maxTimestamp || v.Int < minTimestamp
			}
		}
	}
	return nil
}

// fitsDecimal reports whether the exact decimal text PostgreSQL printed
// fits decimal(p,s): a number, with at most p-s integer digits and s
// fractional ones.
func fitsDecimal(text []byte, p, s int) bool {
	t := bytes.TrimLeft(text, "+-")
	intPart, frac, _ := bytes.Cut(t, []byte("."))
	intPart = bytes.TrimLeft(intPart, "0")
	if len(intPart) > p-s || len(frac) > s || len(t) == 0 {
		return false
	}
	for _, c := range t {
		if (c < '0' || c > '9') && c != '.' {
			return false // NaN, Infinity
		}
	}
	return true
}

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
