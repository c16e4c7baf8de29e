package types

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DataType is a Delta (Spark SQL) data type: a PrimitiveType, a DecimalType,
// an *ArrayType, a *MapType or a *StructType.
type DataType interface {
	// String returns the type in Spark's simple string form, for example
	// "long", "decimal(10,2)" or "array<string>".
	String() string
	isDataType()
}

// PrimitiveType is a Delta primitive type other than decimal, named as in the
// schema JSON.
type PrimitiveType string

// The primitive types of the Delta protocol.
const (
	TypeBoolean      PrimitiveType = "boolean"
	TypeByte         PrimitiveType = "byte"
	TypeShort        PrimitiveType = "short"
	TypeInteger      PrimitiveType = "integer"
	TypeLong         PrimitiveType = "long"
	TypeFloat        PrimitiveType = "float"
	TypeDouble       PrimitiveType = "double"
	TypeString       PrimitiveType = "string"
	TypeBinary       PrimitiveType = "binary"
	TypeDate         PrimitiveType = "date"
	TypeTimestamp    PrimitiveType = "timestamp"
	TypeTimestampNTZ PrimitiveType = "timestamp_ntz"
)

// String returns the type name.
func (t PrimitiveType) String() string { return string(t) }

func (PrimitiveType) isDataType() {}

// DecimalType is a fixed-point decimal with at most 38 digits of precision.
type DecimalType struct {
	Precision int
	Scale     int
}

// String returns the type as "decimal(p,s)".
func (t DecimalType) String() string { return fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale) }

func (DecimalType) isDataType() {}

// ArrayType is a variable-length list of elements of one type.
type ArrayType struct {
	ElementType  DataType
	ContainsNull bool
}

// String returns the type as "array<element>".
func (t *ArrayType) String() string { return "array<" + t.ElementType.String() + ">" }

func (*ArrayType) isDataType() {}

// MapType is a map from keys of one type to values of another. Keys are never
// null.
type MapType struct {
	KeyType           DataType
	ValueType         DataType
	ValueContainsNull bool
}

// String returns the type as "map<key,value>".
func (t *MapType) String() string {
	return "map<" + t.KeyType.String() + "," + t.ValueType.String() + ">"
}

func (*MapType) isDataType() {}

// StructType is an ordered list of named fields. The schema of a table is a
// StructType.
type StructType struct {
	Fields []*StructField
}

// StructField is one named field of a StructType.
type StructField struct {
	Name     string
	Type     DataType
	Nullable bool
	// Metadata holds the field's metadata map as decoded JSON values; nil is
	// written as {}.
	Metadata map[string]any
}

// NewStructType returns a struct type with the given fields.
func NewStructType(fields ...*StructField) *StructType { return &StructType{Fields: fields} }

// NewField returns a field with empty metadata.
func NewField(name string, typ DataType, nullable bool) *StructField {
	return &StructField{Name: name, Type: typ, Nullable: nullable}
}

// String returns the type as "struct<a:long,b:string>".
func (t *StructType) String() string {
	var b strings.Builder
	b.WriteString("struct<")
	for i, f := range t.Fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.Name)
		b.WriteByte(':')
		b.WriteString(f.Type.String())
	}
	b.WriteByte('>')
	return b.String()
}

func (*StructType) isDataType() {}

// Field returns the field with the given name and its index, or nil and -1.
func (t *StructType) Field(name string) (*StructField, int) {
	for i, f := range t.Fields {
		if f.Name == name {
			return f, i
		}
	}
	return nil, -1
}

// FieldNames returns the names of the fields in order.
func (t *StructType) FieldNames() []string {
	names := make([]string, len(t.Fields))
	for i, f := range t.Fields {
		names[i] = f.Name
	}
	return names
}

// ParseSchema parses a schemaString as stored in a metaData action.
func ParseSchema(s string) (*StructType, error) {
	var st StructType
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return nil, fmt.Errorf("parse schema: %w: %v", ErrInvalidSchema, err)
	}
	return &st, nil
}

// SchemaString returns the schema serialised as a schemaString.
func (t *StructType) SchemaString() (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("marshal schema: %w", err)
	}
	return string(b), nil
}

// MarshalJSON writes the struct as {"type":"struct","fields":[...]}.
func (t *StructType) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"type":"struct","fields":[`)
	for i, f := range t.Fields {
		if i > 0 {
			b.WriteByte(',')
		}
		fb, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		b.Write(fb)
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// UnmarshalJSON reads a struct type object.
func (t *StructType) UnmarshalJSON(data []byte) error {
	dt, err := parseDataType(data)
	if err != nil {
		return err
	}
	st, ok := dt.(*StructType)
	if !ok {
		return fmt.Errorf("%w: expected a struct type, got %s", ErrInvalidSchema, dt)
	}
	*t = *st
	return nil
}

// MarshalJSON writes the field with its keys in Spark's order.
func (f *StructField) MarshalJSON() ([]byte, error) {
	typ, err := marshalDataType(f.Type)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(f.Name)
	meta := []byte("{}")
	if len(f.Metadata) > 0 {
		if meta, err = json.Marshal(f.Metadata); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"name":`)
	b.Write(name)
	b.WriteString(`,"type":`)
	b.Write(typ)
	b.WriteString(`,"nullable":`)
	b.WriteString(strconv.FormatBool(f.Nullable))
	b.WriteString(`,"metadata":`)
	b.Write(meta)
	b.WriteByte('}')
	return b.Bytes(), nil
}

