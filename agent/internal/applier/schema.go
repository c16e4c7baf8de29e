package applier

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

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

// reserved reports whether a column name is one the applier adds, as it
// names them: what a Delta table's schema holds besides the data columns.
// (A source column of such a name is renamed: see clashes.)
func reserved(name string) bool {
	switch name {
	case colOp, colLSN, colXid, colCommitTS, colSeq, colBefore, colUnchanged, colReplaced, colCommitDate, colDeleted:
		return true
	}
	return false
}

// Field metadata the applier writes on each data column of its Delta
// tables besides column mapping's (delta.ColumnMappingPhysicalNameKey,
// delta.ColumnMappingIDKey): the PostgreSQL column it holds, its table's
// OID and its attnum (store.Column.AttNum).
const (
	metaOID    = "lakeside.oid"
	metaAttNum = "lakeside.attnum"
)

// dataCol is one column of a source table as the Delta tables store it.
type dataCol struct {
	// name is the column's name now, and typ its Delta type now.
	name string
	typ  delta.DataType
	// physical is the name of the column in data files, which never
	// changes (column mapping).
	physical string
	// oid and attnum are the PostgreSQL column it holds (zero: not known,
	// matched by name).
	oid    uint32
	attnum int
	// live tells that the column is in the schema version the columns
	// follow, and so in the Delta tables' schemas; a column dropped since
	// stays known (older versions' changes still name it) but is not
	// written.
	live bool
	// added is the source column when it was added with a constant
	// default, which the rows stored before it read (store.Column.Missing).
	added *store.Column
}

// columns is the list of data columns of a source table shared by its two
// Delta tables. The tables' schemas follow one schema version, the newest
// of the flush (evolve): its columns, in its order, under its names and
// types. A column is known by its identity, its table's OID and attnum, so
// a rename or a type change keeps it (under its physical name), and a
// column dropped and added again under its name is another column. Changes
// of any schema version are mapped by that identity (mapping).
type columns struct {
	cols []dataCol
	// order holds the live columns, by index in cols, in the order of
	// the schema version they follow (follows).
	order   []int
	follows store.RelationKey
	// epoch counts the changes of the live columns' names, types, order
	// or set; the Delta tables lay out their schemas again when it moves.
	epoch uint64
	tm    *typemap.Map
	log   *slog.Logger
	w     typemap.Warner
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
	// keys are the data columns that identify a row
	// (store.Relation.KeyColumns).
	keys []int
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
	// fill holds, for a version older than a column added with a
	// default in this flush, that default for its data column: a row of
	// the version existed when the column was added, so PostgreSQL holds
	// it with the default, wherever it is in the flush.
	fill map[int]any
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
	return &columns{tm: tm, log: log, w: w, rels: map[store.RelationKey]*relMapping{}}
}

// metaInt returns an integer of a field's metadata (decoded JSON), or 0.
func metaInt(f *delta.StructField, key string) int64 {
	switch x := f.Metadata[key].(type) {
	case float64:
		return int64(x)
	case int64:
		return x
	case int:
		return int64(x)
	case json.Number:
		n, _ := x.Int64()
		return n
	}
	return 0
}

// byPhysical returns the index of the data column stored as physical, or -1.
func (c *columns) byPhysical(physical string) int {
	for i := range c.cols {
		if c.cols[i].physical == physical {
			return i
		}
	}
	return -1
}

// addExisting adds the data columns of an existing Delta table's schema,
// live, in its order.
func (c *columns) addExisting(st *delta.StructType) {
	for _, f := range st.Fields {
		if reserved(f.Name) {
			continue
		}
		phys := f.PhysicalName()
		if c.byPhysical(phys) >= 0 {
			continue
		}
		c.order = append(c.order, len(c.cols))
		c.cols = append(c.cols, dataCol{name: f.Name, typ: f.Type, physical: phys, live: true,
			oid: uint32(metaInt(f, metaOID)), attnum: int(metaInt(f, metaAttNum))})
		c.epoch++
	}
}

