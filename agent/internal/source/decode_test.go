package source

import (
	"testing"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

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