func marshalDataType(t DataType) ([]byte, error) {
	switch t := t.(type) {
	case PrimitiveType:
		return json.Marshal(string(t))
	case DecimalType:
		return json.Marshal(t.String())
	case *StructType:
		return t.MarshalJSON()
	case *ArrayType:
		el, err := marshalDataType(t.ElementType)
		if err != nil {
			return nil, err
		}
		return []byte(`{"type":"array","elementType":` + string(el) +
			`,"containsNull":` + strconv.FormatBool(t.ContainsNull) + `}`), nil
	case *MapType:
		k, err := marshalDataType(t.KeyType)
		if err != nil {
			return nil, err
		}
		v, err := marshalDataType(t.ValueType)
		if err != nil {
			return nil, err
		}
		return []byte(`{"type":"map","keyType":` + string(k) + `,"valueType":` + string(v) +
			`,"valueContainsNull":` + strconv.FormatBool(t.ValueContainsNull) + `}`), nil
	case nil:
		return nil, fmt.Errorf("%w: nil data type", ErrInvalidSchema)
	default:
		return nil, fmt.Errorf("%w: unknown data type %T", ErrInvalidSchema, t)
	}
}

var decimalRe = regexp.MustCompile(`^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$`)

func parseDataType(data []byte) (DataType, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var name string
		if err := json.Unmarshal(data, &name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
		}
		return parsePrimitive(name)
	}
	var obj struct {
		Type              string            `json:"type"`
		Fields            []json.RawMessage `json:"fields"`
		ElementType       json.RawMessage   `json:"elementType"`
		ContainsNull      *bool             `json:"containsNull"`
		KeyType           json.RawMessage   `json:"keyType"`
		ValueType         json.RawMessage   `json:"valueType"`
		ValueContainsNull *bool             `json:"valueContainsNull"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	switch obj.Type {
	case "struct":
		st := &StructType{Fields: make([]*StructField, 0, len(obj.Fields))}
		for _, raw := range obj.Fields {
			var f struct {
				Name     string          `json:"name"`
				Type     json.RawMessage `json:"type"`
				Nullable *bool           `json:"nullable"`
				Metadata map[string]any  `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &f); err != nil {
				return nil, fmt.Errorf("%w: field: %v", ErrInvalidSchema, err)
			}
			if len(f.Type) == 0 {
				return nil, fmt.Errorf("%w: field %q has no type", ErrInvalidSchema, f.Name)
			}
			ft, err := parseDataType(f.Type)
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", f.Name, err)
			}
			st.Fields = append(st.Fields, &StructField{
				Name: f.Name, Type: ft, Nullable: f.Nullable == nil || *f.Nullable, Metadata: f.Metadata,
			})
		}
		return st, nil
	case "array":
		if len(obj.ElementType) == 0 {
			return nil, fmt.Errorf("%w: array without elementType", ErrInvalidSchema)
		}
		el, err := parseDataType(obj.ElementType)
		if err != nil {
			return nil, err
		}
		return &ArrayType{ElementType: el, ContainsNull: obj.ContainsNull == nil || *obj.ContainsNull}, nil
	case "map":
		if len(obj.KeyType) == 0 || len(obj.ValueType) == 0 {
			return nil, fmt.Errorf("%w: map without keyType or valueType", ErrInvalidSchema)
		}
		k, err := parseDataType(obj.KeyType)
		if err != nil {
			return nil, err
		}
		v, err := parseDataType(obj.ValueType)
		if err != nil {
			return nil, err
		}
		return &MapType{KeyType: k, ValueType: v, ValueContainsNull: obj.ValueContainsNull == nil || *obj.ValueContainsNull}, nil
	default:
		return nil, fmt.Errorf("%w: unknown complex type %q", ErrInvalidSchema, obj.Type)
	}
}

func parsePrimitive(name string) (DataType, error) {
	if name == "decimal" {
		return DecimalType{Precision: 10, Scale: 0}, nil
	}
	if m := decimalRe.FindStringSubmatch(name); m != nil {
		p, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		if p < 1 || p > 38 || s < 0 || s > p {
			return nil, fmt.Errorf("%w: bad decimal %q", ErrInvalidSchema, name)
		}
		return DecimalType{Precision: p, Scale: s}, nil
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty type name", ErrInvalidSchema)
	}
	// Unknown names (void, variant, interval...) are kept so that table
	// metadata stays readable; reading or writing such columns fails later.
	return PrimitiveType(name), nil
}
