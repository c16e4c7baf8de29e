package delta

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// Column mapping gives each column a physical name, the name of its column in
// the data files, and an id, both kept in the field's metadata, so that a
// column can be renamed or dropped by changing the schema alone and a column
// added later under a dropped one's name never reads the dropped one's data.
// These are the keys and values of the protocol.
const (
	// ColumnMappingModeKey is the table property that holds the mode:
	// ColumnMappingNone, ColumnMappingName or ColumnMappingID.
	ColumnMappingModeKey = "delta.columnMapping.mode"
	// ColumnMappingMaxIDKey is the table property that holds the largest
	// column id ever given out; it only grows.
	ColumnMappingMaxIDKey = "delta.columnMapping.maxColumnId"
	// ColumnMappingIDKey is the field metadata key of a column's id.
	ColumnMappingIDKey = types.ColumnMappingIDKey
	// ColumnMappingPhysicalNameKey is the field metadata key of a column's
	// physical name.
	ColumnMappingPhysicalNameKey = types.ColumnMappingPhysicalNameKey
	// ColumnMappingFeature is the name of the table feature of column
	// mapping, a reader and writer feature.
	ColumnMappingFeature = "columnMapping"
)

// The column mapping modes.
const (
	// ColumnMappingNone reads and writes columns by their display names.
	ColumnMappingNone = "none"
	// ColumnMappingName reads and writes columns by their physical names.
	ColumnMappingName = "name"
	// ColumnMappingID reads columns by their ids (Parquet field ids); this
	// package does not read tables in this mode.
	ColumnMappingID = "id"
)

// ColumnMappingMode returns the column mapping mode of a table: its
// delta.columnMapping.mode property, lower-cased, when its protocol supports
// column mapping (reader version 2, or 3 with the columnMapping feature),
// and ColumnMappingNone otherwise, as the protocol says to ignore the
// property then.
func ColumnMappingMode(p *Protocol, md *Metadata) string {
	if p == nil || md == nil || !supportsColumnMapping(p) {
		return ColumnMappingNone
	}
	if m := strings.ToLower(md.Configuration[ColumnMappingModeKey]); m != "" {
		return m
	}
	return ColumnMappingNone
}

// ColumnMappingMode returns the column mapping mode of the snapshot's table
// (see the function ColumnMappingMode).
func (s *Snapshot) ColumnMappingMode() string { return ColumnMappingMode(s.protocol, s.metadata) }

// supportsColumnMapping reports whether a protocol supports column mapping.
func supportsColumnMapping(p *Protocol) bool {
	switch {
	case p.MinReaderVersion == 2:
		return true
	case p.MinReaderVersion >= 3:
		return slices.Contains(p.ReaderFeatures, ColumnMappingFeature)
	}
	return false
}

