package backfill

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// TestChunkOfWideRowsEndsAtItsBytes decodes a chunk of wide rows paged by
// key: the row that brings its memory to the bound is its last, the rows
// after it are dropped and counted, and the last key is that row's.
func TestChunkOfWideRowsEndsAtItsBytes(t *testing.T) {
	rel := &store.Relation{Key: store.RelationKey{OID: 1}, Schema: "public", Name: "t", Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
		{Name: "doc", TypeOID: 25, TypeMod: -1},
	}}
	cr := newChunkReader(newTextCatalog(), rel, 100, new(chunkMemory))
	cr.keyPos, cr.maxBytes = []int{0}, 1<<20
	doc := strings.Repeat("y", 100_000)
	for i := range 100 {
		if _, err := cr.Write(fmt.Appendf(nil, "%d\t%s\n", i, doc)); err != nil {
			t.Fatal(err)
		}
	}
	kept := len(cr.rows)
	if kept != 11 || cr.dropped != 100-kept {
		t.Fatalf("%d rows kept and %d dropped, want 11 (1 MiB of 100 kB rows) and %d", kept, cr.dropped, 100-11)
	}
	if cr.memory() < 1<<20 || cr.memory() > 1<<20+len(doc)+1024 {
		t.Errorf("the chunk takes %d bytes, want 1 MiB and at most one row more", cr.memory())
	}
	if last := string(cr.lastKey()[0]); last != "10" {
		t.Errorf("the last key is %s, want 10", last)
	}
}

// BenchmarkBackfillChunkDecode decodes a backfill chunk of 16384 rows of
// COPY text (the columns of the orders table of the end-to-end benches),
// as chunkReader receives them from PostgreSQL: into new memory for each
// chunk (fresh), and into the memory of the chunk before it, as a backfill
// does once that chunk is durable (recycled, tuning_chunk_memory.go). The
// rows are decoded by textDecoder, whose memory is that of package
// source's decoder.
func BenchmarkBackfillChunkDecode(b *testing.B) {
	const rows = 16384
	rel := &store.Relation{Key: store.RelationKey{OID: 1}, Schema: "public", Name: "orders", Columns: []store.Column{
		{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
		{Name: "label", TypeOID: 25, TypeMod: -1},
		{Name: "amount", TypeOID: 1700, TypeMod: 12<<16 | 2 + 4},
		{Name: "placed_at", TypeOID: 1184, TypeMod: -1},
		{Name: "paid", TypeOID: 16, TypeMod: -1},
		{Name: "qty", TypeOID: 23, TypeMod: -1},
	}}
	var text []byte
	for i := range rows {
		text = fmt.Appendf(text, "%d\t%032x\t%d.%02d\t2026-01-01 %02d:%02d:%02d+00\t%c\t%d\n",
			i, i*7919, i/100, i%100, i/3600%24, i/60%60, i%60, "tf"[i%2], i%1000)
	}
	cat := newTextCatalog()
	for _, recycled := range []bool{false, true} {
		name := "fresh"
		if recycled {
			name = "recycled"
		}
		b.Run(name, func(b *testing.B) {
			pool := newChunkPool()
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				mem := new(chunkMemory)
				if recycled {
					mem = pool.get()
				}
				cr := newChunkReader(cat, rel, rows, mem)
				cr.keyPos = []int{0}
				// As the rows arrive: a CopyData message each.
				for line := range splitLines(text) {
					if _, err := cr.Write(line); err != nil {
						b.Fatal(err)
					}
				}
				if len(cr.rows) != rows {
					b.Fatalf("%d rows decoded, want %d", len(cr.rows), rows)
				}
				mem.keep(cr)
				if recycled {
					pool.put(mem)
				}
			}
		})
	}
}

// splitLines yields each line of text with its newline.
func splitLines(text []byte) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(text) > 0 {
			i := 0
			for text[i] != '\n' {
				i++
			}
			if !yield(text[:i+1]) {
				return
			}
			text = text[i+1:]
		}
	}
}

// codeRelation is a table public.t of a text key, code, a long, n, and a
// text, note.
func codeRelation() *store.Relation {
	return &store.Relation{Key: store.RelationKey{OID: 1}, Schema: "public", Name: "t", Columns: []store.Column{
		{Name: "code", TypeOID: 25, TypeMod: -1, Key: true},
		{Name: "n", TypeOID: 20, TypeMod: -1},
		{Name: "note", TypeOID: 25, TypeMod: -1},
	}}
}

// textCatalog is a Catalog whose decoders are textDecoders; it describes
// no table.
type textCatalog struct {
	Catalog
	types *typemap.Map
}

func newTextCatalog() textCatalog { return textCatalog{types: typemap.New()} }

func (c textCatalog) Decoder(rel *store.Relation, values []store.Value, lines []byte) Decoder {
	d := &textDecoder{values: values, lines: lines}
	for _, col := range rel.Columns {
		d.cols = append(d.cols, c.types.Decoder(col))
	}
	return d
}

// textDecoder decodes lines of COPY text into memory as package source's
// decoder does: a copy of each line, which the values may point into, in
// lines, and the values in values, both made anew (64 kB of lines, 4096
// values at least) once used up. Its fields hold no COPY escapes but \N,
// a NULL.
type textDecoder struct {
	cols                []typemap.DecodeFunc
	values              []store.Value
	lines               []byte
	valueCount, lineLen int
}

func (d *textDecoder) Decode(line []byte, texts [][]byte) ([]store.Value, error) {
	if cap(d.lines)-len(d.lines) < len(line) {
		d.lines = make([]byte, 0, max(64<<10, len(line)))
	}
	n := len(d.lines)
	d.lines = append(d.lines, line...)
	line = d.lines[n:len(d.lines):len(d.lines)]
	d.lineLen += len(line)
	ncols := len(d.cols)
	if len(d.values) < ncols {
		d.values = make([]store.Value, max(ncols, 4096))
	}
	vals := d.values[:ncols:ncols]
	d.values = d.values[ncols:]
	d.valueCount += ncols
	for i := range ncols {
		field := line
		if j := bytes.IndexByte(line, '\t'); j >= 0 {
			field, line = line[:j], line[j+1:]
		} else if i != ncols-1 {
			return nil, fmt.Errorf("row with %d columns, want %d", i+1, ncols)
		}
		text := field
		if string(field) == `\N` {
			text, vals[i] = nil, store.Value{}
		}
		if texts != nil {
			texts[i] = text
		}
		if text == nil {
			continue
		}
		if err := d.cols[i](&vals[i], field); err != nil {
			return nil, err
		}
	}
	return vals, nil
}

func (d *textDecoder) Size() (values, lineBytes int) { return d.valueCount, d.lineLen }
