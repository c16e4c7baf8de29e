// Package typemap is the one table of what Lakeside does with each
// PostgreSQL type. A row (Type) says, for one type OID, how capture queues
// its values (the store.Kind and the decoder of its text output), which
// Delta type a column of it gets, and how a live-view client writes a key of
// it. What depends only on the queued representation lives beside the table,
// one file a direction:
//
//	decode.go     PostgreSQL text → queued value (store.Value), for capture
//	textparse.go  the fast parsers decode.go tries first
//	delta.go      queued value → Go value of the Delta type, and into a
//	              delta.RowBuilder, for the applier
//	replaced.go   which values Delta cannot hold exactly, and what is stored
//	key.go        the byte key that orders mirror rows
//	spill.go      the codec of converted rows in a merge's pending set
//	json.go       queued value → JSON, key text → queued value, comparison,
//	              Delta value → queued value, for the live view
//
// A type without a row is captured as the text PostgreSQL prints and stored
// as a Delta string, so a new type never stops the pipeline. The policy is
// written out in docs/types.md.
package typemap

import (
	"math"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Type is one row of the type table.
type Type struct {
	// OID and Name identify the PostgreSQL type.
	OID  uint32
	Name string
	// Kind is how capture queues a value of the type (for an array,
	// store.KindArray; for a type kept as text, store.KindString).
	Kind store.Kind
	// Elem is the row of an array's elements, nil for other types.
	Elem *Type

	// deltaType returns the Delta type of a column of the type with the
	// given type modifier.
	deltaType func(typmod int32) delta.DataType
	// decode returns the decoder of the type's text output, which may use
	// scan plans of pg.
	decode func(pg *pgtype.Map) DecodeFunc
	// key parses a key value a client of the live view gives as text;
	// nil takes the text as it is.
	key func(text string) (store.Value, error)
}

// The type OIDs of money and money[], which pgtype does not know.
const (
	oidMoney      = 790
	oidMoneyArray = 791
)

// rows returns the rows of the types Lakeside maps to something other than
// a string. Arrays of them are rows made by Map.Lookup.
func rows() []Type {
	return []Type{
		{OID: pgtype.BoolOID, Name: "bool", Kind: store.KindBool,
			deltaType: is(delta.TypeBoolean), decode: decodeBool, key: boolKey},
		{OID: pgtype.Int2OID, Name: "int2", Kind: store.KindInt16,
			deltaType: is(delta.TypeShort), decode: decodeInt2, key: integerKey(store.KindInt16, math.MinInt16, math.MaxInt16)},
		{OID: pgtype.Int4OID, Name: "int4", Kind: store.KindInt32,
			deltaType: is(delta.TypeInteger), decode: decodeInt4, key: integerKey(store.KindInt32, math.MinInt32, math.MaxInt32)},
		{OID: pgtype.Int8OID, Name: "int8", Kind: store.KindInt64,
			deltaType: is(delta.TypeLong), decode: decodeInt8, key: integerKey(store.KindInt64, math.MinInt64, math.MaxInt64)},
		{OID: pgtype.Float4OID, Name: "float4", Kind: store.KindFloat32,
			deltaType: is(delta.TypeFloat), decode: decodeFloat4, key: floatKey(store.KindFloat32, 32)},
		{OID: pgtype.Float8OID, Name: "float8", Kind: store.KindFloat64,
			deltaType: is(delta.TypeDouble), decode: decodeFloat8, key: floatKey(store.KindFloat64, 64)},
		// PostgreSQL prints numeric exactly; the text is the value. A
		// numeric(p,s) Delta can hold is a decimal, any other a string.
		{OID: pgtype.NumericOID, Name: "numeric", Kind: store.KindNumeric,
			deltaType: numericDeltaType, decode: always(numericValue), key: numericKey},
		// money is read as the session prints it (lc_monetary C), a
		// decimal of two places.
		{OID: oidMoney, Name: "money", Kind: store.KindNumeric,
			deltaType: is(delta.DecimalType{Precision: 19, Scale: 2}), decode: always(moneyValue), key: numericKey},
		{OID: pgtype.ByteaOID, Name: "bytea", Kind: store.KindBytes,
			deltaType: is(delta.TypeBinary), decode: decodeBytea, key: byteaKey},
		{OID: pgtype.DateOID, Name: "date", Kind: store.KindDate,
			deltaType: is(delta.TypeDate), decode: decodeDate, key: dateKey},
		{OID: pgtype.TimestamptzOID, Name: "timestamptz", Kind: store.KindTimestamp,
			deltaType: is(delta.TypeTimestamp), decode: decodeTimestamp(true), key: timestampKey},
		// The wall clock of a timestamp without time zone is read as UTC.
		{OID: pgtype.TimestampOID, Name: "timestamp", Kind: store.KindTimestamp,
			deltaType: is(delta.TypeTimestamp), decode: decodeTimestamp(false), key: timestampKey},
		// time is microseconds since midnight; Delta has no time type.
		{OID: pgtype.TimeOID, Name: "time", Kind: store.KindTime,
			deltaType: is(delta.TypeLong), decode: decodeTime, key: timeKey},
	}
}

// is returns a deltaType function that gives dt whatever the modifier.
func is(dt delta.DataType) func(int32) delta.DataType {
	return func(int32) delta.DataType { return dt }
}

// always returns a decode function that gives f.
func always(f DecodeFunc) func(*pgtype.Map) DecodeFunc {
	return func(*pgtype.Map) DecodeFunc { return f }
}

// numericDeltaType is the Delta type of a numeric column: decimal(p,s) when
// the column is constrained to one Delta can hold, string otherwise.
func numericDeltaType(typmod int32) delta.DataType {
	if p, s, ok := numericTypmod(typmod); ok {
		return delta.DecimalType{Precision: p, Scale: s}
	}
	return delta.TypeString
}

// numericTypmod decodes numeric(p,s) from a type modifier. It reports false
// for unconstrained numeric and for constraints Delta cannot express
// (precision above 38, negative scale or scale above precision).
func numericTypmod(typmod int32) (p, s int, ok bool) {
	if typmod < 4 {
		return 0, 0, false
	}
	p = int(((typmod - 4) >> 16) & 0xffff)
	s = int((typmod - 4) & 0xffff)
	if p < 1 || p > 38 || s > p {
		return 0, 0, false
	}
	return p, s, true
}

// text is the row of a type kept as its text: text, varchar, char, name,
// uuid, json, jsonb, interval, inet, enums and every type without a row.
func text(oid uint32, name string) Type {
	return Type{OID: oid, Name: name, Kind: store.KindString,
		deltaType: is(delta.TypeString), decode: always(textValue)}
}

// Map looks up rows of the type table. It holds pgtype's map of the
// built-in types, which knows their names and array element types. Its
// methods may be called concurrently, except Decoder, whose scan plans
// pgtype's map caches.
type Map struct {
	pg   *pgtype.Map
	rows map[uint32]*Type
}

// New returns a Map of the built-in types.
func New() *Map {
	m := &Map{pg: pgtype.NewMap(), rows: map[uint32]*Type{}}
	for _, r := range rows() {
		m.rows[r.OID] = &r
	}
	money := m.rows[oidMoney]
	m.rows[oidMoneyArray] = &Type{OID: oidMoneyArray, Name: "_money", Kind: store.KindArray, Elem: money,
		deltaType: arrayOf(money.deltaType), decode: decodeArrayOf(money)}
	return m
}

// Lookup returns the row of the type oid: its own, the row of an array of
// a type pgtype knows (made from its element's row), or a row that keeps
// the text.
func (m *Map) Lookup(oid uint32) Type {
	if r, ok := m.rows[oid]; ok {
		return *r
	}
	t, ok := m.pg.TypeForOID(oid)
	if !ok {
		return text(oid, "oid:"+strconv.FormatUint(uint64(oid), 10))
	}
	if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
		elem := m.Lookup(ac.ElementType.OID)
		return Type{OID: oid, Name: t.Name, Kind: store.KindArray, Elem: &elem,
			deltaType: arrayOf(elem.deltaType), decode: decodeArrayOf(&elem)}
	}
	return text(oid, t.Name)
}

