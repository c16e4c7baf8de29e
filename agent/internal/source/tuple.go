package source

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/lakeside/lakeside/store"
)

// rowChange is a pgoutput Insert, Update or Delete message, parsed in place.
//
// These three messages are almost all of a busy stream, and pglogrepl's
// parser allocates a struct and a copy for every column of them; measured on
// two cores beside the walsender, that work decided whether capture kept up
// with PostgreSQL. So the agent reads their tuple data itself, from one copy
// of the message, and leaves every other message to pglogrepl. The format is
// PostgreSQL's "Logical Replication Message Formats" (protocol 2).
type rowChange struct {
	op       store.Op
	xid      uint32 // the (sub)transaction, inside a stream block
	relation uint32
	oldKind  byte   // 'K' (key columns) or 'O' (whole old row); 0 for none
	old, new []byte // raw TupleData
}

// parseRowChange parses an 'I', 'U' or 'D' message. data must not be reused
// by the caller: the tuple slices point into it.
func parseRowChange(data []byte, inStream bool) (rowChange, error) {
	var rc rowChange
	switch data[0] {
	case 'I':
		rc.op = store.OpInsert
	case 'U':
		rc.op = store.OpUpdate
	case 'D':
		rc.op = store.OpDelete
	}
	p := data[1:]
	if inStream {
		if len(p) < 4 {
			return rc, errShortMessage
		}
		rc.xid, p = binary.BigEndian.Uint32(p), p[4:]
	}
	if len(p) < 5 {
		return rc, errShortMessage
	}
	rc.relation, p = binary.BigEndian.Uint32(p), p[4:]
	if p[0] == 'K' || p[0] == 'O' {
		rc.oldKind = p[0]
		n, err := tupleLen(p[1:])
		if err != nil {
			return rc, err
		}
		rc.old, p = p[1:1+n], p[1+n:]
	}
	if rc.op == store.OpDelete {
		if rc.old == nil {
			return rc, fmt.Errorf("delete message without an old tuple")
		}
		return rc, nil
	}
	if len(p) < 1 || p[0] != 'N' {
		return rc, fmt.Errorf("%c message without a new tuple", data[0])
	}
	n, err := tupleLen(p[1:])
	if err != nil {
		return rc, err
	}
	rc.new = p[1 : 1+n]
	return rc, nil
}

var errShortMessage = fmt.Errorf("truncated pgoutput message")

// tupleLen returns the length of the TupleData at the start of p.
func tupleLen(p []byte) (int, error) {
	if len(p) < 2 {
		return 0, errShortMessage
	}
	ncols := int(binary.BigEndian.Uint16(p))
	off := 2
	for i := 0; i < ncols; i++ {
		if off >= len(p) {
			return 0, errShortMessage
		}
		kind := p[off]
		off++
		if kind == 't' || kind == 'b' {
			if off+4 > len(p) {
				return 0, errShortMessage
			}
			off += 4 + int(binary.BigEndian.Uint32(p[off:]))
			if off > len(p) {
				return 0, errShortMessage
			}
		}
	}
	return off, nil
}

// decodeTuple decodes raw TupleData (nil gives nil). The values keep
// sub-slices of tuple.
func (rd *relationDecoder) decodeTuple(tuple []byte, slab *valueSlab) ([]store.Value, error) {
	if tuple == nil {
		return nil, nil
	}
	ncols := int(binary.BigEndian.Uint16(tuple))
	if ncols != len(rd.cols) {
		return nil, fmt.Errorf("%s: tuple has %d columns, relation has %d", rd.rel.QualifiedName(), ncols, len(rd.cols))
	}
	vals := slab.take(ncols)
	off := 2
	for i := 0; i < ncols; i++ {
		kind := tuple[off]
		off++
		switch kind {
		case 'n':
		case 'u':
			vals[i].Kind = store.KindUnchanged
		case 't':
			n := int(binary.BigEndian.Uint32(tuple[off:]))
			src := tuple[off+4 : off+4+n : off+4+n]
			off += 4 + n
			if n > rd.maxValue {
				vals[i] = store.Value{Kind: store.KindTooLarge, Int: int64(n)}
				continue
			}
			if err := rd.cols[i](&vals[i], src); err != nil {
				return nil, rd.columnError(i, src, err)
			}
		default:
			return nil, fmt.Errorf("%s.%s: unexpected tuple data kind %q", rd.rel.QualifiedName(), rd.rel.Columns[i].Name, kind)
		}
	}
	return vals, nil
}

// largeMessage is the size from which a row message is decoded from the
// connection's buffer and only the values kept are copied (ownValues),
// rather than copied whole first: a value over the limit is then never
// copied, and a kept one once.
const largeMessage = 1 << 20

// rowChangeOf parses and decodes a row message into a change; captured is
// false, and nothing decoded, for a change of a table passed over.
func (st *stream) rowChangeOf(data []byte) (xid uint32, c store.Change, captured bool, err error) {
	large := len(data) >= largeMessage
	if !large {
		data = bytes.Clone(data)
	}
	rc, err := parseRowChange(data, st.inStream)
	if err != nil {
		return 0, store.Change{}, false, fmt.Errorf("parse pgoutput message: %w", err)
	}
	rd, captured, err := st.relationFor(rc.relation)
	if err != nil || !captured {
		return 0, store.Change{}, false, err
	}
	c = store.Change{Op: rc.op, Relation: rd.rel.Key, OldIsKey: rc.oldKind == 'K'}
	slab := &st.slab
	if large {
		// Values of their own, which the stream's slab would keep
		// until it is used up: a large value goes once its
		// transaction is queued.
		slab = new(valueSlab)
	}
	if c.New, err = rd.decodeTuple(rc.new, slab); err != nil {
		return 0, store.Change{}, false, err
	}
	if c.Old, err = rd.decodeTuple(rc.old, slab); err != nil {
		return 0, store.Change{}, false, err
	}
	if large {
		ownValues(c.New)
		ownValues(c.Old)
	}
	return rc.xid, c, true, nil
}

// ownValues gives the values the bytes they keep of what they were
// decoded from, which the caller reuses, as copies of their own.
func ownValues(vals []store.Value) {
	for i := range vals {
		if vals[i].Bytes != nil {
			vals[i].Bytes = bytes.Clone(vals[i].Bytes)
		}
		ownValues(vals[i].Elems)
	}
}
