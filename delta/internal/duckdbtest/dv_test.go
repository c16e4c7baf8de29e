package duckdbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/delta/internal/rowstest"
)

// TestDeletionVectorRowsWithDuckDB deletes rows of a data file of many row
// groups with a deletion vector and checks that the rows delta reads are
// those DuckDB reads from the file without the rows whose
// file_row_number the deletion vector holds: the row indexes of deletion
// vectors are positions in the file across row groups, as DuckDB numbers
// them. When DuckDB's delta extension is installed (it is never
// downloaded here), its delta_scan must read the same rows.
func TestDeletionVectorRowsWithDuckDB(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	schema := delta.NewStructType(delta.NewField("id", delta.TypeLong, false), delta.NewField("name", delta.TypeString, true))
	tbl, err := delta.Create(ctx, dir, schema, nil, nil, nil, delta.WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	var rows []delta.Row
	for i := range int64(1000) {
		rows = append(rows, delta.Row{i * 7, fmt.Sprintf("row %d", i)})
	}
	add, err := delta.WriteDataFile(ctx, dir, schema, nil, nil, rows, delta.WriteOptions{RowGroupRows: 64})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proto, md, err := delta.EnableDeletionVectors(snap.Protocol(), snap.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 0, []delta.Action{add, proto, md}); err != nil {
		t.Fatal(err)
	}
	dv := delta.NewDeletionVector()
	for i := uint64(0); i < 1000; i += 13 {
		dv.Add(i)
	}
	dv.Add(63)
	dv.Add(64)
	dv.Add(999)
	descs, err := delta.StoreDeletionVectors(dir, []*delta.DeletionVector{dv}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rm, add2, err := delta.DeletionVectorActions(add, descs[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(ctx, 1, []delta.Action{rm, add2}); err != nil {
		t.Fatal(err)
	}
	latest, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := latest.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}

	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1) // the settings below are per connection
	for _, q := range []string{"SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	path, err := delta.ResolvePath(dir, add.Path)
	if err != nil {
		t.Fatal(err)
	}
	deleted := make([]string, 0, dv.Cardinality())
	for _, r := range dv.Rows() {
		deleted = append(deleted, fmt.Sprint(r))
	}
	want := queryRows(t, db, fmt.Sprintf(`SELECT id, name FROM read_parquet(%s, file_row_number = true)
		WHERE file_row_number NOT IN (%s)`, sqlString(path), strings.Join(deleted, ", ")))
	if len(want) != 1000-int(dv.Cardinality()) {
		t.Fatalf("DuckDB read %d rows", len(want))
	}
	rowstest.AssertSameRows(t, "read_parquet less the deletion vector", got, want)

	var installed bool
	err = db.QueryRowContext(ctx, `SELECT installed FROM duckdb_extensions() WHERE extension_name = 'delta'`).Scan(&installed)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	if !installed {
		t.Log("DuckDB's delta extension is not installed: delta_scan not checked")
		return
	}
	if _, err := db.ExecContext(ctx, "LOAD delta"); err != nil {
		t.Fatal(err)
	}
	rowstest.AssertSameRows(t, "delta_scan", got, queryRows(t, db, fmt.Sprintf("SELECT id, name FROM delta_scan(%s)", sqlString(dir))))
}

// queryRows runs a query of an id (bigint) and a name (text) per row.
func queryRows(t *testing.T, db *sql.DB, q string) []delta.Row {
	t.Helper()
	rs, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []delta.Row
	for rs.Next() {
		var id int64
		var name string
		if err := rs.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		out = append(out, delta.Row{id, name})
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
