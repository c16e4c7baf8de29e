package parquet

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestColumnBuffersCarryOverFiles writes files one after the other with
// shared column buffers: each file holds exactly its own rows and stats (as
// one written without buffers does), the buffers are lent to the next file
// of the same columns, and a file of other columns does not take them.
func TestColumnBuffersCarryOverFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := allTypesSchema()
	rows := allTypesRows(t)
	reversed := slices.Clone(rows)
	slices.Reverse(reversed)
	key, err := st.SchemaString()
	if err != nil {
		t.Fatal(err)
	}
	var buffers ColumnBuffers
	opts := WriteOptions{RowGroupRows: 3, Buffers: &buffers}
	for i, want := range [][]types.Row{rows, reversed, rows[:1]} {
		add, err := writeDataFile(ctx, dir, st, nil, want, opts)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		rowstest.AssertSameRows(t, "file with shared buffers", got, want)
		alone, err := writeDataFile(ctx, t.TempDir(), st, nil, want, WriteOptions{RowGroupRows: 3})
		if err != nil {
			t.Fatal(err)
		}
		if add.Stats != alone.Stats {
			t.Errorf("file %d: stats %s, written alone %s", i, add.Stats, alone.Stats)
		}
		if len(buffers.free[key]) == 0 {
			t.Fatalf("file %d: no columns given back to the buffers", i)
		}
	}
	held := len(buffers.free[key])
	other := types.NewStructType(types.NewField("id", types.TypeLong, false))
	if _, err := writeDataFile(ctx, dir, other, nil, []types.Row{{int64(1)}}, opts); err != nil {
		t.Fatal(err)
	}
	if len(buffers.free[key]) != held {
		t.Errorf("a file of other columns took the buffers: %d held, then %d", held, len(buffers.free[key]))
	}
	// A writer of the same columns borrows them all while it is open.
	w, err := newDataWriter(dir, st, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(buffers.free[key]); n != 0 {
		t.Errorf("an open writer left %d of %d columns in the buffers", n, held)
	}
	w.Abort()
	buffers.Release()
	if len(buffers.free) != 0 {
		t.Errorf("release kept %d schemas", len(buffers.free))
	}
}

// TestExpectedRowsMakesRoomAtOnce checks that a writer told how many rows
// to expect makes room for them, up to a row group, once its first
// minGrowRows rows are in, where one told nothing doubles its room as rows
// come; the file holds the same rows either way.
func TestExpectedRowsMakesRoomAtOnce(t *testing.T) {
	ctx := context.Background()
	st := types.NewStructType(types.NewField("id", types.TypeLong, false), types.NewField("label", types.TypeString, true))
	const rowGroup, written = 40_000, 30_000
	var rows []types.Row
	for i := range int64(written) {
		label := any(fmt.Sprintf("row %d", i))
		if i%7 == 0 {
			label = nil
		}
		rows = append(rows, types.Row{i, label})
	}
	for _, tc := range []struct {
		expect int64
		// room is the rows the columns have room for once minGrowRows+1
		// rows are in.
		room int
	}{
		{0, 2 * minGrowRows},
		{minGrowRows / 2, 2 * minGrowRows},
		{written, written},
		{10 * rowGroup, rowGroup},
	} {
		dir := t.TempDir()
		w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: rowGroup, ExpectedRows: tc.expect})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(rows[:minGrowRows+1]); err != nil {
			t.Fatal(err)
		}
		g := w.columns.filling
		if g.capRows != tc.room || cap(g.cols[0].ints64) < tc.room || cap(g.cols[1].ends) < tc.room {
			t.Errorf("expecting %d rows, the columns have room for %d rows (%d, %d) after %d, want %d",
				tc.expect, g.capRows, cap(g.cols[0].ints64), cap(g.cols[1].ends), minGrowRows+1, tc.room)
		}
		if err := w.Write(rows[minGrowRows+1:]); err != nil {
			t.Fatal(err)
		}
		add, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil {
			t.Fatal(err)
		}
		rowstest.AssertSameRows(t, fmt.Sprintf("file expecting %d rows", tc.expect), got, rows)
	}
}

// TestColumnBuffersKeepAtMostMaxFreeBytes writes files of one schema after
// the other, each into buffers of its own room: the buffers keep the
// columns of closed writers while they take at most maxFreeBytes, say
// what they hold, and hold nothing once released.
func TestColumnBuffersKeepAtMostMaxFreeBytes(t *testing.T) {
	ctx := context.Background()
	var buffers ColumnBuffers
	const rowGroup = 4096
	// A row of 1 KiB: a row group's columns take about 4 MiB.
	label := strings.Repeat("x", 1024)
	kept := 0
	for i := range 2 * maxFreeBytes / (rowGroup * 1024) {
		st := types.NewStructType(types.NewField(fmt.Sprintf("c%d", i), types.TypeString, false))
		rows := make([]types.Row, 2*rowGroup)
		for r := range rows {
			rows[r] = types.Row{label}
		}
		if _, err := writeDataFile(ctx, t.TempDir(), st, nil, rows, WriteOptions{RowGroupRows: rowGroup, Buffers: &buffers}); err != nil {
			t.Fatal(err)
		}
		held := buffers.Bytes()
		if held > maxFreeBytes {
			t.Fatalf("after %d files the buffers hold %d bytes, at most %d", i+1, held, maxFreeBytes)
		}
		sum := 0
		for _, gs := range buffers.free {
			for _, g := range gs {
				sum += g.capBytes()
			}
		}
		if held != sum {
			t.Fatalf("the buffers say they hold %d bytes, their columns take %d", held, sum)
		}
		kept = max(kept, held)
	}
	if kept < maxFreeBytes/2 {
		t.Errorf("the buffers kept at most %d bytes, a bound of %d", kept, maxFreeBytes)
	}
	buffers.Release()
	if n := buffers.Bytes(); n != 0 || len(buffers.free) != 0 {
		t.Errorf("released buffers hold %d bytes of %d schemas", n, len(buffers.free))
	}
}
