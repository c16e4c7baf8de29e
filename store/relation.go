package store

import "slices"

// RelationKey identifies one version of a table's schema in the schema
// history: the table's OID and the LSN at which that version was first seen.
type RelationKey struct {
	OID uint32
	LSN LSN
}

// Relation is one version of a source table's schema, as PostgreSQL's
// Relation message describes it.
type Relation struct {
	Key             RelationKey
	Schema          string
	Name            string
	ReplicaIdentity byte
	Columns         []Column
}

// Column is one column of a Relation.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	Key     bool
}

// SameShape reports whether two relations describe the same table layout,
// ignoring the key that says when each was seen.
func (r *Relation) SameShape(o *Relation) bool {
	return r.Key.OID == o.Key.OID && r.Schema == o.Schema && r.Name == o.Name &&
		r.ReplicaIdentity == o.ReplicaIdentity && slices.Equal(r.Columns, o.Columns)
}

// QualifiedName returns "schema.name".
func (r *Relation) QualifiedName() string { return r.Schema + "." + r.Name }
