package parquet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/parquet-go/parquet-go"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// hugeSchema is a table of documents: a key, a text and a small label.
func hugeSchema() *types.StructType {
	return types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("doc", types.TypeString, true),
		types.NewField("label", types.TypeString, true),
	)
}

// hugeText returns n bytes of text made of random words, which snappy
// hardly compresses, beginning with "~ " so that it is larger than most
// strings.
func hugeText(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString("~ ")
	for b.Len() < n {
		for range 2 + r.IntN(8) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// hugeRows returns a few small rows, one whose doc is huge, and a few small
// rows again.
func hugeRows(huge string) []types.Row {
	var rows []types.Row
	for i := range int64(10) {
		doc := any(strings.Repeat("small document ", int(i)))
		if i == 4 {
			doc = huge
		}
		rows = append(rows, types.Row{i, doc, "label"})
	}
	return rows
}

// hugeSize is the length of the huge values of the tests: huge, and
// small enough for the tests to be quick.
const hugeSize = hugeValueBytes + 1<<19

// hugeTestSchema has huge values in flat columns, nullable or not, of
// strings and of binary values, and in nested ones.
func hugeTestSchema() *types.StructType {
	return types.NewStructType(
		types.NewField("id", types.TypeLong, false),
		types.NewField("s", types.TypeString, true),
		types.NewField("r", types.TypeString, false),
		types.NewField("b", types.TypeBinary, true),
		types.NewField("st", types.NewStructType(types.NewField("y", types.TypeString, true)), true),
		types.NewField("arr", &types.ArrayType{ElementType: types.TypeString, ContainsNull: true}, true),
	)
}

// hugeTestRows returns rows of hugeTestSchema with huge values among small
// ones: the smallest and the largest of their columns, in between, alone in
// a row group, and some whose upper bound cannot be shortened (they go on
// with U+10FFFF, or with bytes 0xff).
func hugeTestRows() []types.Row {
	text := hugeText(hugeSize, 2)
	low := "!" + text
	high := "~~" + text
	mid := "m" + text
	maxRunes := strings.Repeat("é", 31) + strings.Repeat(string(maxRune), hugeSize/4)
	bin := []byte(hugeText(hugeSize, 3))
	for i := range bin {
		bin[i] ^= byte(i * 7) // bytes of every value, no UTF-8
	}
	ffs := append([]byte{0xfe}, bytes.Repeat([]byte{0xff}, hugeSize)...)
	small := func(i int) string { return fmt.Sprintf("v%03d", i) }
	return []types.Row{
		{int64(0), small(0), small(0), []byte("a"), types.Row{small(0)}, []any{small(0)}},
		{int64(1), high, low, bin, types.Row{high}, []any{low, nil, high}},
		{int64(2), nil, small(2), nil, nil, nil},
		{int64(3), small(3), mid, []byte{}, types.Row{nil}, []any{}},
		// A row group of one row.
		{int64(4), low, high, bin, types.Row{mid}, []any{mid}},
		// Upper bounds that cannot be shortened.
		{int64(5), maxRunes, maxRunes, ffs, types.Row{maxRunes}, []any{maxRunes}},
		{int64(6), small(6), small(6), []byte("z"), types.Row{small(6)}, []any{small(6)}},
		{int64(7), "", "", nil, nil, []any{nil}},
	}
}

// TestHugeValuesReadBack writes huge values, by Write and by a
// RowBuilder, in row groups of various sizes, and checks that they read
// back exactly, that the Delta stats are those of the whole values, and
// that the Parquet bounds of the file are right (see checkHugeBounds).
func TestHugeValuesReadBack(t *testing.T) {
	st := hugeTestSchema()
	rows := hugeTestRows()
	want := normalizedRows(t, st, rows)
	for _, rg := range []int64{4, 1, 100} {
		for _, byBuilder := range []bool{false, true} {
			t.Run(fmt.Sprintf("row groups of %d, builder %v", rg, byBuilder), func(t *testing.T) {
				dir := t.TempDir()
				w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: rg})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if byBuilder {
						b := w.Row()
						for i, v := range r {
							switch x := v.(type) {
							case string:
								b.Bytes(i, []byte(x))
							default:
								b.Value(i, x)
							}
						}
						err = b.End()
					} else {
						err = w.Write([]types.Row{r})
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				add, got := closeAndRead(t, w, dir, st)
				assertSameRowsInOrder(t, "read back", got, want)
				if ref := wholeValueStats(t, st, rows); add.Stats != ref {
					t.Errorf("stats\n got: %s\nwant: %s", add.Stats, ref)
				}
				checkHugeBounds(t, filepath.Join(dir, add.Path))
			})
		}
	}
}

// wholeValueStats returns the Delta stats of rows as the writer made them
// before it kept prefixes of long strings: the stats of their smallest and
// largest values, whole.
func wholeValueStats(t *testing.T, st *types.StructType, rows []types.Row) string {
	t.Helper()
	s := newStatsCollector(st)
	var observe func(c *colStats, v any)
	observe = func(c *colStats, v any) {
		switch x := v.(type) {
		case nil:
			c.observeNulls(1)
		case types.Row:
			for i, ch := range c.children {
				observe(ch, x[i])
			}
		case string:
			switch {
			case c.noBounds || !hasBounds(c.typ):
			case !utf8.ValidString(x):
				c.noBounds, c.min, c.max = true, nil, nil
			default:
				if c.min == nil || x < c.min.(string) {
					c.min = x
				}
				if c.max == nil || x > c.max.(string) {
					c.max = x
				}
			}
		default:
			c.observe(v)
		}
	}
	for _, r := range normalizedRows(t, st, rows) {
		s.numRecords++
		for i, c := range s.cols {
			observe(c, r[i])
		}
	}
	js, err := s.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// checkHugeBounds checks, with parquet-go's reader, the bounds of the byte
// array columns of a file: the column index holds, for each page, what
// parquet-go makes of the page's smallest and largest values (their first
// parquet.DefaultColumnIndexSizeLimit bytes, the last incremented for the
// largest); the statistics of a column chunk hold its smallest and largest
// values, or for a huge one short bounds that are still bounds (and
// strings, in a string column), unless no short upper bound exists.
func checkHugeBounds(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for g, rg := range f.RowGroups() {
		for c, chunk := range rg.ColumnChunks() {
			if chunk.Type().Kind() != parquet.ByteArray {
				continue
			}
			what := fmt.Sprintf("row group %d column %d", g, c)
			index, err := chunk.ColumnIndex()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			var lo, hi []byte
			hasBounds := false
			pages := chunk.Pages()
			for i := 0; ; i++ {
				p, err := pages.ReadPage()
				if err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				pmin, pmax, ok := p.Bounds()
				if !ok {
					parquet.Release(p)
					continue
				}
				a, b := bytes.Clone(pmin.ByteArray()), bytes.Clone(pmax.ByteArray())
				parquet.Release(p)
				if got, want := index.MinValue(i).ByteArray(), indexMin(a); !bytes.Equal(got, want) {
					t.Errorf("%s page %d: index min %q, want %q", what, i, got, want)
				}
				if got, want := index.MaxValue(i).ByteArray(), indexMax(b); !bytes.Equal(got, want) {
					t.Errorf("%s page %d: index max %q, want %q", what, i, got, want)
				}
				if !hasBounds || bytes.Compare(a, lo) < 0 {
					lo = a
				}
				if !hasBounds || bytes.Compare(b, hi) > 0 {
					hi = b
				}
				hasBounds = true
			}
			pages.Close()
			stats := f.Metadata().RowGroups[g].Columns[c].MetaData.Statistics
			if !hasBounds {
				continue
			}
			text := utf8.Valid(lo) && utf8.Valid(hi)
			checkBound(t, what+" min", stats.MinValue, lo, len(lo) >= hugeValueBytes, text)
			checkBound(t, what+" max", stats.MaxValue, hi, len(hi) >= hugeValueBytes && upperBound(hi, text) != nil, text)
		}
	}
}

// checkBound checks a bound of a column chunk's statistics against the
// smallest or largest value of the chunk, x: it must be x, or, if short, a
// short bound of x.
func checkBound(t *testing.T, what string, got, x []byte, short, text bool) {
	t.Helper()
	switch {
	case !short && !bytes.Equal(got, x):
		t.Errorf("%s: %d bytes %q..., want the value's %d bytes", what, len(got), got[:min(len(got), 20)], len(x))
	case !short:
	case len(got) > boundPrefixBytes+utf8.UTFMax:
		t.Errorf("%s: %d bytes of a huge value, want a short bound", what, len(got))
	case strings.HasSuffix(what, "min") && !bytes.HasPrefix(x, got):
		t.Errorf("%s: %q is not a prefix of the smallest value", what, got)
	case strings.HasSuffix(what, "max") && bytes.Compare(got, x) <= 0:
		t.Errorf("%s: %q is not larger than the largest value", what, got)
	case text && !utf8.Valid(got):
		t.Errorf("%s: %q is not a string", what, got)
	case len(got) <= parquet.DefaultColumnIndexSizeLimit || !bytes.Equal(got[:parquet.DefaultColumnIndexSizeLimit], x[:parquet.DefaultColumnIndexSizeLimit]):
		t.Errorf("%s: %q does not begin as the value does", what, got)
	}
}

// indexMin and indexMax return what parquet-go's column index keeps of the
// smallest and largest values of a page.
func indexMin(x []byte) []byte { return x[:min(len(x), parquet.DefaultColumnIndexSizeLimit)] }

func indexMax(x []byte) []byte {
	if len(x) <= parquet.DefaultColumnIndexSizeLimit {
		return x
	}
	x = bytes.Clone(x[:parquet.DefaultColumnIndexSizeLimit])
	for i := len(x) - 1; i >= 0; i-- {
		if x[i]++; x[i] != 0 {
			return x
		}
	}
	return bytes.Repeat([]byte{0xff}, len(x))
}

// TestStatsOfLongStrings checks that the Delta stats of strings longer than
// the prefix they keep, with runs of U+10FFFF past it, and of strings that
// are not UTF-8, are those of the whole values, over one row group and
// several, in flat and nested columns.
func TestStatsOfLongStrings(t *testing.T) {
	st := types.NewStructType(types.NewField("s", types.TypeString, true),
		types.NewField("st", types.NewStructType(types.NewField("y", types.TypeString, true)), true))
	run := func(n int) string { return strings.Repeat(string(maxRune), n) }
	e31, e32 := strings.Repeat("é", 31), strings.Repeat("é", 32)
	long := strings.Repeat("x", 300)
	cases := map[string][]string{
		"longer than the prefix":  {e32 + "a", e32 + "b" + long, e32, e31 + "z" + long, "a", e32 + "a" + long},
		"runs of U+10FFFF":        {e32 + run(3) + "a" + long, e32 + run(3) + "b", e32 + run(3), e32 + run(2) + "z", e31 + run(5) + "q" + long, run(40) + long},
		"runs to the end":         {e32 + run(100), e32 + run(99), e32 + run(100) + "a", e31 + run(200)},
		"a run and a longer run":  {e32 + run(70) + "a" + long, e32 + run(71), e32 + run(70) + "b"},
		"not UTF-8 past 32 chars": {e32 + "a", e32 + long + "\xff" + long, "b"},
		"not UTF-8 at once":       {"\xc3" + long, "a"},
		"a character split":       {e32 + "\xc3", "\xa9" + long},
		"huge":                    {"~" + hugeText(hugeSize, 4), e32 + run(4) + hugeText(hugeSize, 5), "a"},
		"huge and not UTF-8":      {"a", hugeText(hugeSize, 6) + "\xff", "~"},
	}
	for name, values := range cases {
		var rows []types.Row
		for _, v := range values {
			rows = append(rows, types.Row{v, types.Row{v}})
		}
		for _, rg := range []int64{1, 2, 100} {
			add, err := writeDataFile(context.Background(), t.TempDir(), st, nil, rows, WriteOptions{RowGroupRows: rg})
			if err != nil {
				t.Fatal(err)
			}
			if ref := wholeValueStats(t, st, rows); add.Stats != ref {
				t.Errorf("%s, row groups of %d: stats\n got: %s\nwant: %s", name, rg, add.Stats, ref)
			}
		}
	}
}

// TestStatsPrefixKeepsOrderAndStats checks statsPrefix on strings made of
// few characters, U+10FFFF among them, around the prefix length: the
// prefix of a string has the stats of the string, and the prefixes of two
// strings are in their order.
func TestStatsPrefixKeepsOrderAndStats(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chars := []string{"a", "b", "é", string(maxRune), "\U0010FFFE"}
	str := func() string {
		var b strings.Builder
		n := StringStatsPrefixLength - 3 + r.IntN(10)
		if r.IntN(4) == 0 {
			n = r.IntN(3 * StringStatsPrefixLength)
		}
		for range n {
			b.WriteString(chars[r.IntN(len(chars))])
			if r.IntN(3) > 0 {
				b.WriteString(string(maxRune)) // runs of it
			}
		}
		return b.String()
	}
	for range 20000 {
		s, u := str(), str()
		if s > u {
			s, u = u, s
		}
		if r.IntN(10) == 0 {
			u = s + u // s a prefix of u
		}
		ps, pu := statsPrefix(s), statsPrefix(u)
		if ps > pu {
			t.Fatalf("%q ≤ %q, but their prefixes %q > %q", s, u, ps, pu)
		}
		if statsPrefix(ps) != ps {
			t.Fatalf("statsPrefix(%q) = %q, its prefix %q", s, ps, statsPrefix(ps))
		}
		if a, b := truncateString(ps, StringStatsPrefixLength), truncateString(s, StringStatsPrefixLength); a != b {
			t.Fatalf("min stats of %q: %q, of its prefix %q", s, b, a)
		}
		a, aok := truncateMaxString(ps, StringStatsPrefixLength)
		b, bok := truncateMaxString(s, StringStatsPrefixLength)
		if a != b || aok != bok {
			t.Fatalf("max stats of %q: %q, of its prefix %q", s, b, a)
		}
	}
}

// TestHugeValuesHeldApart checks that a column holds a huge value apart
// from the bytes of the others, a string without copying it: the bytes
// of the column do not grow for it, the values read in order, and
// truncation drops it.
func TestHugeValuesHeldApart(t *testing.T) {
	c := newFlatColumn(types.NewField("s", types.TypeString, true), 0, 0)
	huge := hugeText(hugeSize, 1)
	values := []any{"a", huge, nil, "", []byte(huge + "b"), "c"}
	for _, v := range values {
		if err := c.add(v); err != nil {
			t.Fatal(err)
		}
	}
	if cap(c.data) >= hugeValueBytes || len(c.huge) != 2 || c.hugeBytes != 2*hugeSize+1 {
		t.Fatalf("room for %d bytes, %d huge values of %d bytes", cap(c.data), len(c.huge), c.hugeBytes)
	}
	if unsafe.StringData(huge) != unsafe.SliceData(c.huge[0].bytes) {
		t.Error("the huge string was copied")
	}
	vals, _ := c.appendValues(nil, 0, len(values), 0)
	for i, v := range values {
		want, _ := v.(string)
		if b, ok := v.([]byte); ok {
			want = string(b)
		}
		if got := string(vals[i].ByteArray()); got != want || vals[i].IsNull() != (v == nil) {
			t.Errorf("value %d: %d bytes %.8q, want %d bytes %.8q", i, len(got), got, len(want), want)
		}
	}
	if b := c.bounds(len(values)); b.lo != "" || b.hi != statsPrefix(huge+"b") {
		t.Errorf("bounds %.40q to %.40q", b.lo, b.hi)
	}
	c.truncate(4)
	if len(c.huge) != 1 || c.hugeBytes != hugeSize {
		t.Errorf("truncated: %d huge values of %d bytes, want 1 of %d", len(c.huge), c.hugeBytes, hugeSize)
	}
	c.releaseHuge()
	c.truncate(0)
	if len(c.huge) != 0 || c.hugeBytes != 0 {
		t.Errorf("emptied: %d huge values of %d bytes", len(c.huge), c.hugeBytes)
	}
}

// TestColumnsDropRoomForLongValues writes row groups of values far longer
// than RowGroupBytes, through shared column buffers: the columns do not
// keep room for them once encoded, neither for the writer's next row
// groups nor for the next writer.
func TestColumnsDropRoomForLongValues(t *testing.T) {
	const budget = 16 << 10
	var buffers ColumnBuffers
	st := types.NewStructType(types.NewField("id", types.TypeLong, false), types.NewField("doc", types.TypeString, true))
	var rows []types.Row
	for i := range int64(12) {
		n := 100
		if i%3 == 1 {
			n = 20 * budget // long, not huge
		}
		if i == 7 {
			n = hugeSize
		}
		rows = append(rows, types.Row{i, strings.Repeat("d", n)})
	}
	dir := t.TempDir()
	w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 2, RowGroupBytes: budget, Buffers: &buffers, Inline: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write([]types.Row{r}); err != nil {
			t.Fatal(err)
		}
		for _, g := range w.columns.free {
			if n := cap(g.cols[1].data); n > keepBytesFactor*budget {
				t.Fatalf("after row %d, an encoded row group keeps room for %d bytes of strings", r[0], n)
			}
		}
	}
	_, got := closeAndRead(t, w, dir, st)
	assertSameRowsInOrder(t, "read back", got, rows)
	if n := buffers.Bytes(); n > 3*(keepBytesFactor*budget+1<<10) {
		t.Errorf("the buffers keep %d bytes", n)
	}
}

// heapPeak samples the heap in use until stopped and returns the largest
// sample.
type heapPeak struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

func startHeapPeak() *heapPeak {
	p := &heapPeak{stop: make(chan struct{})}
	p.done.Go(func() {
		var m runtime.MemStats
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&m)
			p.peak = max(p.peak, m.HeapInuse)
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	})
	return p
}

