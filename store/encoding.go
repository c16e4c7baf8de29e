package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
)

// Every record in the file is framed as
//
//	format version (1 byte) | payload | CRC-32C of version and payload (4 bytes, big endian)
//
// so that a torn or foreign value is reported as ErrCorrupt instead of being
// misread, and a future format can be told apart from this one.
const formatVersion = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record types inside the payload, so a value decoded under the wrong key is
// caught as corrupt too.
const (
	recordTxnHeader byte = 'H'
	recordChunk     byte = 'C'
	recordRelation  byte = 'R'
	recordSlotState byte = 'S'
	recordMeta      byte = 'M'
	// recordInlineTxn is a queued transaction of one chunk stored as one
	// value: its header record and its chunk record (see AppendTxn).
	recordInlineTxn byte = 'T'
	// recordBackfill is a table's backfill progress (see Backfill).
	recordBackfill byte = 'B'
	// recordPartitions is a partitioned table's leaf partitions (see
	// Writer.PutPartitions).
	recordPartitions byte = 'P'
	// recordEnumLabels is the enum labels a table's values hold (see
	// Writer.PutEnumLabels).
	recordEnumLabels byte = 'E'
	// recordFleetRuns is the run ids of a replica target (see FleetRuns).
	recordFleetRuns byte = 'F'
)

// encoder appends to a byte slice.
type encoder struct{ buf []byte }

func newEncoder(record byte, sizeHint int) *encoder {
	e := &encoder{buf: make([]byte, 0, sizeHint+8)}
	e.open(record)
	return e
}

// open appends the head of a framed record of the given kind, and returns
// where the record starts, for seal.
func (e *encoder) open(record byte) (start int) {
	start = len(e.buf)
	e.buf = append(e.buf, formatVersion, record)
	return start
}

// seal appends the checksum of the record that starts at start.
func (e *encoder) seal(start int) {
	e.buf = binary.BigEndian.AppendUint32(e.buf, crc32.Checksum(e.buf[start:], castagnoli))
}

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) byte1(b byte)     { e.buf = append(e.buf, b) }
func (e *encoder) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.buf = append(e.buf, b...) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }

// finish appends the checksum and returns the framed record.
func (e *encoder) finish() []byte {
	e.seal(0)
	return e.buf
}

// decoder reads a framed record. The first error sticks; later reads return
// zero values, so callers check err once at the end.
type decoder struct {
	buf []byte
	err error
	// shared makes bytes return slices of buf, not copies, and values
	// carve their slices from slab (see TxnCursor.RecycledChunks; without
	// mem, only tests decode so: decodeSharedChunk).
	shared   bool
	slab     []Value
	slabSize int
	// withoutValues makes values check and pass over the values it reads,
	// returning nil (see TxnCursor.ChunksWithoutValues), and the changes
	// go into reuse, the changes of the chunk before.
	withoutValues bool
	reuse         []Change
	// mem, with shared, is the memory the chunk is decoded into (see
	// TxnCursor.RecycledChunks): its changes, and its block of values,
	// which slab starts as.
	mem *ChunkMemory
}

// sharedSlabValues is the fewest values a shared decoder allocates at once.
const sharedSlabValues = 1024

func newDecoder(record byte, data []byte) decoder {
	if len(data) < 6 {
		return decoder{err: fmt.Errorf("%w: record of %d bytes is too short", ErrCorrupt, len(data))}
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return decoder{err: fmt.Errorf("%w: checksum mismatch", ErrCorrupt)}
	}
	if body[0] != formatVersion {
		return decoder{err: fmt.Errorf("%w: record format %d, this build reads format %d", ErrUnsupportedFormat, body[0], formatVersion)}
	}
	if body[1] != record {
		return decoder{err: fmt.Errorf("%w: record type %q where %q was expected", ErrCorrupt, body[1], record)}
	}
	return decoder{buf: body[2:]}
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrCorrupt, what)
	}
	d.buf = nil
}

func (d *decoder) uvarint() uint64 {
	if len(d.buf) > 0 && d.buf[0] < 0x80 {
		// One byte, as most counts, lengths and flags take.
		v := uint64(d.buf[0])
		d.buf = d.buf[1:]
		return v
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) byte1() byte {
	if len(d.buf) < 1 {
		d.fail("byte")
		return 0
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	return b
}

// length reads a length and checks that at least min*length bytes remain, so
// a corrupt length never causes a huge allocation.
func (d *decoder) length(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.buf)) || (min > 0 && n*uint64(min) > uint64(len(d.buf))) {
		d.fail("length")
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.length(1)
	if d.err != nil {
		return nil
	}
	if d.shared {
		b := d.buf[:n:n]
		d.buf = d.buf[n:]
		return b
	}
	b := make([]byte, n)
	copy(b, d.buf[:n])
	d.buf = d.buf[n:]
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

// done reports an error if bytes are left over or a read failed.
func (d *decoder) done() error {
	if d.err == nil && len(d.buf) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf))
	}
	return d.err
}

func (e *encoder) value(v *Value) {
	e.byte1(byte(v.Kind))
	switch v.Kind {
	case KindNull, KindUnchanged:
	case KindBool, KindInt16, KindInt32, KindInt64, KindDate, KindTimestamp, KindTime, KindTooLarge:
		e.varint(v.Int)
	case KindFloat32, KindFloat64:
		e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v.Int))
	case KindNumeric, KindString, KindBytes:
		e.bytes(v.Bytes)
	case KindArray:
		e.uvarint(uint64(len(v.Elems)))
		for i := range v.Elems {
			e.value(&v.Elems[i])
		}
	}
}

func (d *decoder) value(v *Value) {
	// The whole value is set: recycled memory holds an earlier one.
	*v = Value{Kind: Kind(d.byte1())}
	switch v.Kind {
	case KindNull, KindUnchanged:
	case KindBool, KindInt16, KindInt32, KindInt64, KindDate, KindTimestamp, KindTime, KindTooLarge:
		v.Int = d.varint()
	case KindFloat32, KindFloat64:
		if len(d.buf) < 8 {
			d.fail("float")
			return
		}
		v.Int = int64(binary.BigEndian.Uint64(d.buf))
		d.buf = d.buf[8:]
	case KindNumeric, KindString, KindBytes:
		v.Bytes = d.bytes()
	case KindArray:
		n := d.length(1)
		if n > 0 {
			v.Elems = make([]Value, n)
			for i := range v.Elems {
				d.value(&v.Elems[i])
			}
		}
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: unknown value kind %d", ErrCorrupt, v.Kind)
		}
		d.buf = nil
	}
}

// skipValue passes over one value, checking it as value does, without
// making it.
func (d *decoder) skipValue() {
	if len(d.buf) == 0 {
		d.fail("value")
		return
	}
	kind := Kind(d.buf[0])
	d.buf = d.buf[1:]
	switch kind {
	case KindNull, KindUnchanged:
	case KindBool, KindInt16, KindInt32, KindInt64, KindDate, KindTimestamp, KindTime, KindTooLarge:
		d.skipVarint()
	case KindFloat32, KindFloat64:
		if len(d.buf) < 8 {
			d.fail("float")
			return
		}
		d.buf = d.buf[8:]
	case KindNumeric, KindString, KindBytes:
		n := d.length(1)
		d.buf = d.buf[n:]
	case KindArray:
		for range d.length(1) {
			d.skipValue()
		}
	default:
		if d.err == nil {
			d.err = fmt.Errorf("%w: unknown value kind %d", ErrCorrupt, kind)
		}
		d.buf = nil
	}
}

// skipVarint passes over a varint, failing where binary.Varint would.
func (d *decoder) skipVarint() {
	for i, b := range d.buf[:min(len(d.buf), binary.MaxVarintLen64)] {
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				break // overflows 64 bits
			}
			d.buf = d.buf[i+1:]
			return
		}
	}
	d.fail("integer")
}

func (e *encoder) values(vs []Value) {
	if vs == nil {
		e.uvarint(0)
		return
	}
	e.uvarint(uint64(len(vs)) + 1)
	for i := range vs {
		e.value(&vs[i])
	}
}

func (d *decoder) values() []Value {
	// The count is the number of values plus one (zero for nil): each
	// value takes at least a byte, the one more counted takes none.
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	if n-1 > uint64(len(d.buf)) {
		d.fail("length")
		return nil
	}
	return d.valueList(int(n) - 1)
}

