package delta

import (
	"time"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// The schema and value types are defined in delta/internal/types, which the
// Parquet encoder shares; they are the same types under these names.
type (
	// DataType is a Delta (Spark SQL) data type: a PrimitiveType, a
	// DecimalType, an *ArrayType, a *MapType or a *StructType.
	DataType = types.DataType
	// PrimitiveType is a Delta primitive type other than decimal, named as
	// in the schema JSON.
	PrimitiveType = types.PrimitiveType
	// DecimalType is a fixed-point decimal with at most 38 digits of
	// precision.
	DecimalType = types.DecimalType
	// ArrayType is a variable-length list of elements of one type.
	ArrayType = types.ArrayType
	// MapType is a map from keys of one type to values of another. Keys
	// are never null.
	MapType = types.MapType
	// StructType is an ordered list of named fields. The schema of a table
	// is a StructType.
	StructType = types.StructType
	// StructField is one named field of a StructType.
	StructField = types.StructField
	// Row is one row of a table, its values in schema field order. See the
	// package documentation for the Go type used for each Delta type.
	Row = types.Row
	// MapEntry is one key/value pair of a map value. Readers return maps
	// as []MapEntry in file order.
	MapEntry = types.MapEntry
	// Decimal is an exact decimal number: Unscaled × 10^-Scale.
	Decimal = types.Decimal
)

// The primitive types of the Delta protocol.
const (
	TypeBoolean      = types.TypeBoolean
	TypeByte         = types.TypeByte
	TypeShort        = types.TypeShort
	TypeInteger      = types.TypeInteger
	TypeLong         = types.TypeLong
	TypeFloat        = types.TypeFloat
	TypeDouble       = types.TypeDouble
	TypeString       = types.TypeString
	TypeBinary       = types.TypeBinary
	TypeDate         = types.TypeDate
	TypeTimestamp    = types.TypeTimestamp
	TypeTimestampNTZ = types.TypeTimestampNTZ
)

// NewStructType returns a struct type with the given fields.
func NewStructType(fields ...*StructField) *StructType { return types.NewStructType(fields...) }

// NewField returns a field with empty metadata.
func NewField(name string, typ DataType, nullable bool) *StructField {
	return types.NewField(name, typ, nullable)
}

// ParseSchema parses a schemaString as stored in a metaData action.
func ParseSchema(s string) (*StructType, error) { return types.ParseSchema(s) }

// NewDecimal returns the decimal unscaled × 10^-scale.
func NewDecimal(unscaled int64, scale int32) Decimal { return types.NewDecimal(unscaled, scale) }

// Normalize converts a Go value accepted for type t to the Go type readers
// return for t, widening numbers and rescaling decimals; it fails with
// ErrInvalidValue when the value does not fit.
func Normalize(t DataType, v any) (any, error) { return types.Normalize(t, v) }

// ParseDecimal parses a plain decimal number such as "-12.340" (scale 3). An
// exponent is accepted ("1.5E+3").
func ParseDecimal(s string) (Decimal, error) { return types.ParseDecimal(s) }

// DateFromDays returns the UTC midnight of the given day since 1970-01-01.
func DateFromDays(days int32) time.Time { return types.DateFromDays(days) }

// DaysSinceEpoch returns the calendar date of t (in t's location) as days
// since 1970-01-01.
func DaysSinceEpoch(t time.Time) int32 { return types.DaysSinceEpoch(t) }

// TimeFromMicros returns the UTC time of the given microseconds since the
// epoch.
func TimeFromMicros(us int64) time.Time { return types.TimeFromMicros(us) }