// end stops sampling and returns the peak.
func (p *heapPeak) end() uint64 {
	close(p.stop)
	p.done.Wait()
	return p.peak
}

// BenchmarkWriteHugeValue writes a file of a few small rows and one row
// holding a 100 MB string per iteration, by Write (the string) and by a
// RowBuilder (its bytes), and reports the bytes allocated and the peak of
// the heap in use above what it was before the file, each per byte of the
// huge value: how many copies of the value the writer makes, and how many
// it holds at once. The garbage collector runs often meanwhile, so that the
// heap in use is about the memory in use.
func BenchmarkWriteHugeValue(b *testing.B) {
	const size = 100 << 20
	st := hugeSchema()
	rows := hugeRows(hugeText(size, 1))
	for _, byBuilder := range []bool{false, true} {
		name := "Write"
		if byBuilder {
			name = "RowBuilder"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			var allocated, peak, fileSize float64
			for b.Loop() {
				runtime.GC()
				gc := debug.SetGCPercent(5)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				p := startHeapPeak()
				path, err := writeHugeFile(dir, st, rows, byBuilder)
				top := p.end()
				runtime.ReadMemStats(&after)
				debug.SetGCPercent(gc)
				if err != nil {
					b.Fatal(err)
				}
				if fi, err := os.Stat(path); err == nil {
					fileSize = float64(fi.Size())
				}
				os.Remove(path)
				allocated += float64(after.TotalAlloc - before.TotalAlloc)
				peak = max(peak, float64(top)-float64(before.HeapInuse))
			}
			b.ReportMetric(allocated/float64(b.N)/size, "alloc-B/value-B")
			b.ReportMetric(peak/size, "peak-heap-B/value-B")
			b.ReportMetric(fileSize/size, "file-B/value-B")
		})
	}
}

