// Package live serves the live view of a running agent: the HTTP API, the
// WebSocket stream of durable changes, and the embedded web page.
//
// # Stream protocol
//
// A client opens GET /api/v1/stream?tables=public.stock,public.products and,
// when it reconnects, adds &offset=<offset> with the offset of the last
// message it applied. Offsets are strings "<epoch>:<lsn>": the epoch changes
// whenever the agent's state is reset, so a stale offset is never trusted.
// Every server message is one JSON text frame with a "type":
//
//	hello     first message: the epoch, the server's current offset, and the
//	          requested tables with their columns and key columns.
//	snapshot  the current rows of one table at an offset, in pages
//	          ("rows" is a list of row objects keyed by column name; "last"
//	          marks the final page of that table's snapshot). A new client
//	          gets a snapshot of every requested table at one offset S, then
//	          every change after S, with no gap and no duplicate.
//	changes   one or more whole transactions after the previous offset, in
//	          commit order: per transaction its LSN, xid, commit time and
//	          changed rows with their operation. The message's offset is that
//	          of its last transaction.
//	refetch   the offset the client sent is unknown (other epoch) or no
//	          longer retained: discard local rows; snapshots follow.
//	error     a request problem (unknown table, bad offset); the server closes
//	          with code 4000. A configured table of which nothing has been
//	          captured yet (right after the agent starts) closes with 1013
//	          ("try again later") instead: reconnect shortly.
//
// Values keep their exact types: 64-bit integers, numerics, and timestamps
// are strings; other numbers are JSON numbers; bytea is base64; arrays are
// JSON arrays; NULL is null. Row keys are the key columns' values joined, as
// "key" on each change and snapshot row.
//
// A text, numeric, bytea or array value larger than the hub's bound
// (HubConfig.MaxValueBytes, 64 KiB of its text or bytes by default) is sent,
// by the stream and the HTTP API alike, as an object, which no other value
// is: {"truncated": true, "bytes": <the whole value's size>, "prefix": <its
// start, of the value's type>} (see typemap.BoundedJSON). Key values are
// never truncated. The whole value is in the table's Delta mirror.
//
// A client that does not read fast enough is closed with code 4008 ("slow
// client"); the server pings every 20 seconds and closes a connection that
// does not answer within 40.
package live

import (
	"encoding/json"

	"github.com/lakeside/lakeside/store"
)

// Message types.
const (
	TypeHello    = "hello"
	TypeSnapshot = "snapshot"
	TypeChanges  = "changes"
	TypeRefetch  = "refetch"
	TypeError    = "error"
)

// WebSocket close codes used by the server.
const (
	CloseSlowClient = 4008
	CloseBadRequest = 4000
)

// Hello is the first message on a stream.
type Hello struct {
	Type   string      `json:"type"`
	Epoch  string      `json:"epoch"`
	Offset string      `json:"offset"`
	Tables []TableInfo `json:"tables"`
}

// TableInfo describes a source table.
type TableInfo struct {
	Name    string       `json:"name"`
	Columns []ColumnInfo `json:"columns"`
	Key     []string     `json:"key"`
	// dir is the directory of the table's Delta mirror.
	dir string
}

// ColumnInfo describes a column: its name and PostgreSQL type name.
type ColumnInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Snapshot carries one page of a table's current rows.
type Snapshot struct {
	Type   string `json:"type"`
	Offset string `json:"offset"`
	Table  string `json:"table"`
	Rows   []Row  `json:"rows"`
	Last   bool   `json:"last"`
}

// Row is a row keyed by column name, plus its key.
type Row struct {
	Key    string                     `json:"key"`
	Values map[string]json.RawMessage `json:"values"`
}

// Changes carries whole transactions.
type Changes struct {
	Type   string `json:"type"`
	Offset string `json:"offset"`
	Txns   []Txn  `json:"txns"`
}

// Txn is one committed transaction.
type Txn struct {
	LSN        string   `json:"lsn"`
	Xid        uint32   `json:"xid"`
	CommitTime string   `json:"commit_time"`
	Changes    []Change `json:"changes"`
}

// Change is one changed row. Op is insert, update, delete, truncate or
// snapshot (a row copied from the table, which replaces the row of its key
// or adds it). For insert, update and snapshot Row holds the new row; an update that changed the key
// also names the old key in OldKey; for delete only Key is set; a truncate
// empties the table.
type Change struct {
	Table  string                     `json:"table"`
	Op     string                     `json:"op"`
	Key    string                     `json:"key,omitempty"`
	OldKey string                     `json:"old_key,omitempty"`
	Row    map[string]json.RawMessage `json:"row,omitempty"`

	// raw, when set, is the captured change not yet rendered into Key,
	// OldKey and Row (see render), laid out per rel, its values to be
	// bounded by maxValue bytes.
	raw      *store.Change
	rel      *store.Relation
	maxValue int
}

// Refetch tells the client to drop its rows; snapshots follow.
type Refetch struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// ErrorMessage reports a request problem before the server closes.
type ErrorMessage struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
