package duckdbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
)

// TestTranslatedFilesReadWithDuckDB translates a data file to another
// table's physical names (delta.Translation, a footer rewrite) and reads
// it with DuckDB by those names: the sums and counts are the rows'.
func TestTranslatedFilesReadWithDuckDB(t *testing.T) {
	ctx := context.Background()
	logical := func() *delta.StructType {
		return delta.NewStructType(delta.NewField("id", delta.TypeLong, true), delta.NewField("s", delta.TypeString, true),
			delta.NewField("nested", delta.NewStructType(delta.NewField("a", delta.TypeInteger, true)), true))
	}
	src, _, err := delta.AssignColumnIDs(logical(), 0)
	if err != nil {
		t.Fatal(err)
	}
	dst, _, err := delta.AssignColumnIDs(logical(), 7)
	if err != nil {
		t.Fatal(err)
	}
	var rows []delta.Row
	var sum, strs, as int64
	for i := range 5000 {
		r := delta.Row{int64(i), nil, nil}
		if i%3 > 0 {
			r[1], strs = fmt.Sprint(i), strs+1
		}
		if i%5 > 0 {
			r[2], as = delta.Row{int32(i)}, as+int64(i)
		}
		sum += int64(i)
		rows = append(rows, r)
	}
	dir := t.TempDir()
	add, err := delta.WriteDataFile(ctx, dir, src, nil, nil, rows, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := delta.NewTranslation(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(filepath.Join(dir, add.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outPath := filepath.Join(dir, "translated.parquet")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.File(out, in, add.Size); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	id, _ := dst.Field("id")
	s, _ := dst.Field("s")
	nested, _ := dst.Field("nested")
	a := nested.Type.(*delta.StructType).Fields[0]
	var gotSum, gotStrs, gotAs int64
	q := fmt.Sprintf(`SELECT sum(%s), count(%s), coalesce(sum(struct_extract(%s, %s)), 0) FROM read_parquet(%s)`,
		sqlIdent(id.PhysicalName()), sqlIdent(s.PhysicalName()), sqlIdent(nested.PhysicalName()), sqlString(a.PhysicalName()), sqlString(outPath))
	if err := db.QueryRowContext(ctx, q).Scan(&gotSum, &gotStrs, &gotAs); err != nil {
		t.Fatal(err)
	}
	if gotSum != sum || gotStrs != strs || gotAs != as {
		t.Errorf("DuckDB reads sum %d, %d strings, nested sum %d; want %d, %d, %d", gotSum, gotStrs, gotAs, sum, strs, as)
	}
}
