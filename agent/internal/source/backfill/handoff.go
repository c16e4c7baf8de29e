package backfill

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lakeside/lakeside/store"
)

// Stream is the replication stream as the backfiller hands it chunks: it
// notes the changes of the table being copied, and takes each chunk at
// its high watermark (the stream's side, in package source, judges the
// chunk and queues it). A chunk's window is shared by the two goroutines:
// the backfiller sets its fields under the stream's lock (Update), which
// the stream takes before it reads them.
type Stream interface {
	// StartTracking asks the stream to note the changes of table oid by
	// the key columns keyNames (none: every change is of keys unknown),
	// and returns where it receives the position the stream tracks from.
	StartTracking(oid uint32, keyNames []string) <-chan store.LSN
	// StopTracking asks the stream to stop noting changes, and forgets
	// the windows open.
	StopTracking()
	// Open adds a chunk's window before its low watermark is written.
	Open(win *Window)
	// Update runs fn, which sets what the stream reads of a window it
	// holds, under the lock the stream reads it under.
	Update(fn func())
	// Withdraw removes a window the backfiller gives up, and reports
	// whether it was there: false when the stream took it at its high
	// watermark.
	Withdraw(win *Window) bool
}

// Prefix is the prefix of the logical decoding messages that mark a
// chunk's window in the WAL.
const Prefix = "lakeside.backfill"

// Watermark is the content of a watermark message.
type Watermark struct {
	// ID names the chunk: the backfill's session nonce and the chunk's
	// number, so that a message of an earlier session, read again after
	// a restart, is passed over.
	ID   string `json:"id"`
	OID  uint32 `json:"oid"`
	Mark string `json:"mark"` // "low" or "high"
}

// Window is one chunk on its way from the backfiller to the stream.
type Window struct {
	ID  string
	OID uint32
	// Rel is the schema version the rows follow (its key LSN unset),
	// Snap the snapshot the copy saw, and Truncate tells that the chunk
	// starts by truncating the table.
	Rel      *store.Relation
	Snap     Snapshot
	Truncate bool

	// Set by the backfiller before the high watermark (Ready): the rows,
	// their keys (none for ctid ranges), and the progress once queued.
	Ready bool
	Rows  []store.Change
	Keys  RowKeys
	Prog  *store.Backfill
	// Recycle, if set, gives the chunk's memory (rows, keys and what
	// they point into) back once the chunk is durable
	// (tuning_chunk_memory.go).
	Recycle func()

	// Set by the stream: where the low watermark is, and the truncate
	// of a chunk that truncates first.
	Low, TruncAt store.LSN
	LowSeen      bool
	// Redo says why the chunk is copied again, found at its low
	// watermark.
	Redo string
	// Result receives what the stream did with the chunk.
	Result chan Result
}

// Result is what the stream did with a chunk.
type Result struct {
	Queued bool
	// Rows were queued; Replaced were left out for the stream's changes.
	Rows, Replaced int
	// Redo says why the chunk is to be copied again; Restart why a copy
	// by ctid ranges starts over.
	Redo, Restart string
}

// RowKeys are the encoded keys of a chunk's rows, in one buffer.
type RowKeys struct {
	data []byte
	ends []int
}

// add appends the key of the next row, which write appends to its
// argument.
func (k *RowKeys) add(write func([]byte) []byte) {
	k.data = write(k.data)
	k.ends = append(k.ends, len(k.data))
}

// Len returns the number of keys: none for a chunk by ctid ranges.
func (k *RowKeys) Len() int { return len(k.ends) }

// At returns the key of row i.
func (k *RowKeys) At(i int) []byte {
	start := 0
	if i > 0 {
		start = k.ends[i-1]
	}
	return k.data[start:k.ends[i]]
}

// Snapshot is a transaction snapshot as pg_current_snapshot() prints it:
// which transactions a chunk's copy sees.
type Snapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

// ParseSnapshot parses "xmin:xmax:xip,xip,...".
func ParseSnapshot(s string) (Snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: want xmin:xmax:xip", s)
	}
	var snap Snapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
	}
	snap.xip = map[uint64]bool{}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			xid, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return Snapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
			}
			snap.xip[xid] = true
		}
	}
	return snap, nil
}

// Visible reports whether the snapshot sees the committed transaction
// xid (32 bits, as pgoutput sends it; widened by its distance from xmax,
// which every transaction still in flight is within 2^31 of).
func (s Snapshot) Visible(xid uint32) bool {
	full := int64(s.xmax) + int64(int32(xid-uint32(s.xmax)))
	if full < 0 {
		return true
	}
	x := uint64(full)
	return x < s.xmin || (x < s.xmax && !s.xip[x])
}

// SeesAllUpTo reports whether the snapshot sees every transaction whose
// xid is at or before xid: xmin is past it.
func (s Snapshot) SeesAllUpTo(xid uint32) bool {
	full := int64(s.xmax) + int64(int32(xid-uint32(s.xmax)))
	return full < int64(s.xmin)
}

// KeyPositions returns the positions of the named columns in rel, nil
// when one is missing.
func KeyPositions(rel *store.Relation, names []string) []int {
	pos := make([]int, len(names))
	for i, n := range names {
		pos[i] = -1
		for j, c := range rel.Columns {
			if c.Name == n {
				pos[i] = j
			}
		}
		if pos[i] < 0 {
			return nil
		}
	}
	return pos
}
