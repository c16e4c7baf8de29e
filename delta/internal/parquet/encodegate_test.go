package parquet

import (
	"testing"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// TestEncodeGateHoldsHugeRowGroups writes a file with a huge value and one
// without while another writer holds their shared gate: the first waits
// for the gate to close its file, the second does not.
func TestEncodeGateHoldsHugeRowGroups(t *testing.T) {
	st := hugeSchema()
	var gate EncodeGate
	write := func(rows []types.Row) <-chan error {
		done := make(chan error, 1)
		go func() {
			dir := t.TempDir()
			w, err := newDataWriter(dir, st, nil, WriteOptions{EncodeGate: &gate})
			if err == nil {
				err = w.Write(rows)
			}
			if err == nil {
				_, err = w.Close()
			}
			done <- err
		}()
		return done
	}
	gate.mu.Lock()
	small := write([]types.Row{{int64(1), "a", "b"}})
	select {
	case err := <-small:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a file without a huge value waits for the gate")
	}
	huge := write(hugeRows(hugeText(hugeSize, 3)))
	select {
	case err := <-huge:
		t.Fatalf("a file with a huge value was written while the gate was held (error %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	gate.mu.Unlock()
	if err := <-huge; err != nil {
		t.Fatal(err)
	}
}

// TestHugePageRefersToItsValue makes the page of a string column buffer
// that holds one huge value: the page holds the value where the buffer
// does, not a copy of it (which parquet-go makes for a page of one value).
func TestHugePageRefersToItsValue(t *testing.T) {
	b := byteArrayType{Type: parquet.String().Type(), text: true}.NewColumnBuffer(0, 1)
	huge := hugeText(hugeSize, 4)
	if _, err := b.WriteValues([]parquet.Value{parquet.ByteArrayValue([]byte(huge))}); err != nil {
		t.Fatal(err)
	}
	var v [1]parquet.Value
	if n, _ := b.ReadValuesAt(v[:], 0); n != 1 {
		t.Fatal("the buffer does not hold the value")
	}
	p := b.Page()
	values := p.Data()
	data, offsets := values.ByteArray()
	if string(data) != huge || len(offsets) != 2 || p.NumValues() != 1 {
		t.Fatalf("the page holds %d values, %d bytes", p.NumValues(), len(data))
	}
	if unsafe.SliceData(data) != unsafe.SliceData(v[0].ByteArray()) {
		t.Error("the page holds a copy of the value")
	}
	if lo, hi, ok := p.Bounds(); !ok || len(lo.ByteArray()) >= hugeValueBytes || len(hi.ByteArray()) >= hugeValueBytes {
		t.Error("the page's bounds are not short")
	}
}
