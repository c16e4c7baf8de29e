package store

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// RelationKey identifies one version of a table's schema in the schema
// history: the table's OID and the LSN at which that version was first seen.
type RelationKey struct {
	OID uint32
	LSN LSN
}

// Relation is one version of a source table's schema, as PostgreSQL's
// Relation message describes it.
type Relation struct {
	Key RelationKey
	// Schema and Name are the table's names as PostgreSQL sent them.
	Schema string
	Name   string
	// Table is the configured table the relation is captured as,
	// "schema.table", found by the table's OID: capture's Delta tables
	// and the live view go by it, never by the names PostgreSQL sends,
	// which a rename changes. Empty in schema versions recorded before it
	// was kept.
	Table           string
	ReplicaIdentity byte
	Columns         []Column
	// FileNode is the table's pg_class.relfilenode when the version was
	// recorded (for a partitioned table, a digest of its partitions'): a
	// rewrite of the table (a type change with USING, a column added with
	// a volatile default) changes it, and PostgreSQL sends no change for
	// the rows it rewrote. Zero when unknown.
	FileNode uint32
	// ColumnsStamp is a digest of the transaction ids that last wrote the
	// table's pg_attribute rows when the version was recorded: a change to
	// any column changes it, one that keeps the column's name and type (a
	// USING clause) too. A new file node with the same stamp is a rewrite
	// that changed no value (VACUUM FULL, CLUSTER, TRUNCATE). Zero when
	// unknown. SameShape does not compare it, nor FileNode.
	ColumnsStamp int64
	// KeyStamp is the same digest over the columns of the replica
	// identity (every column under REPLICA IDENTITY FULL): a rewrite that
	// changes it may have changed the keys of rows. Zero when unknown; not
	// compared by SameShape.
	KeyStamp int64
}

// Column is one column of a Relation.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	// Key is set for a column of the replica identity (every column
	// under REPLICA IDENTITY FULL), as PostgreSQL flags it.
	Key bool
	// PrimaryKey is set for a column of the table's primary key.
	PrimaryKey bool
	// Dims is the number of dimensions an array column is declared with
	// (int[][] has 2); 0 or 1 for one, and for a column not an array.
	Dims int
	// AttNum is the column's number in the catalog (pg_attribute.attnum),
	// which a rename and a type change keep and a drop never gives to
	// another column: the column's identity within its table. Zero when
	// unknown (schema versions recorded before it was kept).
	AttNum int
	// HasMissing tells that rows stored before the column was added read
	// Missing, the text of the constant default it was added with
	// (pg_attribute.attmissingval); PostgreSQL wrote no change for them.
	HasMissing bool
	Missing    string
}

// KeyColumns returns the positions of the columns that identify a row:
// the primary key under REPLICA IDENTITY FULL (whose old rows hold it), and
// otherwise the replica identity's columns. Under FULL without a primary
// key it is every column, and rows are a multiset (see Multiset).
func (r *Relation) KeyColumns() []int {
	var out []int
	byPK := r.keyedByPrimaryKey()
	for i := range r.Columns {
		if r.isKey(i, byPK) {
			out = append(out, i)
		}
	}
	return out
}

// keyedByPrimaryKey reports whether rows are identified by the primary key
// rather than by the replica identity's columns: under REPLICA IDENTITY
// FULL with a primary key.
func (r *Relation) keyedByPrimaryKey() bool {
	return r.ReplicaIdentity == 'f' && slices.ContainsFunc(r.Columns, func(c Column) bool { return c.PrimaryKey })
}

// isKey reports whether column i identifies rows (see KeyColumns).
func (r *Relation) isKey(i int, byPK bool) bool {
	if byPK {
		return r.Columns[i].PrimaryKey
	}
	return r.Columns[i].Key
}

// KeyOf calls fn with the position of each column that identifies a row,
// in order (see KeyColumns), allocating nothing.
func (r *Relation) KeyOf(fn func(i int)) {
	byPK := r.keyedByPrimaryKey()
	for i := range r.Columns {
		if r.isKey(i, byPK) {
			fn(i)
		}
	}
}

