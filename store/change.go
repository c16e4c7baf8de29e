package store

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LSN is a PostgreSQL write-ahead log position.
type LSN uint64

// String formats the LSN the way PostgreSQL does, for example "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN parses an LSN in PostgreSQL's text form, two hexadecimal
// numbers of at most 32 bits separated by "/", as String writes it and
// as the Delta tables' commitInfo records it (lastLSN).
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("LSN %q: want two hexadecimal numbers separated by \"/\"", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// Op is the kind of a captured change.
type Op uint8

// The change operations, as they appear in the changelog's _op column.
const (
	OpInsert Op = iota + 1
	OpUpdate
	OpDelete
	OpTruncate
	// OpSnapshot is a row copied from the table rather than changed: by
	// the initial snapshot or a backfill. Applied, it inserts the row or
	// replaces the row of the same key.
	OpSnapshot
)

// String returns the changelog name of the operation.
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	case OpSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Kind tells how a Value is represented. Each kind is one target type of the
// type mapping in docs/types.md; the column's declared type lives in the Relation.
type Kind uint8

// The value kinds.
const (
	// KindNull is SQL NULL.
	KindNull Kind = iota
	// KindUnchanged marks an unchanged TOAST value in an UPDATE: PostgreSQL did
	// not send it, and the existing value must be kept. It is never null.
	KindUnchanged
	// KindBool holds 0 or 1 in Int.
	KindBool
	// KindInt16, KindInt32 and KindInt64 hold the integer in Int.
	KindInt16
	KindInt32
	KindInt64
	// KindFloat32 and KindFloat64 hold the IEEE 754 bits in Int.
	KindFloat32
	KindFloat64
	// KindNumeric holds the exact decimal text PostgreSQL printed (digits,
	// sign, point, or NaN / Infinity / -Infinity) in Bytes.
	KindNumeric
	// KindString holds UTF-8 text in Bytes: text, varchar, char, uuid, json,
	// jsonb, enum, interval, inet and every type without a mapping.
	KindString
	// KindBytes holds bytea contents in Bytes.
	KindBytes
	// KindDate holds days since 1970-01-01 in Int.
	KindDate
	// KindTimestamp holds microseconds since the Unix epoch, UTC, in Int
	// (timestamptz; and timestamp without time zone, whose wall clock is read as UTC).
	KindTimestamp
	// KindTime holds microseconds since midnight in Int.
	KindTime
	// KindArray holds the elements in Elems (multi-dimensional arrays are flattened).
	KindArray
	// KindTooLarge stands for a value larger than capture holds
	// (source.max_value_size): Int is its size in bytes as PostgreSQL sent
	// it. It is stored as null and listed in the changelog's _replaced.
	KindTooLarge
	kindEnd
)

// Infinite dates and timestamps are kept as the extreme values of Int.
const (
	InfinityInt         = int64(^uint64(0) >> 1)
	NegativeInfinityInt = -InfinityInt - 1
)

// Value is one decoded column value.
type Value struct {
	Kind  Kind
	Int   int64
	Bytes []byte
	Elems []Value
}

// Change is one row change inside a transaction.
type Change struct {
	Op Op
	// Relation identifies the schema version the values follow.
	Relation RelationKey
	// New is the row after the change (insert, update).
	New []Value
	// Old is the row before the change (update, delete), when the replica
	// identity provides it. With OldIsKey only the key columns are set and
	// the others are KindNull.
	Old      []Value
	OldIsKey bool
}

// TxnHeader describes a committed transaction in the queue.
type TxnHeader struct {
	Xid        uint32
	CommitLSN  LSN
	EndLSN     LSN
	CommitTime time.Time
	// Snapshot is set for the rows copied by the initial snapshot; they form
	// one transaction at the slot's consistent point.
	Snapshot bool
	// Copied is set for a chunk of rows a backfill copied: its changes
	// are all OpSnapshot rows of one schema version.
	Copied bool
	// Changes is the number of changes in the transaction.
	Changes int64
}

// Txn is a committed transaction held in memory.
type Txn struct {
	TxnHeader
	Changes []Change
}

// ValuesBytes returns the bytes that values and their elements hold: what
// they take in memory beyond their fixed size.
func ValuesBytes(values []Value) int {
	n := 0
	for i := range values {
		n += len(values[i].Bytes)
		if len(values[i].Elems) > 0 {
			n += ValuesBytes(values[i].Elems)
		}
	}
	return n
}