// valueList reads a list of n values, n checked against the bytes left.
func (d *decoder) valueList(n int) []Value {
	if d.withoutValues {
		for range n {
			d.skipValue()
		}
		return nil
	}
	if n == 0 {
		// An empty tuple (a table without columns) is not a missing
		// one: not nil, which a slice of an empty slab can be.
		return []Value{}
	}
	var vs []Value
	if d.mem != nil {
		if len(d.slab) < n {
			// A block twice the last, which the next chunk decoded
			// into this memory starts from: once a block holds a
			// whole chunk's values, decoding one allocates nothing.
			d.slab = make([]Value, max(n, 2*len(d.mem.values)))
			d.mem.values = d.slab
		}
		vs, d.slab = d.slab[:n:n], d.slab[n:]
	} else if d.shared {
		if len(d.slab) < n {
			// Each allocation doubles the last, up to sharedSlabValues:
			// a chunk of one small change allocates only what it needs.
			d.slabSize = min(max(n, 2*d.slabSize), max(n, sharedSlabValues))
			d.slab = make([]Value, d.slabSize)
		}
		vs, d.slab = d.slab[:n:n], d.slab[n:]
	} else {
		vs = make([]Value, n)
	}
	for i := range vs {
		d.value(&vs[i])
	}
	return vs
}

// chunk appends the framed record of a slice of changes. subXid is the
// subtransaction the changes belong to (only meaningful in the spool; zero
// elsewhere).
func (e *encoder) chunk(subXid uint32, changes []Change) {
	start := e.open(recordChunk)
	e.uvarint(uint64(subXid))
	e.uvarint(uint64(len(changes)))
	for i := range changes {
		c := &changes[i]
		e.byte1(byte(c.Op))
		e.uvarint(uint64(c.Relation.OID))
		e.uvarint(uint64(c.Relation.LSN))
		flags := byte(0)
		if c.OldIsKey {
			flags = 1
		}
		e.byte1(flags)
		e.values(c.New)
		e.values(c.Old)
	}
	e.seal(start)
}

func decodeChunk(data []byte) (subXid uint32, changes []Change, err error) {
	d := newDecoder(recordChunk, data)
	return decodeChunkWith(&d)
}

// decodeRecycledChunk is decodeChunk for a caller that keeps nothing of
// the changes once data may change, into the memory of an earlier chunk,
// mem (see TxnCursor.RecycledChunks).
func decodeRecycledChunk(data []byte, mem *ChunkMemory) (subXid uint32, changes []Change, err error) {
	d := newDecoder(recordChunk, data)
	d.shared, d.mem, d.slab = true, mem, mem.values
	return decodeChunkWith(&d)
}

// decodeChunkWithoutValues is decodeChunk for a caller that needs to know
// what the changes are and touch, not their values (see
// TxnCursor.ChunksWithoutValues), into the changes of an earlier chunk.
func decodeChunkWithoutValues(data []byte, reuse []Change) (subXid uint32, changes []Change, err error) {
	d := newDecoder(recordChunk, data)
	d.withoutValues, d.reuse = true, reuse
	return decodeChunkWith(&d)
}

func decodeChunkWith(d *decoder) (subXid uint32, changes []Change, err error) {
	subXid = uint32(d.uvarint())
	n := d.length(4)
	if d.mem != nil {
		// Every field of each change is set below.
		changes = slices.Grow(d.mem.changes[:0], n)[:n]
		d.mem.changes = changes
	} else if d.withoutValues {
		changes = slices.Grow(d.reuse[:0], n)[:n]
	} else {
		changes = make([]Change, n)
	}
	for i := range changes {
		c := &changes[i]
		c.Op = Op(d.byte1())
		c.Relation.OID = uint32(d.uvarint())
		c.Relation.LSN = LSN(d.uvarint())
		c.OldIsKey = d.byte1() == 1
		c.New = d.values()
		c.Old = d.values()
		if d.err == nil && (c.Op < OpInsert || c.Op > OpSnapshot) {
			d.err = fmt.Errorf("%w: unknown operation %d", ErrCorrupt, c.Op)
		}
	}
	if err := d.done(); err != nil {
		return 0, nil, fmt.Errorf("decode changes: %w", err)
	}
	return subXid, changes, nil
}

func encodeTxnHeader(h *TxnHeader) []byte {
	e := newEncoder(recordTxnHeader, 40)
	e.uvarint(uint64(h.Xid))
	e.uvarint(uint64(h.CommitLSN))
	e.uvarint(uint64(h.EndLSN))
	e.varint(h.CommitTime.UnixMicro())
	// A byte of flags: 1 for Snapshot, 2 for Copied (older records
	// have 0 or 1).
	flags := byte(0)
	if h.Snapshot {
		flags |= 1
	}
	if h.Copied {
		flags |= 2
	}
	e.byte1(flags)
	e.varint(h.Changes)
	return e.finish()
}

