package types

import (
	"encoding/json"
	"math"
)

// The metadata keys of a field under column mapping: the name of its column
// in the data files and its id, which stay as the field is renamed.
const (
	ColumnMappingIDKey           = "delta.columnMapping.id"
	ColumnMappingPhysicalNameKey = "delta.columnMapping.physicalName"
)

// PhysicalName returns the name the field's column has in the data files:
// its delta.columnMapping.physicalName metadata, else its Name.
func (f *StructField) PhysicalName() string {
	if p, ok := f.Metadata[ColumnMappingPhysicalNameKey].(string); ok && p != "" {
		return p
	}
	return f.Name
}

// HasPhysicalName reports whether the field carries a physical name of its
// own; readers resolve such a field by that name exactly.
func (f *StructField) HasPhysicalName() bool {
	p, ok := f.Metadata[ColumnMappingPhysicalNameKey].(string)
	return ok && p != ""
}

// ColumnID returns the field's delta.columnMapping.id metadata, or 0 when it
// has none (or one that is not a whole number).
func (f *StructField) ColumnID() int64 {
	switch v := f.Metadata[ColumnMappingIDKey].(type) {
	case float64: // as encoding/json decodes every number
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v)
		}
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
	case int:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	}
	return 0
}