// findByIdentity returns the data column of the same table OID and
// attnum as column col of schema version rel, or -1.
func (c *columns) findByIdentity(rel *store.Relation, col store.Column) int {
	if col.AttNum > 0 {
		for i := range c.cols {
			if c.cols[i].attnum == col.AttNum && c.cols[i].oid == rel.Key.OID {
				return i
			}
		}
	}
	return -1
}

// find returns the data column that holds column col of schema version
// rel, or -1: the one of the same table OID and attnum; else a live one of
// the same name whose identity is not known or is of another OID (a
// version recorded before attnums were, or a table dropped and created
// again, whose columns continue by name). With adopt, a column found by
// name takes col's identity.
func (c *columns) find(rel *store.Relation, col store.Column, name string, adopt bool) int {
	if i := c.findByIdentity(rel, col); i >= 0 {
		return i
	}
	for _, i := range c.order {
		d := &c.cols[i]
		if d.name == name && (d.attnum == 0 || col.AttNum == 0 || d.oid != rel.Key.OID) {
			if adopt && col.AttNum > 0 {
				d.oid, d.attnum = rel.Key.OID, col.AttNum
			}
			return i
		}
	}
	return -1
}

// Names of the columns that readers of the change data feed add to a
// mirror's rows (Spark's table_changes, delta-rs's load_cdf).
const (
	cdfChangeType      = "_change_type"
	cdfCommitVersion   = "_commit_version"
	cdfCommitTimestamp = "_commit_timestamp"
)

// Data column names. A source column is named as in PostgreSQL, except
// where that would give a Delta schema two columns Spark takes for one
// (Delta column names are case-insensitive) or a column a reader adds:
//
//   - a name that is, case aside, one of the applier's own columns
//     (reserved) or one that change data feed readers add (_change_type,
//     _commit_version, _commit_timestamp) gets "__col" appended;
//   - a name that is then, case aside, another column's gets "__col",
//     then "__col2", "__col3" … appended, whichever is free first, the
//     columns taken in their order in the table.
//
// A column keeps the name its Delta tables gave it as long as that name is
// still one of these for its PostgreSQL name and free: the Delta schema
// records it, so it holds across restarts and schema versions, and a
// column dropped or renamed does not rename another.

// clashes reports whether a source column name, case aside, is one of the
// applier's columns or of the columns change data feed readers add.
func clashes(name string) bool {
	switch strings.ToLower(name) {
	case colOp, colLSN, colXid, colCommitTS, colSeq, colBefore, colUnchanged, colReplaced, colCommitDate, colDeleted,
		cdfChangeType, cdfCommitVersion, cdfCommitTimestamp:
		return true
	}
	return false
}

// baseName is a source column's data column name before other columns
// are considered.
func baseName(col store.Column) string {
	if clashes(col.Name) {
		return col.Name + "__col"
	}
	return col.Name
}

// nameForms reports whether name is base, or base with "__col" or
// "__colN" appended (N from 2): a name the rules give a column of base.
func nameForms(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base)
	if !ok {
		return false
	}
	if rest == "" || rest == "__col" {
		return true
	}
	n, ok := strings.CutPrefix(rest, "__col")
	if !ok || n == "" || n[0] == '0' {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return n != "1"
}

// names returns the data column name of each column of schema version rel
// (see the rules above).
func (c *columns) names(rel *store.Relation) []string {
	out := make([]string, len(rel.Columns))
	taken := make(map[string]bool, len(rel.Columns))
	// First the columns whose data column keeps its name.
	for i, col := range rel.Columns {
		if j := c.findByIdentity(rel, col); j >= 0 {
			n := c.cols[j].name
			if f := strings.ToLower(n); nameForms(n, baseName(col)) && !taken[f] && !clashes(n) {
				out[i], taken[f] = n, true
			}
		}
	}
	for i, col := range rel.Columns {
		if out[i] != "" {
			continue
		}
		base := baseName(col)
		n := base
		for k := 1; taken[strings.ToLower(n)]; k++ {
			n = base + "__col"
			if k > 1 {
				n += strconv.Itoa(k)
			}
		}
		out[i], taken[strings.ToLower(n)] = n, true
	}
	return out
}