// Multiset reports whether the table's rows are not identified by a key:
// REPLICA IDENTITY FULL without a primary key, or no replica identity.
// Equal rows are then as many copies.
func (r *Relation) Multiset() bool {
	if r.ReplicaIdentity == 'f' {
		return !slices.ContainsFunc(r.Columns, func(c Column) bool { return c.PrimaryKey })
	}
	return !slices.ContainsFunc(r.Columns, func(c Column) bool { return c.Key })
}

// SameShape reports whether two relations describe the same table layout,
// ignoring the key that says when each was seen.
func (r *Relation) SameShape(o *Relation) bool {
	return r.Key.OID == o.Key.OID && r.Schema == o.Schema && r.Name == o.Name && r.Table == o.Table &&
		r.ReplicaIdentity == o.ReplicaIdentity && slices.Equal(r.Columns, o.Columns)
}

// SameShapeButMissing reports whether o has r's shape but, perhaps, for
// the text of its columns' missing values (Column.Missing). PostgreSQL
// prints that text from the catalog each time it is read: an enum label
// renamed (ALTER TYPE … RENAME VALUE) changes it with no change to the
// table, and no Relation message tells the stream.
func (r *Relation) SameShapeButMissing(o *Relation) bool {
	if r.Key.OID != o.Key.OID || r.Schema != o.Schema || r.Name != o.Name || r.Table != o.Table ||
		r.ReplicaIdentity != o.ReplicaIdentity || len(r.Columns) != len(o.Columns) {
		return false
	}
	for i, c := range r.Columns {
		d := o.Columns[i]
		c.Missing, d.Missing = "", ""
		if c != d {
			return false
		}
	}
	return true
}

// QualifiedName returns "schema.name" as PostgreSQL sent them.
func (r *Relation) QualifiedName() string { return r.Schema + "." + r.Name }

// TableName returns the name the table is captured as: Table, or, in a
// schema version recorded before Table was kept, QualifiedName.
func (r *Relation) TableName() string {
	if r.Table != "" {
		return r.Table
	}
	return r.QualifiedName()
}

// DirName returns the name of the directory of the table's Delta mirror;
// its changelog's is DirName() + ChangelogSuffix. See TableDirName.
func (r *Relation) DirName() string {
	if dir, ok := CapturedDirName(r.Table); ok {
		return dir
	}
	return TableDirName(r.Schema, r.Name)
}

// CapturedDirName returns the name of the directory of the Delta mirror
// of the table captured as table ("schema.table", as Relation.Table); ok
// is false when table has no schema.
func CapturedDirName(table string) (dir string, ok bool) {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		return "", false
	}
	return TableDirName(schema, name), true
}

// ChangelogSuffix ends the directory name of a table's changelog.
const ChangelogSuffix = "_changes"

// maxDirName bounds a directory name well below the 255 bytes file
// systems allow, with room for ChangelogSuffix.
const maxDirName = 200

// TableDirName returns the directory name of a table's Delta mirror,
// "schema.table", whatever the names hold: every byte that is not an
// ASCII letter, digit or "_", or part of a UTF-8 sequence, is escaped as
// %XX (so "/", "." and ".." never reach the file system, and the one "."
// separates schema from table); so are a leading "_" of the schema (a
// hidden directory to Hadoop-style listers) and the "_" of a table name's
// trailing "_changes" (so that no mirror is named like another table's
// changelog). Different tables get different names; a name longer than
// maxDirName bytes is cut and ends in "~" and a hash of both names.
func TableDirName(schema, name string) string {
	dir := escapeDirPart(schema, true) + "." + escapeDirPart(name, false)
	if strings.HasSuffix(dir, ChangelogSuffix) {
		dir = strings.TrimSuffix(dir, ChangelogSuffix) + "%5F" + ChangelogSuffix[1:]
	}
	if len(dir) <= maxDirName {
		return dir
	}
	sum := sha256.Sum256([]byte(schema + "\x00" + name))
	cut := maxDirName - 17
	for cut > 0 && (dir[cut-1] == '%' || cut > 1 && dir[cut-2] == '%') {
		cut-- // not inside an escape
	}
	return dir[:cut] + "~" + hex.EncodeToString(sum[:8])
}

// escapeDirPart escapes one part of a directory name (see TableDirName).
func escapeDirPart(s string, leading bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		keep := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80 ||
			c == '_' && !(leading && i == 0)
		if keep {
			b.WriteByte(c)
			continue
		}
		const hexDigits = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}
