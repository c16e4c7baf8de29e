package delta

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// mappedFiles makes a table in name mode with two files: the first written
// with columns id, name and info{a}, the second after name was renamed to
// title and a column extra was added. It returns the latest snapshot, its
// rows as ReadRows reads them, and the local paths of the files.
func mappedFiles(t *testing.T) (*Snapshot, []Row, []string) {
	t.Helper()
	ctx := context.Background()
	schema := NewStructType(
		NewField("id", TypeLong, false),
		NewField("name", TypeString, true),
		NewField("info", NewStructType(NewField("a", TypeLong, true)), true),
	)
	tbl, err := Create(ctx, t.TempDir(), schema, nil, nameMode(), nil, WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add1, err := snap.WriteFile(ctx, nil, []Row{{int64(1), "a", Row{int64(10)}}, {int64(2), nil, nil}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, add1)
	st := cloneStruct(snap.Schema())
	fieldPath(t, st, "name").Name = "title"
	st.Fields = append(st.Fields, NewField("extra", TypeLong, true))
	if st, _, err = AssignColumnIDs(st, snap.Metadata().MaxColumnID()); err != nil {
		t.Fatal(err)
	}
	snap = commitSchema(t, tbl, snap, st)
	add2, err := snap.WriteFile(ctx, nil, []Row{{int64(3), "c", Row{nil}, int64(7)}}, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snap = commitActions(t, tbl, snap, add2)
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "ReadRows", rows, []Row{
		{int64(1), "a", Row{int64(10)}, nil},
		{int64(2), nil, nil, nil},
		{int64(3), "c", Row{nil}, int64(7)},
	})
	var paths []string
	for _, a := range snap.Files() {
		p, err := ResolvePath(tbl.Path(), a.Path)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return snap, rows, paths
}

// TestColumnMappingFilesReadWithArrow reads the data files of a table in name
// mode with arrow-go's Parquet reader alone, finding each column by the
// physical name the log gives it: the rows are those Snapshot.ReadRows
// returns, and every column carries its column id as its Parquet field id.
func TestColumnMappingFilesReadWithArrow(t *testing.T) {
	ctx := context.Background()
	snap, want, paths := mappedFiles(t)
	var got []Row
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := pqarrow.ReadTable(ctx, f, nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		tr := array.NewTableReader(tbl, -1)
		for tr.Next() {
			rec := tr.RecordBatch()
			for i := 0; i < int(rec.NumRows()); i++ {
				row := make(Row, len(snap.Schema().Fields))
				for j, fld := range snap.Schema().Fields {
					idx := rec.Schema().FieldIndices(fld.PhysicalName())
					if len(idx) == 0 {
						continue // added after this file: null
					}
					checkFieldID(t, rec.Schema().Field(idx[0]), fld)
					row[j] = arrowValue(t, rec.Column(idx[0]), i, fld)
				}
				got = append(got, row)
			}
		}
		tr.Release()
		tbl.Release()
	}
	rowstest.AssertSameRows(t, "arrow-go", got, want)
}

// checkFieldID checks that an arrow field read from Parquet has the column id
// of its Delta field as its field id, nested fields too.
func checkFieldID(t *testing.T, af arrow.Field, f *StructField) {
	t.Helper()
	id, ok := af.Metadata.GetValue("PARQUET:field_id")
	if want := strconv.FormatInt(f.ColumnID(), 10); !ok || id != want {
		t.Errorf("column %s (%s): field id %q, want %s", f.PhysicalName(), f.Name, id, want)
	}
	if st, ok := f.Type.(*StructType); ok {
		ast := af.Type.(*arrow.StructType)
		for _, sf := range st.Fields {
			if i, ok := ast.FieldIdx(sf.PhysicalName()); ok {
				checkFieldID(t, ast.Field(i), sf)
			}
		}
	}
}

// arrowValue returns the Go value of row i of an arrow column of the Delta
// field f (long, string or a struct of them).
func arrowValue(t *testing.T, arr arrow.Array, i int, f *StructField) any {
	t.Helper()
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Int64:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Struct:
		st := f.Type.(*StructType)
		r := make(Row, len(st.Fields))
		for j, sf := range st.Fields {
			if k, ok := a.DataType().(*arrow.StructType).FieldIdx(sf.PhysicalName()); ok {
				r[j] = arrowValue(t, a.Field(k), i, sf)
			}
		}
		return r
	}
	t.Fatalf("column %s: arrow type %s", f.Name, arr.DataType())
	return nil
}
