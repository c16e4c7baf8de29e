package parquet

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestReadBatchesOfAStoredArrowSchemaAndPanics reads a reference
// checkpoint whose footer stores an Arrow schema, which ReadBatches leaves
// out, and checks that a panic of fn, the caller's own, goes on: only
// arrow-go's panics on a corrupt file become errors. The corrupt files
// are the seeds of FuzzReadCheckpoint (delta/testdata/fuzz).
func TestReadBatchesOfAStoredArrowSchemaAndPanics(t *testing.T) {
	src := "../../../testdata/delta-reference/kernel/app-txn-checkpoint/_delta_log/00000000000000000001.checkpoint.parquet"
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), arrowSchemaKey) {
		t.Fatalf("%s stores no Arrow schema", src)
	}
	st := types.NewStructType(types.NewField("protocol", types.NewStructType(
		types.NewField("minReaderVersion", types.TypeInteger, true),
		types.NewField("minWriterVersion", types.TypeInteger, true)), true))
	rows, err := ReadFile(context.Background(), src, st)
	if err != nil || len(rows) == 0 {
		t.Fatalf("read %d rows, %v", len(rows), err)
	}

	defer func() {
		if r := recover(); r != "fn" {
			t.Errorf("fn panicked, ReadBatches recovered %v", r)
		}
	}()
	ReadBatches(context.Background(), src, st, func([]types.Row) error { panic("fn") })
	t.Error("fn's panic did not go on")
}
