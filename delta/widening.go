package delta

import (
	"maps"
	"slices"
)

// Type widening ("Type Widening" in the protocol) lets a column's type
// become wider without rewriting the files written before: readers read
// their values as the wider type.
const (
	// TypeWideningFeature is the reader-writer table feature.
	TypeWideningFeature = "typeWidening"
	// EnableTypeWideningKey is the property that lets writers widen types.
	EnableTypeWideningKey = "delta.enableTypeWidening"
	// TypeChangesKey is the field metadata that records a field's type
	// changes, oldest first.
	TypeChangesKey = "delta.typeChanges"
)

// CanWiden reports whether a column of type from may become of type to by
// type widening, among the changes PostgreSQL migrations make (smallint,
// integer and bigint each to a wider one, real to double precision, and a
// numeric to one of more digits on both sides of the point): byte, short
// and integer to a wider integer; float to double; decimal(p, s) to
// decimal(p+k1, s+k2) with k1 >= k2 >= 0.
func CanWiden(from, to DataType) bool {
	rank := map[DataType]int{TypeByte: 1, TypeShort: 2, TypeInteger: 3, TypeLong: 4}
	if rf, ok := rank[from]; ok {
		rt, ok := rank[to]
		return ok && rt > rf
	}
	if from == TypeFloat {
		return to == TypeDouble
	}
	fd, ok := from.(DecimalType)
	td, ok2 := to.(DecimalType)
	if ok && ok2 {
		k1, k2 := td.Precision-fd.Precision, td.Scale-fd.Scale
		return k2 >= 0 && k1 >= k2 && (k1 > 0 || k2 > 0)
	}
	return false
}

// SupportsTypeWidening reports whether a protocol lets a table widen types:
// reader 3 and writer 7 with the typeWidening feature in both lists.
func SupportsTypeWidening(p *Protocol) bool {
	return p.MinReaderVersion >= 3 && p.MinWriterVersion >= 7 &&
		slices.Contains(p.ReaderFeatures, TypeWideningFeature) && slices.Contains(p.WriterFeatures, TypeWideningFeature)
}

// TypeWideningProtocol returns p raised to support type widening, as
// DeletionVectorsProtocol does for deletion vectors, or p itself when it
// does already.
func TypeWideningProtocol(p *Protocol) (*Protocol, error) {
	if SupportsTypeWidening(p) {
		return p, nil
	}
	return featureProtocol(p, TypeWideningFeature)
}

// WidenField returns a copy of f of type to, with the change recorded in
// its delta.typeChanges metadata after the ones before it. The caller
// checks CanWiden; the field keeps its id and physical name.
func WidenField(f *StructField, to DataType) *StructField {
	out := *f
	out.Metadata = maps.Clone(f.Metadata)
	if out.Metadata == nil {
		out.Metadata = map[string]any{}
	}
	var changes []any
	if prev, ok := out.Metadata[TypeChangesKey].([]any); ok {
		changes = slices.Clone(prev)
	}
	changes = append(changes, map[string]any{"fromType": f.Type.String(), "toType": to.String()})
	out.Metadata[TypeChangesKey] = changes
	out.Type = to
	return &out
}
