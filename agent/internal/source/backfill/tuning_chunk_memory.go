package backfill

import "github.com/lakeside/lakeside/store"

// A backfill decodes each chunk into the memory of a chunk before it: its
// values, the copies of its COPY lines that the values point into, its
// changes and its keys. Once the queue writer has made a chunk durable,
// nothing reads that memory again (Window.Recycle, which package source's
// writer calls as writeOp.recycle), and it goes back to the copy's
// chunkPool. New memory would be cleared, then scanned and collected by
// the garbage collector for every chunk: a chunk's values alone are chunk
// rows times columns times 64 bytes.
//
// A performance trick, measured by BenchmarkBackfillChunkDecode (its fresh
// and recycled cases) and make bench's TestBenchBackfill; switched off by
// Config.Off.ChunkMemory (LAKESIDE_TUNING_OFF=chunkmemory for the agent),
// which decodes every chunk into new memory.

// chunkMemory is the memory one chunk's rows are decoded into.
type chunkMemory struct {
	values []store.Value
	lines  []byte
	rows   []store.Change
	keys   RowKeys
	// valueCount and lineBytes are how many values and bytes of lines
	// the last chunk took: the next chunk's blocks are made that large,
	// so that a chunk like it fits.
	valueCount, lineBytes int
}

// chunkPool holds the memory of a copy's durable chunks, at most
// maxFreeChunks of them. The backfiller takes, the queue writer gives
// back.
type chunkPool struct{ free chan *chunkMemory }

// maxFreeChunks is how many chunks' memory a pool keeps: the chunks of a
// copy follow one another, so that one or two are free at a time, and more
// would only hold memory the garbage collector could return.
const maxFreeChunks = 2

func newChunkPool() *chunkPool {
	return &chunkPool{free: make(chan *chunkMemory, maxFreeChunks)}
}

// get returns the memory of a durable chunk, or new memory.
func (p *chunkPool) get() *chunkMemory {
	select {
	case m := <-p.free:
		return m
	default:
		return new(chunkMemory)
	}
}

// put gives back the memory of a chunk that nothing reads any more; a
// full pool leaves it to the garbage collector.
func (p *chunkPool) put(m *chunkMemory) {
	select {
	case p.free <- m:
	default:
	}
}

// take readies m for a chunk of up to rows rows, and returns the memory
// its values and lines are decoded into (Catalog.Decoder).
func (m *chunkMemory) take(rows int) ([]store.Value, []byte) {
	if cap(m.values) < m.valueCount {
		m.values = make([]store.Value, m.valueCount)
	}
	if cap(m.lines) < m.lineBytes {
		m.lines = make([]byte, 0, m.lineBytes)
	}
	if cap(m.rows) < rows {
		m.rows = make([]store.Change, 0, rows)
	}
	if cap(m.keys.ends) < rows {
		m.keys.ends = make([]int, 0, rows)
	}
	m.rows, m.keys.data, m.keys.ends = m.rows[:0], m.keys.data[:0], m.keys.ends[:0]
	return m.values[:cap(m.values)], m.lines[:0]
}

// keep records in m what the chunk read into it grew to, for the next
// chunk that takes it.
func (m *chunkMemory) keep(c *chunkReader) {
	m.rows, m.keys = c.rows, c.keys
	m.valueCount, m.lineBytes = c.dec.Size()
}

// memory returns the memory the next chunk of the copy is decoded into.
func (b *Backfiller) memory() *chunkMemory {
	if b.chunks == nil {
		return new(chunkMemory)
	}
	return b.chunks.get()
}

// recycler returns what gives mem back to the copy's pool once its chunk
// is durable, or nil when the trick is off.
func (b *Backfiller) recycler(mem *chunkMemory) func() {
	if b.chunks == nil {
		return nil
	}
	pool := b.chunks
	return func() { pool.put(mem) }
}
