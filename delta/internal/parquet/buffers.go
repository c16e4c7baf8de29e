package parquet

import "sync"

// ColumnBuffers lends the column buffers of closed data writers to the next
// writers of the same data columns (WriteOptions.Buffers). A table written
// file after file then fills buffers that already have a row group's room,
// instead of allocating and growing new ones for every file. The columns
// come back emptied, without room grown for values far longer than the
// others (see rowGroupColumns.reset), and it holds at most maxFreeBytes;
// Release drops what it holds: a caller that writes in bursts releases it
// when a burst ends, so that idle buffers do not stay in memory. It is
// safe for concurrent use.
type ColumnBuffers struct {
	mu sync.Mutex
	// free holds the columns of closed writers by data schema (its
	// schemaString).
	free map[string][]*rowGroupColumns
}

// maxFreeRowGroups bounds the columns kept for one schema: what one writer
// uses at most (one row group filling, encodingRowGroups encoding).
const maxFreeRowGroups = encodingRowGroups + 1

// maxFreeBytes bounds the memory of the columns kept for all schemas:
// those of a few tables written at once (the row groups of the orders
// table of make bench, 32768 rows, and of its changelog take 2.2 and 5.2
// MiB).
const maxFreeBytes = 48 << 20

// take returns free columns for schema, or nil.
func (b *ColumnBuffers) take(schema string) *rowGroupColumns {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	free := b.free[schema]
	if len(free) == 0 {
		return nil
	}
	g := free[len(free)-1]
	free[len(free)-1] = nil
	b.free[schema] = free[:len(free)-1]
	return g
}

// give keeps the empty columns gs of a closed writer for schema.
func (b *ColumnBuffers) give(schema string, gs []*rowGroupColumns) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free == nil {
		b.free = map[string][]*rowGroupColumns{}
	}
	held := b.heldBytes()
	for _, g := range gs {
		size := g.capBytes()
		if len(b.free[schema]) == maxFreeRowGroups || held+size > maxFreeBytes {
			return
		}
		g.rg, g.rows = nil, 0
		b.free[schema] = append(b.free[schema], g)
		held += size
	}
}

// Bytes returns the memory of the buffers held.
func (b *ColumnBuffers) Bytes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heldBytes()
}

// heldBytes returns the memory of the columns in free (at most
// maxFreeRowGroups for each schema written).
func (b *ColumnBuffers) heldBytes() int {
	n := 0
	for _, gs := range b.free {
		for _, g := range gs {
			n += g.capBytes()
		}
	}
	return n
}

// Release drops the buffers held.
func (b *ColumnBuffers) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free = nil
}
