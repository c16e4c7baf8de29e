package applier

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Names of the columns the applier adds to the source table's columns.
const (
	colOp         = "_op"
	colLSN        = "_lsn"
	colXid        = "_xid"
	colCommitTS   = "_commit_ts"
	colSeq        = "_seq"
	colBefore     = "_before"
	colUnchanged  = "_unchanged"
	colReplaced   = "_replaced"
	colCommitDate = "_commit_date"
	colDeleted    = "_deleted"
)

// reserved reports whether a column name is one the applier adds. A source
// column with such a name is renamed with the suffix "__col".
func reserved(name string) bool {
	switch name {
	case colOp, colLSN, colXid, colCommitTS, colSeq, colBefore, colUnchanged, colReplaced, colCommitDate, colDeleted:
		return true
	}
	return false
}

// dataCol is one column of a source table as the Delta tables store it.
type dataCol struct {
	name string
	typ  delta.DataType
}

// columns is the list of data columns of a source table shared by its two
// Delta tables: the union of every schema version's columns, in order of
// first appearance. Columns are never removed (a dropped column stays and is
// null from then on). When a column's type changes to one with another Delta
// type, the values go to a new column "<name>__<type>" (for example
// "price__string"), and the old column is null from then on; the change is
// logged.
type columns struct {
	cols []dataCol
	idx  map[string]int
	tm   *typemap.Map
	log  *slog.Logger
	w    typemap.Warner
	// rels caches the mapping of each schema version, and last is the one
	// the mapping method returned last: changes come in runs of one schema
	// version, which then needs no lookup (the reading side alone uses
	// this cache).
	rels map[store.RelationKey]*relMapping
	last *relMapping
}

// relMapping converts the values of one schema version into a row of data
// columns.
type relMapping struct {
	rel *store.Relation
	// dst is the data column of each of the version's columns, and src
	// the version's column of each data column there was when the
	// mapping was made (-1: none).
	dst, src []int
	conv     []typemap.Converter
	// keyNames are the columns that identify a row, by data column name
	// (store.Relation.KeyColumns).
	keyNames []string
	// lossy are the version's columns whose values may be stored other
	// than PostgreSQL holds them, and check says which are (replaced.go).
	lossy []int
	check []typemap.ReplacedCheck
	// onAdder converts and puts the columns on the adder's goroutine,
	// which writes inserted rows as they were queued (see
	// Applier.applyChange); conv is the reading side's. quietOnAdder does
	// the same without warnings, for the mirror's copy of a row whose
	// values the changelog took: each value not representable is counted
	// once.
	onAdder, quietOnAdder adderColumns
}

// adderColumns are converters and putters of a schema version's columns.
type adderColumns struct {
	conv []typemap.Converter
	put  []typemap.Putter
}

// noWarnings is a warner that counts nothing.
type noWarnings struct{}

func (noWarnings) Warn(column, problem string) {}

// source returns the queued value of data column i in vals, a row of the
// mapping's schema version, or nil when the version has no such column.
func (m *relMapping) source(vals []store.Value, i int) *store.Value {
	if i < len(m.src) && m.src[i] >= 0 {
		return &vals[m.src[i]]
	}
	return nil
}

// putRow gives the values of a row of schema version m to b, each as the
// field dataPos gives its data column (-1 or beyond: none).
func (c *adderColumns) putRow(m *relMapping, vals []store.Value, b *delta.RowBuilder, dataPos []int) {
	for j := range vals {
		if j < len(m.dst) {
			if i := m.dst[j]; i < len(dataPos) && dataPos[i] >= 0 {
				c.put[j](&vals[j], b, dataPos[i])
			}
		}
	}
}

// convert is columns.convert on the adder's goroutine, for a table of n
// data columns whose mapping is m.
func (c *adderColumns) convert(m *relMapping, vals []store.Value, n int) []any {
	out := make([]any, n)
	for i := range vals {
		if i < len(m.dst) {
			out[m.dst[i]] = c.conv[i](&vals[i])
		}
	}
	return out
}

func newColumns(tm *typemap.Map, log *slog.Logger, w typemap.Warner) *columns {
	return &columns{idx: map[string]int{}, tm: tm, log: log, w: w, rels: map[store.RelationKey]*relMapping{}}
}

// addExisting adds the data columns of an existing Delta table's schema.
func (c *columns) addExisting(st *delta.StructType) {
	for _, f := range st.Fields {
		if reserved(f.Name) {
			continue
		}
		if _, ok := c.idx[f.Name]; !ok {
			c.idx[f.Name] = len(c.cols)
			c.cols = append(c.cols, dataCol{name: f.Name, typ: f.Type})
		}
	}
}

// known reports whether mapping has rel's mapping already, so that it
// returns it without changing the columns.
func (c *columns) known(rel *store.Relation) bool {
	if c.last != nil && c.last.rel == rel {
		return true
	}
	m := c.rels[rel.Key]
	return m != nil && (m.rel == rel || m.rel.SameShape(rel))
}

