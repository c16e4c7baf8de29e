package delta

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
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
	for i, want := range [][]Row{rows, reversed, rows[:1]} {
		add, err := WriteDataFile(ctx, dir, st, nil, nil, want, opts)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		got, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		assertSameRows(t, "file with shared buffers", got, want)
		alone, err := WriteDataFile(ctx, t.TempDir(), st, nil, nil, want, WriteOptions{RowGroupRows: 3})
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
	other := NewStructType(NewField("id", TypeLong, false))
	if _, err := WriteDataFile(ctx, dir, other, nil, nil, []Row{{int64(1)}}, opts); err != nil {
		t.Fatal(err)
	}
	if len(buffers.free[key]) != held {
		t.Errorf("a file of other columns took the buffers: %d held, then %d", held, len(buffers.free[key]))
	}
	// A writer of the same columns borrows them all while it is open.
	w, err := NewDataWriter(dir, st, nil, nil, opts)
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
