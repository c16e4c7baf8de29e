package store

import (
	"strings"
	"testing"
)

// TestTableDirNameIsSafeAndDistinct derives the directory names of tables
// whose names a hostile or careless table owner can choose: none leaves
// the tables directory, none is hidden, none is too long, plain names keep
// their text, and no two tables (nor a mirror and a changelog) share one.
func TestTableDirNameIsSafeAndDistinct(t *testing.T) {
	long := strings.Repeat("/", 63)
	tables := [][2]string{
		{"public", "stock"}, {"public", "Stock"}, {"public", "../../../pwned"}, {"public", "/../public.stock"},
		{"public", "a.b"}, {"public.a", "b"}, {"public", "a%2Eb"}, {"public", `"quoted"`}, {"public", "it's"},
		{"public", ".."}, {"public", "."}, {"..", "x"}, {"_hidden", "x"}, {".dot", "x"}, {"public", "_x"},
		{"public", "stock_changes"}, {"public", "stock_changes_changes"}, {"public", "grüße 世界"},
		{"public", "tab\there"}, {"public", "new\nline"}, {"public", long}, {long, long}, {long, long[1:]},
		{"public", "x~0123456789abcdef"}, {"public", "space name"},
	}
	if got := TableDirName("public", "stock"); got != "public.stock" {
		t.Errorf("public.stock: directory %q", got)
	}
	if got := TableDirName("public", "grüße 世界"); got != "public.grüße%20世界" {
		t.Errorf("a unicode name: directory %q", got)
	}
	seen := map[string][2]string{}
	for _, tb := range tables {
		mirror := TableDirName(tb[0], tb[1])
		for _, dir := range []string{mirror, mirror + ChangelogSuffix} {
			switch {
			case strings.ContainsAny(dir, "/\\\x00"), dir == "." || dir == "..",
				strings.HasPrefix(dir, ".") || strings.HasPrefix(dir, "_"), len(dir) > 255:
				t.Errorf("%q.%q: unsafe directory name %q", tb[0], tb[1], dir)
			}
			if other, ok := seen[dir]; ok {
				t.Errorf("%q.%q and %q.%q share the directory %q", tb[0], tb[1], other[0], other[1], dir)
			}
			seen[dir] = tb
		}
		if strings.HasSuffix(mirror, ChangelogSuffix) {
			t.Errorf("%q.%q: mirror directory %q is named like a changelog", tb[0], tb[1], mirror)
		}
	}
}

// TestRelationRoundTrip encodes a schema version with the configured table
// it is captured as, and decodes a record written before that was kept.
func TestRelationRoundTrip(t *testing.T) {
	r := &Relation{Key: RelationKey{OID: 16384, LSN: 99}, Schema: "public", Name: "renamed", Table: "public.stock",
		ReplicaIdentity: 'd', Columns: []Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}}}
	got, err := decodeRelation(encodeRelation(r))
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameShape(r) || got.Key != r.Key || got.TableName() != "public.stock" || got.DirName() != "public.stock" {
		t.Fatalf("round trip: %+v", got)
	}
	old := *r
	old.Table = ""
	data := encodeRelation(&old)
	// A record of the format before Table: the same, without the last
	// field (an empty string, one byte), checksummed again.
	body := data[:len(data)-5]
	legacy := (&encoder{buf: body}).finish()
	got, err = decodeRelation(legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got.Table != "" || got.TableName() != "public.renamed" || got.DirName() != "public.renamed" {
		t.Fatalf("a record without Table: %+v", got)
	}
}