// writeHugeFile writes rows of hugeSchema to a new file in dir, by Write
// or by a RowBuilder, and returns its path.
func writeHugeFile(dir string, st *types.StructType, rows []types.Row, byBuilder bool) (string, error) {
	w, err := newDataWriter(dir, st, nil, WriteOptions{})
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		if byBuilder {
			b := w.Row()
			b.Int(0, r[0].(int64))
			b.Bytes(1, stringBytes(r[1].(string)))
			b.Bytes(2, stringBytes(r[2].(string)))
			err = b.End()
		} else {
			err = w.Write([]types.Row{r})
		}
		if err != nil {
			w.Abort()
			return "", err
		}
	}
	add, err := w.Close()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, add.Path), nil
}

// TestHugePagesSpill writes pages of huge values, which page buffers move
// to temporary files: the file is the one written with the pages in
// memory, and reads back.
func TestHugePagesSpill(t *testing.T) {
	st := hugeTestSchema()
	rows := hugeTestRows()
	big := hugeText(3*hugeValueBytes, 9) // incompressible: its pages stay huge
	rows = append(rows, types.Row{int64(8), big, big, []byte(big), types.Row{big}, []any{big}})
	var files [2][]byte
	for i, spill := range []bool{true, false} {
		dir := t.TempDir()
		w, err := newDataWriter(dir, st, nil, WriteOptions{RowGroupRows: 3, RowGroupBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if !spill {
			w.pages.dir = filepath.Join(dir, "missing")
		}
		if err := w.Write(rows); err != nil {
			t.Fatal(err)
		}
		add, got := closeAndRead(t, w, dir, st)
		assertSameRowsInOrder(t, "read back", got, normalizedRows(t, st, rows))
		if n := w.pages.spilled.Load(); (n > 0) != spill {
			t.Errorf("spill %v: %d buffers moved to a file", spill, n)
		}
		if files[i], err = os.ReadFile(filepath.Join(dir, add.Path)); err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("spill %v: %d files in the directory, want the data file", spill, len(entries))
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("the file written with pages in temporary files differs")
	}
}

// TestPageBufferSpill writes pages to a page buffer, one of them huge,
// seeking back and forth as parquet-go does: the buffer moves to a file
// at the huge page and holds every byte written.
func TestPageBufferSpill(t *testing.T) {
	pool := newPageBuffers(t.TempDir(), 1<<10)
	pool.spillBytes = 1 << 10
	buf := pool.GetBuffer()
	var want []byte
	write := func(n int, c byte) {
		p := bytes.Repeat([]byte{c}, n)
		if _, err := buf.Write(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, p...)
	}
	if _, err := buf.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	write(100, 'a')
	write(1000, 'b')
	write(2000, 'c') // moves to a file
	write(10, 'd')
	if pool.spilled.Load() != 1 {
		t.Fatalf("%d buffers moved to a file, want 1", pool.spilled.Load())
	}
	if _, err := buf.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := io.Copy(&got, buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes back, want %d", got.Len(), len(want))
	}
	pool.PutBuffer(buf)
}