// newPhysicalName returns a physical name for a new column: "col-" and a
// random UUID, as Delta writers name them.
func newPhysicalName() string {
	var b [16]byte
	// Read never returns an error: it crashes the program instead, which
	// no error handling here could avoid.
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("col-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// evolve makes the live columns those of schema version target, in its
// order, under its names and types, and reports whether anything changed.
// A new column gets a new physical name; one dropped since stays, not live.
func (c *columns) evolve(target *store.Relation) bool {
	changed := false
	live := make(map[int]bool, len(target.Columns))
	order := make([]int, 0, len(target.Columns))
	names := c.names(target)
	for k, col := range target.Columns {
		name, dt := names[k], c.tm.DeltaType(col)
		i := c.find(target, col, name, true)
		if i < 0 {
			i = len(c.cols)
			d := dataCol{name: name, typ: dt, physical: newPhysicalName(), oid: target.Key.OID, attnum: col.AttNum}
			if col.HasMissing {
				added := col
				d.added = &added
			}
			c.cols = append(c.cols, d)
			changed = true
		}
		d := &c.cols[i]
		if d.name != name {
			c.log.Info("column renamed", "table", target.TableName(), "column", d.name, "new_name", name)
			d.name, changed = name, true
		}
		if d.typ.String() != dt.String() {
			c.log.Info("column type changed", "table", target.TableName(), "column", name,
				"old_type", d.typ.String(), "new_type", dt.String())
			d.typ, changed = dt, true
		}
		live[i] = true
		order = append(order, i)
	}
	for i := range c.cols {
		if c.cols[i].live && !live[i] {
			c.log.Info("column dropped", "table", target.TableName(), "column", c.cols[i].name)
			changed = true
		}
		c.cols[i].live = live[i]
	}
	if !slices.Equal(order, c.order) {
		changed = true
	}
	c.order, c.follows = order, target.Key
	if changed {
		c.epoch++
		c.rels, c.last = map[store.RelationKey]*relMapping{}, nil
	}
	return changed
}

// keyOf returns the data columns that identify a row of schema version rel
// (store.Relation.KeyColumns), or nil when rel's rows are a multiset.
func (c *columns) keyOf(rel *store.Relation) []int {
	if rel.Multiset() {
		return nil
	}
	return c.keyNamed(rel, c.names(rel))
}

// keyNamed is keyOf for a version whose columns' data column names are
// names (columns.names), for a caller that has them.
func (c *columns) keyNamed(rel *store.Relation, names []string) []int {
	if rel.Multiset() {
		return nil
	}
	var out []int
	for _, i := range rel.KeyColumns() {
		if j := c.find(rel, rel.Columns[i], names[i], false); j >= 0 {
			out = append(out, j)
		}
	}
	return out
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

// mapping returns the mapping of a schema version. A column of the
// version that the live columns do not hold (dropped since) gets a data
// column that is not live, whose values are not written.
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
	for _, c := range []*adderColumns{&m.onAdder, &m.quietOnAdder} {
		c.conv, c.put = make([]typemap.Converter, n), make([]typemap.Putter, n)
	}
	names := c.names(rel)
	for i, col := range rel.Columns {
		name := names[i]
		j := c.find(rel, col, name, false)
		if j < 0 {
			j = len(c.cols)
			c.cols = append(c.cols, dataCol{name: name, typ: c.tm.DeltaType(col), physical: newPhysicalName(),
				oid: rel.Key.OID, attnum: col.AttNum})
		}
		m.dst[i] = j
		// Values convert to the column's type now, whatever their
		// version's type was.
		dt := c.cols[j].typ
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
	}
	m.keys = c.keyNamed(rel, names)
	m.src = make([]int, len(c.cols))
	for i := range m.src {
		m.src[i] = -1
	}
	for i, j := range m.dst {
		m.src[j] = i
	}
	for j := range c.cols {
		if d := &c.cols[j]; d.live && d.added != nil && m.src[j] < 0 {
			v, err := c.tm.Decoder(*d.added).Value([]byte(d.added.Missing))
			if err != nil {
				c.log.Warn("default of an added column not readable; rows of an older version keep it null",
					"table", rel.TableName(), "column", d.name, "err", err)
				continue
			}
			if m.fill == nil {
				m.fill = map[int]any{}
			}
			m.fill[j] = typemap.ConverterFor(d.typ, rel.TableName()+"."+d.name, noWarnings{})(&v)
		}
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
	replaced *replaced
	// mirrorRow is the row the mirror takes: newRow, with the defaults of
	// columns added after its version filled in (relMapping.fill).
	mirrorRow []any
}

// convertChange converts the values of a change of schema version m.
func (c *columns) convertChange(m *relMapping, ch *store.Change) *rowChange {
	rc := &rowChange{op: ch.Op, newRow: c.convert(m, ch.New), oldRow: c.convert(m, ch.Old), oldIsKey: ch.OldIsKey}
	image := ch.New
	if ch.Op == store.OpDelete {
		image = ch.Old
	}
	rc.replaced = m.replacedIn(c.cols, image)
	rc.mirrorRow = rc.newRow
	if len(m.fill) > 0 && rc.newRow != nil {
		rc.mirrorRow = slices.Clone(rc.newRow)
		for j, v := range m.fill {
			rc.mirrorRow[j] = v
		}
	}
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

// fields returns the live data columns as Delta fields (all nullable), in
// order, each with its physical name and the PostgreSQL column it holds.
func (c *columns) fields() []*delta.StructField {
	out := make([]*delta.StructField, 0, len(c.order))
	for _, i := range c.order {
		col := &c.cols[i]
		f := delta.NewField(col.name, col.typ, true)
		f.Metadata = map[string]any{delta.ColumnMappingPhysicalNameKey: col.physical}
		if col.attnum > 0 {
			f.Metadata[metaOID], f.Metadata[metaAttNum] = int64(col.oid), int64(col.attnum)
		}
		out = append(out, f)
	}
	return out
}

// positions returns, for each data column, the index of its field in st
// (-1 if absent, or not live).
func positions(st *delta.StructType, cols []dataCol) []int {
	idx := make(map[string]int, len(st.Fields))
	for i, f := range st.Fields {
		idx[f.PhysicalName()] = i
	}
	out := make([]int, len(cols))
	for i := range cols {
		out[i] = -1
		if j, ok := idx[cols[i].physical]; ok && cols[i].live {
			out[i] = j
		}
	}
	return out
}

// keepColumnIDs gives each field of st, nested ones too, the column
// mapping physical name and id of the field of prev it is: the one of the
// same physical name, or for a field without one (the applier's own
// columns), of the same name. Fields new to the table are given theirs by
// delta.AssignColumnIDs.
func keepColumnIDs(st, prev *delta.StructType) {
	if prev == nil {
		return
	}
	for _, f := range st.Fields {
		var before *delta.StructField
		for _, p := range prev.Fields {
			if f.HasPhysicalName() && p.PhysicalName() == f.PhysicalName() || !f.HasPhysicalName() && p.Name == f.Name {
				before = p
				break
			}
		}
		if before == nil {
			continue
		}
		if f.Metadata == nil {
			f.Metadata = map[string]any{}
		}
		f.Metadata[delta.ColumnMappingPhysicalNameKey] = before.PhysicalName()
		if id := before.ColumnID(); id > 0 {
			f.Metadata[delta.ColumnMappingIDKey] = id
		}
		if sub, ok := f.Type.(*delta.StructType); ok {
			prevSub, _ := before.Type.(*delta.StructType)
			keepColumnIDs(sub, prevSub)
		}
	}
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
