package delta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestTranslateDataFile writes a data file under one table's column
// mapping and translates it to another's: the new file reads the same rows
// under the target's physical names (and none under the source's), its
// data pages are the source's bytes, and its stats are keyed by the
// target's names.
func TestTranslateDataFile(t *testing.T) {
	ctx := context.Background()
	logical := func(extra ...*StructField) *StructType {
		return NewStructType(append(extra,
			NewField("id", TypeLong, true),
			NewField("s", TypeString, true),
			NewField("nested", NewStructType(NewField("a", TypeInteger, true), NewField("b", TypeString, true)), true))...)
	}
	src, _, err := AssignColumnIDs(logical(), 0)
	if err != nil {
		t.Fatal(err)
	}
	dst, _, err := AssignColumnIDs(logical(NewField("_site", TypeString, true)), 0)
	if err != nil {
		t.Fatal(err)
	}
	var rows []Row
	for i := range 300 {
		var nested any = Row{int32(i), fmt.Sprintf("b%d", i)}
		s := any(strings.Repeat("x", i%7))
		if i%10 == 0 {
			nested, s = nil, nil
		}
		rows = append(rows, Row{int64(i), s, nested})
	}
	from, to := t.TempDir(), t.TempDir()
	add, err := WriteDataFile(ctx, from, src, nil, nil, rows, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTranslation(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Identity() {
		t.Fatal("a translation between different physical names says it is the identity")
	}
	in, err := os.Open(filepath.Join(from, add.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	if _, err := tr.File(&out, in, add.Size); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(to, add.Path), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	srcBytes, _ := os.ReadFile(filepath.Join(from, add.Path))
	pages := len(srcBytes) - 8 - int(binary.LittleEndian.Uint32(srcBytes[len(srcBytes)-8:]))
	if !bytes.Equal(srcBytes[:pages], out.Bytes()[:pages]) {
		t.Error("the data pages were not copied as they are")
	}
	got, err := ReadDataFile(ctx, to, &Add{Path: add.Path}, NewStructType(dst.Fields[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Fatalf("translated file reads %d rows, first %v; want %v", len(got), got[:min(3, len(got))], rows[:3])
	}
	old, err := ReadDataFile(ctx, to, &Add{Path: add.Path}, src)
	if err == nil && reflect.DeepEqual(old, rows) {
		t.Error("the translated file still reads under the source's physical names")
	}
	stats, err := tr.Stats(add.Stats)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range src.Fields {
		if strings.Contains(stats, f.PhysicalName()) {
			t.Errorf("translated stats name the source column %s: %s", f.PhysicalName(), stats)
		}
	}
	id, _ := dst.Field("id")
	if !strings.Contains(stats, `"`+id.PhysicalName()+`":299`) {
		t.Errorf("translated stats lack the target's id maximum: %s", stats)
	}
	// A type the target holds differently, or a column it lacks, fails.
	if _, err := NewTranslation(src, NewStructType(dst.Fields[0], dst.Fields[2])); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("translation to a table without a column: %v", err)
	}
	// A cut or foreign file fails with ErrCorruptFile.
	if _, err := tr.File(&bytes.Buffer{}, bytes.NewReader(srcBytes[:len(srcBytes)-3]), int64(len(srcBytes)-3)); !errors.Is(err, ErrCorruptFile) {
		t.Errorf("translating a cut file: %v", err)
	}
}
