package applier

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
)

// TestMirrorAfterRenameAndTypeChangeReadsElsewhere renames a column and
// changes two columns' types, then reads the mirror's data files with
// readers other than delta's: arrow-go's Parquet reader and DuckDB's
// read_parquet, each selecting the columns by the physical names the Delta
// log gives them. Both give PostgreSQL's rows. The mirror is merged
// copy-on-write: the Parquet readers know nothing of deletion vectors.
func TestMirrorAfterRenameAndTypeChangeReadsElsewhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE t (id int4 PRIMARY KEY, c text, n int4, m int4);
		INSERT INTO t SELECT g, 'c' || g, g, g * 2 FROM generate_series(1, 300) g;`, "t")
	a := h.applier(func(c *Config) { c.DeletionVectors = false })
	h.apply(a)
	h.exec(`ALTER TABLE t RENAME COLUMN c TO label`,
		`ALTER TABLE t ALTER COLUMN n TYPE bigint, ALTER COLUMN m TYPE text`,
		`UPDATE t SET n = n * 10000000000, m = 'm' || m WHERE id % 7 = 0`,
		`INSERT INTO t VALUES (1000, 'new', 1, 'x')`)
	h.apply(a)
	h.checkMirror("t")
	want := h.pgRows("t")
	snap := h.snapshot("public.t")
	var fields []*delta.StructField
	for _, f := range snap.Schema().Fields {
		if f.Name != colDeleted {
			fields = append(fields, f)
		}
	}
	if len(fields) != 4 || fields[1].Name != "label" || fields[1].PhysicalName() == "label" {
		t.Fatalf("mirror fields %v: want id, label (under another physical name), n, m", snap.Schema())
	}
	var paths []string
	for _, add := range snap.Files() {
		p, err := delta.ResolvePath(h.tablesDir+"/public.t", add.Path)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	h.compare("arrow-go", want, readWithArrow(t, paths, fields))
	h.compare("DuckDB", want, readWithDuckDB(t, paths, fields))
}

// readWithArrow reads the columns fields name (by physical name) of the
// files with arrow-go and returns each row as its values' text, joined as
// harness.pgRows joins them, sorted.
func readWithArrow(t *testing.T, paths []string, fields []*delta.StructField) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := file.NewParquetReader(f)
		if err != nil {
			t.Fatal(err)
		}
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := fr.ReadTable(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		cols := make([]int, len(fields))
		for i, fd := range fields {
			idx := tbl.Schema().FieldIndices(fd.PhysicalName())
			if len(idx) != 1 {
				t.Fatalf("%s: no column %s (%s)", p, fd.PhysicalName(), fd.Name)
			}
			cols[i] = idx[0]
		}
		rows := make([][]string, tbl.NumRows())
		for i, c := range cols {
			var r int
			for _, chunk := range tbl.Column(c).Data().Chunks() {
				for j := 0; j < chunk.Len(); j++ {
					if rows[r] == nil {
						rows[r] = make([]string, len(cols))
					}
					rows[r][i] = arrowText(chunk, j)
					r++
				}
			}
		}
		for _, r := range rows {
			out = append(out, strings.Join(r, " ‖ "))
		}
		tbl.Release()
		pr.Close()
	}
	slices.Sort(out)
	return out
}

// arrowText returns the text of value j of an arrow array of the types the
// test's columns have.
func arrowText(a interface{ IsNull(int) bool }, j int) string {
	if a.IsNull(j) {
		return "NULL"
	}
	switch x := a.(type) {
	case *array.Int32:
		return fmt.Sprint(x.Value(j))
	case *array.Int64:
		return fmt.Sprint(x.Value(j))
	case *array.String:
		return x.Value(j)
	case *array.Binary:
		return string(x.Value(j))
	}
	return fmt.Sprintf("%T", a)
}

// readWithDuckDB reads the columns fields name (by physical name) of the
// files with DuckDB's read_parquet and returns the rows as readWithArrow
// does.
func readWithDuckDB(t *testing.T, paths []string, fields []*delta.StructField) []string {
	t.Helper()
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	quote := func(s, q string) string { return q + strings.ReplaceAll(s, q, q+q) + q }
	exprs := make([]string, len(fields))
	for i, f := range fields {
		exprs[i] = fmt.Sprintf("coalesce(CAST(%s AS VARCHAR), 'NULL')", quote(f.PhysicalName(), `"`))
	}
	files := make([]string, len(paths))
	for i, p := range paths {
		files[i] = quote(p, `'`)
	}
	rs, err := db.Query(fmt.Sprintf(`SELECT %s FROM read_parquet([%s], union_by_name = true)`,
		strings.Join(exprs, " || ' ‖ ' || "), strings.Join(files, ", ")))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var s string
		if err := rs.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
