package source

import (
	"fmt"
	"testing"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// BenchmarkBackfillChunkDecode decodes a backfill chunk of 16384 rows of
// COPY text (the columns of the orders table of the end-to-end benches),
// as chunkReader receives them from PostgreSQL: into new memory for each
// chunk (fresh), and into the memory of the chunk before it, as a backfill
// does once that chunk is durable (recycled, tuning_chunk_memory.go).
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
	rd := newRelationDecoder(typemap.New(), rel, DefaultMaxValueBytes)
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
				cr := newChunkReader(rd, rows, mem)
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

// TestDecodeCopyRowUnescapes decodes lines of COPY text whose fields hold
// COPY's escapes, in some fields of a line or in none: each field is its
// value unescaped, whatever the others hold.
func TestDecodeCopyRowUnescapes(t *testing.T) {
	rd := newRelationDecoder(typemap.New(), codeRelation(), DefaultMaxValueBytes)
	var slab valueSlab
	var lines byteSlab
	for _, c := range []struct {
		line       string
		code, note string
	}{
		{`plain	1	text`, "plain", "text"},
		{`tab\there	2	plain`, "tab\there", "plain"},
		{`plain	3	back\\slash\nnewline`, "plain", "back\\slash\nnewline"},
		{`\x41\101	4	\N`, "AA", ""},
		{`a\\b	5	\\N`, `a\b`, `\N`},
	} {
		vals, err := rd.decodeCopyRow([]byte(c.line), &slab, &lines, nil)
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		if got := string(vals[0].Bytes); got != c.code {
			t.Errorf("%q: code = %q, want %q", c.line, got, c.code)
		}
		if got := string(vals[2].Bytes); got != c.note {
			t.Errorf("%q: note = %q, want %q", c.line, got, c.note)
		}
	}
}
