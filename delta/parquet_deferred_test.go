package delta

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeferredColumns checks that a file whose constant columns are given
// at CloseWith, after its row groups were encoded (Seal), holds the rows
// and stats of a file written with those values in every row, in the
// directory of the partition value given then.
func TestDeferredColumns(t *testing.T) {
	ctx := context.Background()
	st := NewStructType(
		NewField("id", TypeLong, false),
		NewField("s", TypeString, true),
		NewField("lsn", TypeLong, false),
		NewField("ts", TypeTimestamp, false),
		NewField("tags", &ArrayType{ElementType: TypeString, ContainsNull: true}, true),
		NewField("day", TypeDate, true))
	ts := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	day := DateFromDays(DaysSinceEpoch(ts))
	const n = 2500
	var rows, want []Row
	for i := range n {
		var s any
		if i%7 != 0 {
			s = strings.Repeat("v", i%13)
		}
		var tags any
		if i%3 == 0 {
			tags = []any{"a", s}
		}
		rows = append(rows, Row{int64(n - i), s, nil, nil, tags, nil})
		want = append(want, Row{int64(n - i), s, int64(9000), ts, tags, day})
	}
	dir := t.TempDir()
	w, err := NewDataWriter(dir, st, []string{"day"}, nil,
		WriteOptions{RowGroupRows: 1000, Deferred: []string{"lsn", "ts", "day"}, Buffers: &ColumnBuffers{}, Yield: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(w.Path(), "/") {
		t.Errorf("a file with a deferred partition starts in %s, want the table root", w.Path())
	}
	if err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows[:1]); err == nil {
		t.Error("a write after Seal succeeded")
	}
	// The encoded row groups wait in memory, and say how much they hold.
	for deadline := time.Now().Add(10 * time.Second); w.HeldBytes() < 1000 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if held := w.HeldBytes(); held < 1000 {
		t.Errorf("sealed writer holds %d bytes", held)
	}
	add, err := w.CloseWith(map[string]any{"lsn": int64(9000), "ts": ts, "day": day})
	if err != nil {
		t.Fatal(err)
	}
	if held := w.HeldBytes(); held != 0 {
		t.Errorf("closed writer holds %d bytes", held)
	}
	if wantDir := "day=2026-03-29/"; !strings.HasPrefix(add.Path, wantDir) {
		t.Errorf("path %s, want it in %s", add.Path, wantDir)
	}
	if got := add.PartitionValues["day"]; got == nil || *got != "2026-03-29" {
		t.Errorf("partition value %v", got)
	}
	got, err := ReadParquetFile(ctx, filepath.Join(dir, add.Path), st)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		r[5] = day // partition values are not in the file
	}
	assertSameRowsInOrder(t, "deferred", got, normalizedRows(t, st, want))

	// The stats equal those of the same rows written whole.
	ref, err := WriteDataFile(ctx, t.TempDir(), st, []string{"day"}, map[string]any{"day": day}, want, WriteOptions{RowGroupRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if add.Stats != ref.Stats {
		t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref.Stats)
	}
}

// TestDeferredColumnsRefused checks the errors of deferred columns: a
// nested one, Close without the values, a missing or bad value; each
// failed close removes the file.
func TestDeferredColumnsRefused(t *testing.T) {
	st := NewStructType(NewField("id", TypeLong, false), NewField("lsn", TypeLong, false),
		NewField("tags", &ArrayType{ElementType: TypeString}, true))
	dir := t.TempDir()
	if _, err := NewDataWriter(dir, st, nil, nil, WriteOptions{Deferred: []string{"tags"}}); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("deferred nested column: %v", err)
	}
	if _, err := NewDataWriter(dir, st, nil, nil, WriteOptions{Deferred: []string{"nope"}}); !errors.Is(err, ErrInvalidSchema) {
		t.Errorf("deferred unknown column: %v", err)
	}
	for name, values := range map[string]map[string]any{
		"Close":         nil,
		"missing value": {"other": int64(1)},
		"null value":    {"lsn": nil},
		"bad value":     {"lsn": "x"},
	} {
		w, err := NewDataWriter(dir, st, nil, nil, WriteOptions{Deferred: []string{"lsn"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write([]Row{{int64(1), nil, nil}}); err != nil {
			t.Fatal(err)
		}
		if name == "Close" {
			_, err = w.Close()
		} else {
			_, err = w.CloseWith(values)
		}
		if !errors.Is(err, ErrInvalidValue) {
			t.Errorf("%s: %v, want ErrInvalidValue", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, w.Path())); !os.IsNotExist(err) {
			t.Errorf("%s: the file stays: %v", name, err)
		}
	}
}