func decodeTxnHeader(data []byte) (TxnHeader, error) {
	d := newDecoder(recordTxnHeader, data)
	var h TxnHeader
	h.Xid = uint32(d.uvarint())
	h.CommitLSN = LSN(d.uvarint())
	h.EndLSN = LSN(d.uvarint())
	h.CommitTime = time.UnixMicro(d.varint()).UTC()
	flags := d.byte1()
	h.Snapshot, h.Copied = flags&1 != 0, flags&2 != 0
	h.Changes = d.varint()
	if err := d.done(); err != nil {
		return TxnHeader{}, fmt.Errorf("decode transaction header: %w", err)
	}
	return h, nil
}

func encodeRelation(r *Relation) []byte {
	e := newEncoder(recordRelation, 64+32*len(r.Columns))
	e.uvarint(uint64(r.Key.OID))
	e.uvarint(uint64(r.Key.LSN))
	e.str(r.Schema)
	e.str(r.Name)
	e.byte1(r.ReplicaIdentity)
	e.uvarint(uint64(len(r.Columns)))
	for _, c := range r.Columns {
		e.str(c.Name)
		e.uvarint(uint64(c.TypeOID))
		e.varint(int64(c.TypeMod))
		flags := byte(0)
		if c.Key {
			flags |= 1
		}
		if c.PrimaryKey {
			flags |= 2
		}
		e.byte1(flags)
	}
	e.str(r.Table)
	for _, c := range r.Columns {
		e.uvarint(uint64(c.Dims))
	}
	for _, c := range r.Columns {
		e.uvarint(uint64(c.AttNum))
		if c.HasMissing {
			e.byte1(1)
			e.str(c.Missing)
		} else {
			e.byte1(0)
		}
	}
	e.uvarint(uint64(r.FileNode))
	e.varint(r.ColumnsStamp)
	e.varint(r.KeyStamp)
	return e.finish()
}

func decodeRelation(data []byte) (*Relation, error) {
	d := newDecoder(recordRelation, data)
	r := &Relation{}
	r.Key.OID = uint32(d.uvarint())
	r.Key.LSN = LSN(d.uvarint())
	r.Schema = d.str()
	r.Name = d.str()
	r.ReplicaIdentity = d.byte1()
	n := d.length(4)
	r.Columns = make([]Column, n)
	for i := range r.Columns {
		c := &r.Columns[i]
		c.Name = d.str()
		c.TypeOID = uint32(d.uvarint())
		c.TypeMod = int32(d.varint())
		flags := d.byte1()
		c.Key, c.PrimaryKey = flags&1 != 0, flags&2 != 0
	}
	// Table, then each column's Dims, then each column's AttNum and
	// missing value and the FileNode, then the ColumnsStamp and KeyStamp
	// were added after the first records; older ones end before them.
	if len(d.buf) > 0 {
		r.Table = d.str()
	}
	if len(d.buf) > 0 {
		for i := range r.Columns {
			r.Columns[i].Dims = int(d.uvarint())
		}
	}
	if len(d.buf) > 0 {
		for i := range r.Columns {
			c := &r.Columns[i]
			c.AttNum = int(d.uvarint())
			if d.byte1() == 1 {
				c.HasMissing, c.Missing = true, d.str()
			}
		}
		r.FileNode = uint32(d.uvarint())
	}
	if len(d.buf) > 0 {
		r.ColumnsStamp, r.KeyStamp = d.varint(), d.varint()
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("decode relation: %w", err)
	}
	return r, nil
}

// inlineTxn appends the record of a transaction's header and its only
// chunk as one value: the length of the header record, the header record,
// the chunk record.
func (e *encoder) inlineTxn(hdr []byte, changes []Change) {
	start := e.open(recordInlineTxn)
	e.bytes(hdr)
	e.chunk(0, changes)
	e.seal(start)
}

// decodeInlineTxn splits an inline transaction into its header and chunk
// records, without copying; each is checked again when decoded.
func decodeInlineTxn(data []byte) (hdr, chunk []byte, err error) {
	d := newDecoder(recordInlineTxn, data)
	n := d.length(1)
	if d.err != nil {
		return nil, nil, fmt.Errorf("decode inline transaction: %w", d.err)
	}
	return d.buf[:n], d.buf[n:], nil
}
