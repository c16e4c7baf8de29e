// Package duckdbtest reads the tables delta writes with DuckDB. It is a
// package of its own, tests only, so that linking DuckDB does not slow the
// build of delta's own tests.
package duckdbtest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// TestColumnMappingFilesReadWithDuckDB reads the data files of a table in
// column mapping mode name with DuckDB's read_parquet, selecting each column
// by the physical name the log gives it: the rows are those
// Snapshot.ReadRows returns, though a column was renamed between the two
// files, and the column added after the first file reads as null in it.
func TestColumnMappingFilesReadWithDuckDB(t *testing.T) {
	ctx := context.Background()
	snap, want, paths := mappedFiles(t)
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()

	st := snap.Schema()
	phys := func(name string) string {
		f, _ := st.Field(name)
		if f == nil {
			t.Fatalf("no field %q", name)
		}
		return f.PhysicalName()
	}
	info, _ := st.Field("info")
	inner := info.Type.(*delta.StructType).Fields[0].PhysicalName()
	files := make([]string, len(paths))
	for i, p := range paths {
		files[i] = sqlString(p)
	}
	q := fmt.Sprintf(`SELECT %s, %s, %s IS NULL, struct_extract(%s, %s), %s
		FROM read_parquet([%s], union_by_name = true)`,
		sqlIdent(phys("id")), sqlIdent(phys("title")), sqlIdent(phys("info")), sqlIdent(phys("info")),
		sqlString(inner), sqlIdent(phys("extra")), strings.Join(files, ", "))
	rs, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var got []delta.Row
	for rs.Next() {
		var id int64
		var title sql.NullString
		var infoNull bool
		var a, extra sql.NullInt64
		if err := rs.Scan(&id, &title, &infoNull, &a, &extra); err != nil {
			t.Fatal(err)
		}
		row := delta.Row{id, nil, nil, nil}
		if title.Valid {
			row[1] = title.String
		}
		if !infoNull {
			r := delta.Row{nil}
			if a.Valid {
				r[0] = a.Int64
			}
			row[2] = r
		}
		if extra.Valid {
			row[3] = extra.Int64
		}
		got = append(got, row)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "duckdb", got, want)
}

// mappedFiles makes a table in name mode with two files: the first written
// with columns id, name and info{a}, the second after name was renamed to
// title and a column extra was added. It returns the latest snapshot, its
// rows as ReadRows reads them, and the local paths of the files.
func mappedFiles(t *testing.T) (*delta.Snapshot, []delta.Row, []string) {
	t.Helper()
	ctx := context.Background()
	schema := delta.NewStructType(
		delta.NewField("id", delta.TypeLong, false),
		delta.NewField("name", delta.TypeString, true),
		delta.NewField("info", delta.NewStructType(delta.NewField("a", delta.TypeLong, true)), true),
	)
	conf := map[string]string{delta.ColumnMappingModeKey: delta.ColumnMappingName}
	tbl, err := delta.Create(ctx, t.TempDir(), schema, nil, conf, nil, delta.WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(acts ...delta.Action) {
		t.Helper()
		v, err := tbl.Commit(ctx, snap.Version(), acts)
		if err != nil {
			t.Fatal(err)
		}
		if snap, err = tbl.SnapshotAt(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	add1, err := snap.WriteFile(ctx, nil, []delta.Row{{int64(1), "a", delta.Row{int64(10)}}, {int64(2), nil, nil}}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(add1)

	st := &delta.StructType{Fields: append([]*delta.StructField(nil), snap.Schema().Fields...)}
	renamed := *st.Fields[1]
	renamed.Name = "title"
	st.Fields[1] = &renamed
	st.Fields = append(st.Fields, delta.NewField("extra", delta.TypeLong, true))
	st, _, err = delta.AssignColumnIDs(st, snap.Metadata().MaxColumnID())
	if err != nil {
		t.Fatal(err)
	}
	md, err := snap.Metadata().WithSchema(st)
	if err != nil {
		t.Fatal(err)
	}
	commit(md)

	add2, err := snap.WriteFile(ctx, nil, []delta.Row{{int64(3), "c", delta.Row{nil}, int64(7)}}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	commit(add2)
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "ReadRows", rows, []delta.Row{
		{int64(1), "a", delta.Row{int64(10)}, nil},
		{int64(2), nil, nil, nil},
		{int64(3), "c", delta.Row{nil}, int64(7)},
	})
	var paths []string
	for _, a := range snap.Files() {
		p, err := delta.ResolvePath(tbl.Path(), a.Path)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return snap, rows, paths
}

// sqlIdent quotes an identifier for DuckDB.
func sqlIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// sqlString quotes a string literal for DuckDB.
func sqlString(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }
