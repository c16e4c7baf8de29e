package backfill

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// chunkReader receives a chunk's COPY text output and decodes its rows,
// their keys, and the text of the last row's key.
type chunkReader struct {
	rel     *store.Relation
	dec     Decoder
	keyPos  []int
	partial []byte
	texts   [][]byte
	rows    []store.Change
	keys    RowKeys
	last    [][]byte
	// maxBytes, when set, is the memory at which the chunk is full: the
	// rows after the one that reaches it are dropped, and counted in
	// dropped (see MaxChunkBytes).
	maxBytes int
	dropped  int
}

// newChunkReader returns a reader of a chunk of up to limit rows (a chunk
// by ctid ranges may hold more) of the schema version rel, which the
// catalog's decoder decodes into mem.
func newChunkReader(cat Catalog, rel *store.Relation, limit int, mem *chunkMemory) *chunkReader {
	values, lines := mem.take(limit)
	return &chunkReader{rel: rel, dec: cat.Decoder(rel, values, lines), texts: make([][]byte, len(rel.Columns)), rows: mem.rows, keys: mem.keys}
}

// lastKey returns the text of the last row's key, in memory of its own:
// the progress keeps it after the chunk's memory is used again.
func (c *chunkReader) lastKey() [][]byte {
	if c.last == nil {
		return nil
	}
	key := make([][]byte, len(c.last))
	for i, text := range c.last {
		key[i] = bytes.Clone(text)
	}
	return key
}

func (c *chunkReader) Write(p []byte) (int, error) {
	if err := EachLine(&c.partial, p, c.row); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *chunkReader) row(line []byte) error {
	if c.maxBytes > 0 && c.memory() >= c.maxBytes {
		c.dropped++
		return nil
	}
	vals, err := c.dec.Decode(line, c.texts)
	if err != nil {
		return err
	}
	c.rows = append(c.rows, store.Change{Op: store.OpSnapshot, Relation: c.rel.Key, New: vals})
	if c.keyPos == nil {
		return nil
	}
	c.last = c.last[:0]
	for _, p := range c.keyPos {
		if c.texts[p] == nil {
			return fmt.Errorf("copy %s: key column %s is null", c.rel.QualifiedName(), c.rel.Columns[p].Name)
		}
		c.last = append(c.last, c.texts[p])
	}
	c.keys.add(func(b []byte) []byte {
		for _, p := range c.keyPos {
			b = typemap.AppendValueKey(b, &vals[p])
		}
		return b
	})
	return nil
}

// memory returns the memory the chunk's rows take: their values, the
// copies of the COPY lines the values point into, their changes and keys.
func (c *chunkReader) memory() int {
	values, lines := c.dec.Size()
	return values*int(unsafe.Sizeof(store.Value{})) + lines + len(c.rows)*int(unsafe.Sizeof(store.Change{})) + len(c.keys.data)
}

// EachLine calls fn with each complete line of COPY output, the partial
// line left by the last call first; the line p ends inside is kept in
// partial for the next. Capture's initial snapshot reads its COPY with it
// too.
func EachLine(partial *[]byte, p []byte, fn func(line []byte) error) error {
	data := p
	if len(*partial) > 0 {
		*partial = append(*partial, p...)
		data = *partial
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if err := fn(data[:i]); err != nil {
			return err
		}
		data = data[i+1:]
	}
	*partial = append((*partial)[:0], data...)
	return nil
}
