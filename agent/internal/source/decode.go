package source

import (
	"fmt"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// relationDecoder decodes the tuples of one schema version of a table.
type relationDecoder struct {
	rel  *store.Relation
	cols []typemap.DecodeFunc
	// maxValue is the largest value kept: a larger one is decoded as
	// store.KindTooLarge.
	maxValue int
}

// newRelationDecoder returns the decoder of schema version rel, with the
// decoders types gives its columns, keeping values of up to maxValue
// bytes.
func newRelationDecoder(types *typemap.Map, rel *store.Relation, maxValue int) *relationDecoder {
	rd := &relationDecoder{rel: rel, cols: make([]typemap.DecodeFunc, len(rel.Columns)), maxValue: maxValue}
	for i, c := range rel.Columns {
		rd.cols[i] = types.Decoder(c)
	}
	return rd
}

// valueSlab hands out value slices carved from larger allocations: one
// allocation serves thousands of rows instead of one per row. size counts
// the values it handed out.
type valueSlab struct {
	buf  []store.Value
	size int
}

// byteSlab hands out copies of byte slices carved from larger
// allocations, for rows read whole (COPY lines) whose values may keep what
// they are decoded from. size counts the bytes it handed out.
type byteSlab struct {
	buf  []byte
	size int
}

// byteSlabSize is the size of a byteSlab's allocations.
const byteSlabSize = 64 << 10

// clone returns a copy of b.
func (s *byteSlab) clone(b []byte) []byte {
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, max(byteSlabSize, len(b)))
	}
	n := len(s.buf)
	s.buf = append(s.buf, b...)
	s.size += len(b)
	return s.buf[n:len(s.buf):len(s.buf)]
}

func (s *valueSlab) take(n int) []store.Value {
	if len(s.buf) < n {
		s.buf = make([]store.Value, max(n, 4096))
	}
	v := s.buf[:n:n]
	s.buf = s.buf[n:]
	s.size += n
	return v
}

func (rd *relationDecoder) columnError(i int, src []byte, err error) error {
	const max = 64
	s := string(src)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Errorf("decode %s.%s (type oid %d) from %q: %w", rd.rel.QualifiedName(), rd.rel.Columns[i].Name, rd.rel.Columns[i].TypeOID, s, err)
}
