package backfill

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/store"
)

// TestChunkMemoryIsReusedSafely decodes a chunk into the memory of one
// before it, as a backfill does once that chunk is durable: the memory is
// used again, a NULL reads as NULL where the chunk before held a value, and
// the last key that the earlier chunk's progress keeps does not change.
// (Package source's TestCopyDecoderReusesMemorySafely checks its decoder
// over such memory.)
func TestChunkMemoryIsReusedSafely(t *testing.T) {
	cat := newTextCatalog()
	pool := newChunkPool()
	decode := func(lines ...string) (*chunkReader, *chunkMemory) {
		t.Helper()
		mem := pool.get()
		cr := newChunkReader(cat, codeRelation(), 4, mem)
		cr.keyPos = []int{0}
		if _, err := cr.Write([]byte(strings.Join(lines, ""))); err != nil {
			t.Fatal(err)
		}
		mem.keep(cr)
		return cr, mem
	}

	// The first chunk sizes the memory (its lines are the longest); the
	// second is decoded into blocks of that size, the third into the
	// second's.
	_, mem := decode("a1\t1\tone, a longer note\n", "a2\t2\ttwo, a longer note\n", "a3\t3\tthree, a longer note\n")
	pool.put(mem)
	second, again := decode("b1\t10\tten\n", "b2\t20\ttwenty\n", "b3\t30\tthirty\n")
	after, values := second.lastKey(), &again.values[0]
	pool.put(again)

	// Its lines cover where the second chunk's last key was.
	third, last := decode("c1\t\\N\t\\N\n", "c2\t40\t\\N\n", "c3\t50\tfifty\n")
	if last != mem || &last.values[0] != values {
		t.Fatal("the third chunk was not decoded into the memory of the second")
	}
	if got := string(after[0]); got != "b3" {
		t.Fatalf("the second chunk's last key reads %q after the third chunk, want b3", got)
	}
	want := []string{"c1 <nil> <nil>", "c2 40 <nil>", "c3 50 fifty"}
	if len(third.rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(third.rows), len(want))
	}
	for i, c := range third.rows {
		if got := rowText(c.New); got != want[i] {
			t.Errorf("row %d reads %q, want %q", i, got, want[i])
		}
	}
}

// rowText prints the values of a row decoded from the columns of
// codeRelation (text, int8, text).
func rowText(vals []store.Value) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch v.Kind {
		case store.KindNull:
			parts[i] = "<nil>"
		case store.KindInt64:
			parts[i] = fmt.Sprint(v.Int)
		default:
			parts[i] = string(v.Bytes)
		}
	}
	return strings.Join(parts, " ")
}
