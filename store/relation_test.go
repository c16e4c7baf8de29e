package store

import (
	"slices"
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
		ReplicaIdentity: 'd', Columns: []Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true, PrimaryKey: true, AttNum: 1},
			{Name: "grid", TypeOID: 1007, Dims: 2, AttNum: 3}, {Name: "d", TypeOID: 23, AttNum: 4, HasMissing: true, Missing: "7"}}, FileNode: 16390, ColumnsStamp: -1 << 40, KeyStamp: 5}
	got, err := decodeRelation(encodeRelation(r))
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameShape(r) || got.Key != r.Key || got.FileNode != r.FileNode || got.ColumnsStamp != r.ColumnsStamp || got.KeyStamp != r.KeyStamp || got.TableName() != "public.stock" || got.DirName() != "public.stock" {
		t.Fatalf("round trip: %+v", got)
	}
	// A record of the format before ColumnsStamp and KeyStamp: the same,
	// without them (6 bytes and 1).
	data := encodeRelation(r)
	got, err = decodeRelation((&encoder{buf: data[:len(data)-4-6-1]}).finish())
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameShape(r) || got.FileNode != r.FileNode || got.ColumnsStamp != 0 || got.KeyStamp != 0 {
		t.Fatalf("a record without ColumnsStamp: %+v", got)
	}
	old := *r
	old.Table, old.FileNode, old.ColumnsStamp, old.KeyStamp = "", 0, 0, 0
	old.Columns = []Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true, PrimaryKey: true}, {Name: "grid", TypeOID: 1007}}
	data = encodeRelation(&old)
	// A record of the format before Table, Dims, AttNum and missing
	// values, FileNode, ColumnsStamp and KeyStamp: the same, without them
	// (an empty string, three zeros per column and three zeros, a byte
	// each), and checksummed again.
	body := data[:len(data)-4-1-3*len(old.Columns)-3]
	legacy := (&encoder{buf: body}).finish()
	got, err = decodeRelation(legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got.Table != "" || got.TableName() != "public.renamed" || got.DirName() != "public.renamed" || got.Columns[1].Dims != 0 {
		t.Fatalf("a record without Table: %+v", got)
	}
}

// TestKeyColumns checks which columns identify a row: the primary key
// whatever the replica identity, else the identity's columns; a table
// under FULL without a primary key, or without an identity, is a multiset.
func TestKeyColumns(t *testing.T) {
	cols := func(flags ...[2]bool) []Column {
		out := make([]Column, len(flags))
		for i, f := range flags {
			out[i] = Column{Name: string(rune('a' + i)), Key: f[0], PrimaryKey: f[1]}
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		rel      Relation
		key      []int
		multiset bool
	}{
		{"default", Relation{ReplicaIdentity: 'd', Columns: cols([2]bool{true, true}, [2]bool{}, [2]bool{})}, []int{0}, false},
		{"full with a primary key", Relation{ReplicaIdentity: 'f', Columns: cols([2]bool{true, false}, [2]bool{true, true}, [2]bool{true, false})}, []int{1}, false},
		{"full without one", Relation{ReplicaIdentity: 'f', Columns: cols([2]bool{true, false}, [2]bool{true, false})}, []int{0, 1}, true},
		{"index", Relation{ReplicaIdentity: 'i', Columns: cols([2]bool{false, true}, [2]bool{true, false})}, []int{1}, false},
		{"nothing", Relation{ReplicaIdentity: 'n', Columns: cols([2]bool{false, true}, [2]bool{})}, nil, true},
	} {
		var via []int
		tc.rel.KeyOf(func(i int) { via = append(via, i) })
		if got := tc.rel.KeyColumns(); !slices.Equal(got, tc.key) || !slices.Equal(via, tc.key) || tc.rel.Multiset() != tc.multiset {
			t.Errorf("%s: key %v (KeyOf %v), multiset %v; want %v, %v", tc.name, got, via, tc.rel.Multiset(), tc.key, tc.multiset)
		}
	}
}
