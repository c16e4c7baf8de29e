package parquet

import (
	"crypto/rand"
	"testing"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestReadPagesOverReaderDefaults reads back a binary value that snappy
// does not compress and whose page is larger than the 64 MiB the Parquet
// reader accepts by default.
func TestReadPagesOverReaderDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a 70 MiB value is written and read in -short mode")
	}
	st := types.NewStructType(types.NewField("id", types.TypeLong, false), types.NewField("b", types.TypeBinary, true))
	value := make([]byte, 70<<20)
	rand.Read(value)
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]types.Row{{int64(1), value}}); err != nil {
		t.Fatal(err)
	}
	_, got := closeAndRead(t, w, dir, st)
	if len(got) != 1 || string(got[0][1].([]byte)) != string(value) {
		t.Fatal("the value does not read back")
	}
}
