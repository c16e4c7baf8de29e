package store

// valueArena holds the encoded values of one write transaction. bbolt keeps
// a value given to Put, not a copy, until the transaction ends; the queue's
// values are large (a chunk of changes is about 100 bytes a change), and
// allocating each anew, and growing it while encoding, made most of what
// capture allocated for copied rows. A value is encoded into scratch, which
// is kept from one value to the next, and then copied into a block of the
// arena, whose blocks the next write transaction fills again.
//
// A DB has one arena: write transactions take turns (bbolt's writer lock),
// and each resets the arena when it begins.
type valueArena struct {
	scratch []byte
	blocks  [][]byte
	// cur is the block being filled.
	cur int
}

// arenaBlockSize is the size of an arena's blocks; a larger value takes a
// block of its own size.
const arenaBlockSize = 1 << 20

// maxArenaBytes bounds the memory an arena keeps between write
// transactions: blocks beyond it, filled by a larger transaction, are let
// go when the next one begins.
const maxArenaBytes = 16 << 20

// reset makes the arena's memory free for a new write transaction, whose
// values are not those of the last one.
func (a *valueArena) reset() {
	kept := 0
	for i, b := range a.blocks {
		if kept+cap(b) > maxArenaBytes {
			clear(a.blocks[i:])
			a.blocks = a.blocks[:i]
			break
		}
		kept += cap(b)
		a.blocks[i] = b[:0]
	}
	a.cur = 0
	if cap(a.scratch) > maxArenaBytes {
		a.scratch = nil
	}
}

// keep returns a copy of data in the arena, valid until the arena is
// reset, and keeps data's memory as the scratch buffer when it is larger.
func (a *valueArena) keep(data []byte) []byte {
	if cap(data) > cap(a.scratch) {
		a.scratch = data[:0]
	}
	for ; a.cur < len(a.blocks); a.cur++ {
		if b := a.blocks[a.cur]; cap(b)-len(b) >= len(data) {
			n := len(b)
			b = append(b, data...)
			a.blocks[a.cur] = b
			return b[n:len(b):len(b)]
		}
	}
	b := make([]byte, len(data), max(arenaBlockSize, len(data)))
	copy(b, data)
	a.blocks = append(a.blocks, b)
	a.cur = len(a.blocks) - 1
	return b[:len(data):len(data)]
}

// encoder returns an empty encoder of a value the transaction puts, which
// keep then makes the value's memory.
func (w *Writer) encoder() *encoder {
	return &encoder{buf: w.arena.scratch[:0]}
}

// keep returns the encoded value e holds, in memory that lasts until the
// transaction ends.
func (w *Writer) keep(e *encoder) []byte {
	return w.arena.keep(e.buf)
}