// mapping returns the mapping of a schema version, adding columns as needed.
func (c *columns) mapping(rel *store.Relation) *relMapping {
	if c.last != nil && c.last.rel == rel {
		return c.last
	}
	if c.known(rel) {
		m := c.rels[rel.Key]
		m.rel = rel
		c.last = m
		return m
	}
	n := len(rel.Columns)
	m := &relMapping{rel: rel, dst: make([]int, n), conv: make([]typemap.Converter, n), check: make([]typemap.ReplacedCheck, n)}
	keyCols := rel.KeyColumns()
	for _, c := range []*adderColumns{&m.onAdder, &m.quietOnAdder} {
		c.conv, c.put = make([]typemap.Converter, n), make([]typemap.Putter, n)
	}
	for i, col := range rel.Columns {
		dt := c.tm.DeltaType(col)
		name := col.Name
		if reserved(name) {
			name += "__col"
		}
		if j, ok := c.idx[name]; ok && c.cols[j].typ.String() != dt.String() {
			alt := name + "__" + typemap.TypeSuffix(dt)
			if _, seen := c.idx[alt]; !seen {
				c.log.Warn("column type changed; new values go to a new column",
					"table", rel.TableName(), "column", name, "old_type", c.cols[j].typ.String(),
					"new_type", dt.String(), "new_column", alt)
			}
			name = alt
		}
		j, ok := c.idx[name]
		if !ok {
			j = len(c.cols)
			c.idx[name] = j
			c.cols = append(c.cols, dataCol{name: name, typ: dt})
		}
		m.dst[i] = j
		if m.check[i] = typemap.ReplacedCheckFor(dt); m.check[i] != nil {
			m.lossy = append(m.lossy, i)
		}
		m.conv[i] = typemap.ConverterFor(dt, rel.TableName()+"."+name, c.w)
		for _, ac := range []struct {
			cols *adderColumns
			w    typemap.Warner
		}{{&m.onAdder, c.w}, {&m.quietOnAdder, noWarnings{}}} {
			ac.cols.conv[i] = typemap.ConverterFor(dt, rel.TableName()+"."+name, ac.w)
			ac.cols.put[i] = typemap.PutterFor(dt, ac.cols.conv[i])
		}
		if slices.Contains(keyCols, i) {
			m.keyNames = append(m.keyNames, name)
		}
	}
	m.src = make([]int, len(c.cols))
	for i := range m.src {
		m.src[i] = -1
	}
	for i, j := range m.dst {
		m.src[j] = i
	}
	c.rels[rel.Key] = m
	c.last = m
	return m
}

// rowChange is a change whose values are converted into data column values
// (see columns.convert). It is converted once and given to both the
// changelog and the mirror, which read its rows and never change them.
type rowChange struct {
	op store.Op
	// newRow is the row after the change and oldRow the row before it;
	// each is nil when the change has none.
	newRow, oldRow []any
	// oldIsKey tells that oldRow holds only the key columns.
	oldIsKey bool
	// replaced names the data columns of the changelog's image of the
	// change (the old row of a delete, the new row otherwise) whose values
	// are stored other than PostgreSQL holds them.
	replaced []any
}

// convertChange converts the values of a change of schema version m.
func (c *columns) convertChange(m *relMapping, ch *store.Change) *rowChange {
	rc := &rowChange{op: ch.Op, newRow: c.convert(m, ch.New), oldRow: c.convert(m, ch.Old), oldIsKey: ch.OldIsKey}
	image := ch.New
	if ch.Op == store.OpDelete {
		image = ch.Old
	}
	rc.replaced = m.replacedIn(c.cols, image)
	return rc
}

// convert turns a queued row into data column values (nil for a nil row).
func (c *columns) convert(m *relMapping, vals []store.Value) []any {
	if vals == nil {
		return nil
	}
	out := make([]any, len(c.cols))
	for i := range vals {
		if i < len(m.dst) {
			out[m.dst[i]] = m.conv[i](&vals[i])
		}
	}
	return out
}

// fields returns the data columns as Delta fields (all nullable).
func (c *columns) fields() []*delta.StructField {
	out := make([]*delta.StructField, len(c.cols))
	for i, col := range c.cols {
		out[i] = delta.NewField(col.name, col.typ, true)
	}
	return out
}

// extend appends to st every data column it lacks, and reports whether it
// added any.
func extend(st *delta.StructType, cols []dataCol) bool {
	added := false
	for _, col := range cols {
		if f, _ := st.Field(col.name); f == nil {
			st.Fields = append(st.Fields, delta.NewField(col.name, col.typ, true))
			added = true
		}
	}
	return added
}

// positions returns, for each data column, its index in st (-1 if absent).
func positions(st *delta.StructType, cols []dataCol) []int {
	out := make([]int, len(cols))
	for i, col := range cols {
		_, out[i] = st.Field(col.name)
	}
	return out
}

// updatedMetadata returns md with a new schema, or an error.
func updatedMetadata(md *delta.Metadata, st *delta.StructType) (*delta.Metadata, error) {
	s, err := st.SchemaString()
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	out := *md
	out.SchemaString = s
	return &out, nil
}

// cloneStruct returns a copy of st that can be extended without changing st.
func cloneStruct(st *delta.StructType) *delta.StructType {
	out := &delta.StructType{Fields: make([]*delta.StructField, len(st.Fields))}
	for i, f := range st.Fields {
		g := *f
		if s, ok := f.Type.(*delta.StructType); ok {
			g.Type = cloneStruct(s)
		}
		out.Fields[i] = &g
	}
	return out
}