// arrayOf returns the deltaType function of an array whose elements have
// the Delta type elem gives. An array column's type modifier applies to its
// elements.
func arrayOf(elem func(int32) delta.DataType) func(int32) delta.DataType {
	return func(typmod int32) delta.DataType {
		return &delta.ArrayType{ElementType: elem(typmod), ContainsNull: true}
	}
}

// Known reports whether capture reads the type oid as itself: a type
// pgtype knows, or money. Capture resolves any other (a domain, an array
// of an enum) to one it knows before decoding.
func (m *Map) Known(oid uint32) bool {
	if _, ok := m.rows[oid]; ok {
		return true
	}
	_, ok := m.pg.TypeForOID(oid)
	return ok
}

// TypeName returns the PostgreSQL name of a type, for clients.
func (m *Map) TypeName(oid uint32) string { return m.Lookup(oid).Name }

// DeltaType returns the Delta type of a column. An array declared of more
// than one dimension (int[][]) is arrays of arrays, as deep.
func (m *Map) DeltaType(col store.Column) delta.DataType {
	dt := m.Lookup(col.TypeOID).deltaType(col.TypeMod)
	if at, ok := dt.(*delta.ArrayType); ok {
		for range col.Dims - 1 {
			at = &delta.ArrayType{ElementType: at, ContainsNull: true}
		}
		dt = at
	}
	return dt
}

// Decoder returns the decoder of a column's values. An array declared of
// more than one dimension keeps its shape (see decodeArrayOfDims).
func (m *Map) Decoder(col store.Column) DecodeFunc {
	t := m.Lookup(col.TypeOID)
	if t.Elem != nil && col.Dims > 1 {
		return decodeArrayOfDims(m.pg, t.Elem.decode(m.pg), col.Dims)
	}
	return t.decode(m.pg)
}

// ParseKey turns the text of a key value of type oid, as a client of the
// live view writes it, into a value that compares with the queued ones.
func (m *Map) ParseKey(oid uint32, text string) (store.Value, error) {
	if t := m.Lookup(oid); t.key != nil {
		return t.key(text)
	}
	return store.Value{Kind: store.KindString, Bytes: []byte(text)}, nil
}
