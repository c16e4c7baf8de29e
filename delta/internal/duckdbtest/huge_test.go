package duckdbtest

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
)

// TestHugeValuesReadWithDuckDB writes a file of strings and binary values
// of a few megabytes among small ones, in row groups of two rows, and reads
// it with DuckDB's read_parquet: every value reads back, and filters on
// the huge values, which DuckDB checks against the bounds of each row
// group (short ones for huge values), find their rows.
func TestHugeValuesReadWithDuckDB(t *testing.T) {
	ctx := context.Background()
	schema := delta.NewStructType(
		delta.NewField("id", delta.TypeLong, false),
		delta.NewField("s", delta.TypeString, true),
		delta.NewField("b", delta.TypeBinary, true),
	)
	tbl, err := delta.Create(ctx, t.TempDir(), schema, nil, nil, nil, delta.WithCheckpointInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("lorem ipsum dolor sit amet, ", 3<<20/28)
	low, high := "!"+text, "~~"+text
	bin := []byte(text)
	for i := range bin {
		bin[i] ^= byte(i * 7)
	}
	rows := []delta.Row{
		{int64(0), "m", []byte("m")},
		{int64(1), high, bin},
		{int64(2), low, []byte{0xfe, 0xff}},
		{int64(3), nil, nil},
		{int64(4), "a" + high, append([]byte{0xff}, bin...)},
	}
	add, err := snap.WriteFile(ctx, nil, rows, delta.WriteOptions{RowGroupRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	path, err := delta.ResolvePath(tbl.Path(), add.Path)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	from := " FROM read_parquet(" + sqlString(path) + ")"

	rs, err := db.QueryContext(ctx, "SELECT id, md5(s), md5(b), octet_length(b)"+from+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	n := 0
	for ; rs.Next(); n++ {
		var id int64
		var s, b sql.NullString
		var blen sql.NullInt64
		if err := rs.Scan(&id, &s, &b, &blen); err != nil {
			t.Fatal(err)
		}
		want := rows[id]
		if ws, _ := want[1].(string); s.Valid != (want[1] != nil) || s.Valid && s.String != md5Hex([]byte(ws)) {
			t.Errorf("row %d: string of md5 %v, want %d bytes of md5 %s", id, s, len(ws), md5Hex([]byte(ws)))
		}
		if wb, _ := want[2].([]byte); b.Valid != (want[2] != nil) || b.Valid && (b.String != md5Hex(wb) || int(blen.Int64) != len(wb)) {
			t.Errorf("row %d: binary value of %v bytes, md5 %v, want %d bytes of md5 %s", id, blen, b, len(wb), md5Hex(wb))
		}
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(rows) {
		t.Errorf("%d rows, want %d", n, len(rows))
	}

	for _, q := range []struct {
		where string
		arg   any
		want  int64
	}{
		{"s = ?", high, 1},
		{"s = ?", low, 2},
		{"s = ?", "a" + high, 4},
		{"s >= ? AND s < '~~~'", high, 1},
		{"s <= ? AND s > ' '", low, 2},
		{"b = ?", bin, 1},
		{"b = ?", append([]byte{0xff}, bin...), 4},
	} {
		var id int64
		if err := db.QueryRowContext(ctx, "SELECT id"+from+" WHERE "+q.where, q.arg).Scan(&id); err != nil {
			t.Errorf("%s: %v", q.where, err)
		} else if id != q.want {
			t.Errorf("%s: row %d, want %d", q.where, id, q.want)
		}
	}
}

// md5Hex returns the MD5 sum of b in hexadecimal, as DuckDB's md5 does.
func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}