// MaxColumnID returns the table's delta.columnMapping.maxColumnId, or 0 when
// it has none.
func (m *Metadata) MaxColumnID() int64 {
	n, err := strconv.ParseInt(m.Configuration[ColumnMappingMaxIDKey], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// AssignColumnIDs returns a copy of st in which every field without a column
// mapping id, nested ones too (fields of structs, also as array elements and
// map keys or values), has a new id above maxColumnID and above every id in
// st, and a physical name "col-<uuid>" unless it has one; fields with an id
// keep it and their physical name. It also returns the largest id of the
// copy, the table's new delta.columnMapping.maxColumnId. A new column of a
// table in name mode gets its id and physical name so, and its physical name
// is then the same in every later version whatever the column is called.
func AssignColumnIDs(st *StructType, maxColumnID int64) (*StructType, int64, error) {
	out := cloneStruct(st)
	maxID := max(maxColumnID, maxIDIn(out))
	var err error
	walkFields(out, func(f *StructField) {
		if err != nil || f.ColumnID() != 0 {
			return
		}
		if maxID >= math.MaxInt32 {
			err = fmt.Errorf("assign column ids: %w: ids past %d", ErrInvalidSchema, math.MaxInt32)
			return
		}
		maxID++
		md := maps.Clone(f.Metadata)
		if md == nil {
			md = map[string]any{}
		}
		md[ColumnMappingIDKey] = maxID
		if !f.HasPhysicalName() {
			id, uerr := newUUID()
			if uerr != nil {
				err = fmt.Errorf("assign column ids: %w", uerr)
				return
			}
			md[ColumnMappingPhysicalNameKey] = "col-" + id
		}
		f.Metadata = md
	})
	if err != nil {
		return nil, 0, err
	}
	return out, maxID, nil
}

// EnableColumnMapping returns the protocol and metaData actions that turn a
// table without column mapping into one in name mode; the caller commits
// both in one commit. Every field, nested ones too, keeps its name as its
// physical name, so the data files already written read as they are, and
// gets an id. The metaData sets delta.columnMapping.mode and maxColumnId.
// The protocol is the table's raised to reader 2 / writer 5; a table that
// uses writer features (writer version 7) gets the columnMapping feature
// instead, in readerFeatures too at reader version 3. It fails for a table
// whose mode is not none.
func EnableColumnMapping(p *Protocol, md *Metadata) (*Protocol, *Metadata, error) {
	if m := ColumnMappingMode(p, md); m != ColumnMappingNone {
		return nil, nil, fmt.Errorf("enable column mapping: %w: mode is %q already", ErrInvalidSchema, m)
	}
	st := &StructType{}
	if md.SchemaString != "" {
		var err error
		if st, err = md.Schema(); err != nil {
			return nil, nil, fmt.Errorf("enable column mapping: %w", err)
		}
	}
	st = withoutColumnMapping(st)
	walkFields(st, func(f *StructField) {
		if f.Metadata == nil {
			f.Metadata = map[string]any{}
		}
		f.Metadata[ColumnMappingPhysicalNameKey] = f.Name
	})
	st, maxID, err := AssignColumnIDs(st, md.MaxColumnID())
	if err != nil {
		return nil, nil, fmt.Errorf("enable column mapping: %w", err)
	}
	proto, err := columnMappingProtocol(p)
	if err != nil {
		return nil, nil, fmt.Errorf("enable column mapping: %w", err)
	}
	ss, err := st.SchemaString()
	if err != nil {
		return nil, nil, fmt.Errorf("enable column mapping: %w", err)
	}
	out := *md
	out.SchemaString = ss
	out.Configuration = maps.Clone(md.Configuration)
	if out.Configuration == nil {
		out.Configuration = map[string]string{}
	}
	out.Configuration[ColumnMappingModeKey] = ColumnMappingName
	out.Configuration[ColumnMappingMaxIDKey] = strconv.FormatInt(maxID, 10)
	return proto, &out, nil
}

// columnMappingProtocol returns p raised to support column mapping.
func columnMappingProtocol(p *Protocol) (*Protocol, error) {
	out := &Protocol{MinReaderVersion: p.MinReaderVersion, MinWriterVersion: p.MinWriterVersion,
		ReaderFeatures: slices.Clone(p.ReaderFeatures), WriterFeatures: slices.Clone(p.WriterFeatures)}
	switch {
	case out.MinWriterVersion >= 7:
		if !slices.Contains(out.WriterFeatures, ColumnMappingFeature) {
			out.WriterFeatures = append(out.WriterFeatures, ColumnMappingFeature)
		}
		if out.MinReaderVersion >= 3 {
			if !slices.Contains(out.ReaderFeatures, ColumnMappingFeature) {
				out.ReaderFeatures = append(out.ReaderFeatures, ColumnMappingFeature)
			}
		} else {
			// Reader version 2 is column mapping; writer features
			// go with any reader version below 3.
			out.MinReaderVersion = 2
		}
	case out.MinReaderVersion >= 3:
		return nil, fmt.Errorf("%w: protocol %d/%d has reader features without writer features",
			ErrCorruptLog, out.MinReaderVersion, out.MinWriterVersion)
	default:
		out.MinReaderVersion = max(out.MinReaderVersion, 2)
		out.MinWriterVersion = max(out.MinWriterVersion, 5)
	}
	return out, nil
}

// WithSchema returns a copy of m whose schema is st. When m's configuration
// sets column mapping mode name, every field of st must have an id and a
// physical name (give new fields theirs with AssignColumnIDs), no two fields
// the same id and no two fields of one struct the same physical name, and
// the copy's delta.columnMapping.maxColumnId is raised to st's largest id.
// The partition columns must be fields of st.
func (m *Metadata) WithSchema(st *StructType) (*Metadata, error) {
	for _, pc := range m.PartitionColumns {
		if f, _ := st.Field(pc); f == nil {
			return nil, fmt.Errorf("metadata with schema: %w: partition column %q not in schema", ErrInvalidSchema, pc)
		}
	}
	out := *m
	if strings.EqualFold(m.Configuration[ColumnMappingModeKey], ColumnMappingName) {
		if err := checkColumnMapping(st); err != nil {
			return nil, fmt.Errorf("metadata with schema: %w", err)
		}
		if n := maxIDIn(st); n > m.MaxColumnID() {
			out.Configuration = maps.Clone(m.Configuration)
			out.Configuration[ColumnMappingMaxIDKey] = strconv.FormatInt(n, 10)
		}
	}
	ss, err := st.SchemaString()
	if err != nil {
		return nil, fmt.Errorf("metadata with schema: %w", err)
	}
	out.SchemaString = ss
	return &out, nil
}

// checkColumnMapping checks that every field of st has an id and a physical
// name, that ids are unique in st and physical names within each struct.
func checkColumnMapping(st *StructType) error {
	ids := map[int64]string{}
	var check func(st *StructType) error
	check = func(st *StructType) error {
		names := map[string]bool{}
		for _, f := range st.Fields {
			id := f.ColumnID()
			if id <= 0 || !f.HasPhysicalName() {
				return fmt.Errorf("%w: field %q has no column mapping id or physical name", ErrInvalidSchema, f.Name)
			}
			if other, ok := ids[id]; ok {
				return fmt.Errorf("%w: fields %q and %q have column id %d", ErrInvalidSchema, other, f.Name, id)
			}
			ids[id] = f.Name
			if names[f.PhysicalName()] {
				return fmt.Errorf("%w: two fields have the physical name %q", ErrInvalidSchema, f.PhysicalName())
			}
			names[f.PhysicalName()] = true
			for _, sub := range nestedStructs(f.Type) {
				if err := check(sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return check(st)
}

// maxIDIn returns the largest column id in st, or 0.
func maxIDIn(st *StructType) int64 {
	var n int64
	walkFields(st, func(f *StructField) { n = max(n, f.ColumnID()) })
	return n
}

// hasColumnMapping reports whether a field of st carries column mapping
// metadata.
func hasColumnMapping(st *StructType) bool {
	found := false
	walkFields(st, func(f *StructField) {
		if _, ok := f.Metadata[ColumnMappingIDKey]; ok {
			found = true
		}
		if _, ok := f.Metadata[ColumnMappingPhysicalNameKey]; ok {
			found = true
		}
	})
	return found
}

// withoutColumnMapping returns a copy of st without column mapping metadata,
// which a table whose mode is none reads and writes by display names.
func withoutColumnMapping(st *StructType) *StructType {
	out := cloneStruct(st)
	walkFields(out, func(f *StructField) {
		if f.Metadata == nil {
			return
		}
		f.Metadata = maps.Clone(f.Metadata)
		delete(f.Metadata, ColumnMappingIDKey)
		delete(f.Metadata, ColumnMappingPhysicalNameKey)
	})
	return out
}

// walkFields calls fn for every field of st, parents before their nested
// fields, in schema order.
func walkFields(st *StructType, fn func(*StructField)) {
	for _, f := range st.Fields {
		fn(f)
		for _, sub := range nestedStructs(f.Type) {
			walkFields(sub, fn)
		}
	}
}

// nestedStructs returns the structs directly inside a type: itself, an
// array's element, a map's key and value, through arrays and maps of them.
func nestedStructs(dt DataType) []*StructType {
	switch t := dt.(type) {
	case *StructType:
		return []*StructType{t}
	case *ArrayType:
		return nestedStructs(t.ElementType)
	case *MapType:
		return append(nestedStructs(t.KeyType), nestedStructs(t.ValueType)...)
	}
	return nil
}

// cloneStruct returns a deep copy of st: its fields, their metadata maps and
// nested types are new, so the copy can be changed without changing st.
func cloneStruct(st *StructType) *StructType {
	out := &StructType{Fields: make([]*StructField, len(st.Fields))}
	for i, f := range st.Fields {
		g := *f
		g.Metadata = maps.Clone(f.Metadata)
		g.Type = cloneType(f.Type)
		out.Fields[i] = &g
	}
	return out
}

func cloneType(dt DataType) DataType {
	switch t := dt.(type) {
	case *StructType:
		return cloneStruct(t)
	case *ArrayType:
		return &ArrayType{ElementType: cloneType(t.ElementType), ContainsNull: t.ContainsNull}
	case *MapType:
		return &MapType{KeyType: cloneType(t.KeyType), ValueType: cloneType(t.ValueType), ValueContainsNull: t.ValueContainsNull}
	}
	return dt
}

// ColumnMappingProtocol returns p raised to support column mapping.
func ColumnMappingProtocol(p *Protocol) (*Protocol, error) { return columnMappingProtocol(p) }
