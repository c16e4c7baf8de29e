package store

import "sync"

// ChunkMemory is the memory that TxnCursor.RecycledChunks decodes the
// changes of one chunk into: the changes, and the block of values their
// value slices are carved from. Once its user is done with those changes,
// it goes back to its ChunkPool, and a later chunk is decoded into it.
type ChunkMemory struct {
	changes []Change
	values  []Value
}

// ChunkPool holds the ChunkMemory that chunks are decoded into and that
// their users have handed back. Its zero value is an empty pool; it is safe
// for concurrent use. It holds at most as many as were handed back at once,
// which a caller bounds by how many chunks it keeps in use. (A sync.Pool
// would do but for keeping them: it may drop what it is given, and under
// the race detector drops some on purpose.)
type ChunkPool struct {
	mu   sync.Mutex
	free []*ChunkMemory
}

// Put hands m back for a later chunk. The changes decoded into m must not
// be used after it.
func (p *ChunkPool) Put(m *ChunkMemory) {
	p.mu.Lock()
	p.free = append(p.free, m)
	p.mu.Unlock()
}

// get returns memory handed back before, or new memory.
func (p *ChunkPool) get() *ChunkMemory {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		m := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		return m
	}
	return new(ChunkMemory)
}
