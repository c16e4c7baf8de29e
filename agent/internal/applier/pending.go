package applier

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/lakeside/lakeside/agent/internal/typemap"
)

// entry is the net effect of a flush's changes on one mirror key.
//
// For tables keyed by their replica identity, row is the newest known row
// (possibly holding unchanged markers to fill from the existing row, or nil
// for a delete whose row is not known) and deleted tells whether the key is
// gone. For multiset tables (see mirror.go) count is the net number of
// copies of row added (negative: removed).
type entry struct {
	row     []any
	deleted bool
	count   int
}

// partial reports whether the row still needs values from the existing row.
func (e *entry) partial() bool {
	return e.row == nil || slices.Contains(e.row, typemap.Unchanged)
}

// combine folds a newer entry for the same key into an older one and returns
// the result (set semantics unless multiset).
func combine(old, newer *entry, multiset bool) *entry {
	if multiset {
		out := &entry{row: newer.row, count: old.count + newer.count}
		if out.row == nil {
			out.row = old.row
		}
		return out
	}
	if newer.deleted {
		if newer.row == nil && !old.deleted {
			return &entry{row: old.row, deleted: true}
		}
		return newer
	}
	if newer.partial() && old.row != nil && !old.deleted {
		return &entry{row: fillUnchanged(newer.row, old.row)}
	}
	return newer
}

// fillUnchanged returns row with its unchanged markers replaced by the values
// of base at the same positions.
func fillUnchanged(row, base []any) []any {
	out := slices.Clone(row)
	for i, v := range out {
		if v == typemap.Unchanged {
			if i < len(base) {
				out[i] = base[i]
			} else {
				out[i] = nil
			}
		}
	}
	return out
}

// appendEntry appends the encoding of e (without its key) to dst. It
// fails on a value the spill codec cannot encode (typemap.ErrSpillType).
func appendEntry(dst []byte, e *entry) ([]byte, error) {
	flags := byte(0)
	if e.deleted {
		flags |= 1
	}
	if e.row != nil {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, int64(e.count))
	if e.row == nil {
		return dst, nil
	}
	return typemap.AppendRow(dst, e.row)
}

// decodeEntryInto decodes an entry written by appendEntry into e, using
// its row's memory again; decimals makes its decimals. With owned, b is
// e's own (typemap.DecodeOwnedRow).
func decodeEntryInto(e *entry, b []byte, owned bool, decimals *typemap.DecimalSlab) error {
	if len(b) == 0 {
		return typemap.ErrSpillCorrupt
	}
	flags := b[0]
	count, n := binary.Varint(b[1:])
	if n <= 0 {
		return typemap.ErrSpillCorrupt
	}
	e.deleted, e.count = flags&1 != 0, int(count)
	if flags&2 == 0 {
		e.row = nil
		return nil
	}
	decode := typemap.DecodeRow
	if owned {
		decode = typemap.DecodeOwnedRow
	}
	row, _, err := decode(e.row, b[1+n:], decimals)
	e.row = row
	return err
}

// pending collects the effect of a flush's changes on a mirror, by key, in
// bounded memory.
//
// Each change is appended, encoded (typemap.AppendRow), to an arena of memory
// blocks, with a reference to it; nothing is folded or sorted while
// changes arrive. When the arena and its references reach maxBytes (or
// maxKeys references), the references are sorted by key, keeping the order
// of arrival among equal keys, and the records are written in that order to
// a run file; the memory is then free again. iterate sorts what is left in
// memory the same way and merges it with the runs, oldest first, folding
// the records of one key with combine. So a flush whose changes fit the
// budget is sorted once, in memory, and a larger one is an external sort
// whose memory holds at most about maxBytes, plus the read buffers of the
// runs, which share maxBytes (at least 4 KiB each).
type pending struct {
	multiset bool
	maxKeys  int
	maxBytes int
	dir      string

	// blocks hold the records of the changes since the last spill; refs
	// point at them in order of arrival; size is the memory both take.
	blocks [][]byte
	refs   []pendingRef
	size   int
	// byKey, once get built it, indexes refs by key.
	byKey map[string][]int32

	runs      []string
	truncated bool
	// maxKey is the greatest key added (spilled or not), for the mirror's
	// appender: the rows it appends come after every key here.
	maxKey  []byte
	changes int
	// scratch is where a change is encoded before it is stored, kept
	// for the next unless it grew past maxScratch.
	scratch []byte
	// decimals makes the decimals of the entries read back.
	decimals typemap.DecimalSlab
}

// maxScratch is the largest encoding buffer pending keeps between two
// changes.
const maxScratch = 1 << 20

// pendingRef locates a record in the blocks: its key at
// blocks[block][off:off+klen], its encoded entry after it, up to end.
type pendingRef struct {
	block, off, klen, end int32
}

// blockSize returns the size of an arena block: a sixteenth of the budget,
// from 1 KiB to 256 KiB. A larger record gets a block of its own.
func (p *pending) blockSize() int {
	return min(max(p.maxBytes/16, 1<<10), 256<<10)
}

// refSize is the memory a reference takes.
const refSize = 16

func newPending(dir string, maxKeys, maxBytes int, multiset bool) *pending {
	return &pending{dir: dir, maxKeys: maxKeys, maxBytes: maxBytes, multiset: multiset}
}

func (p *pending) key(r pendingRef) []byte {
	return p.blocks[r.block][r.off : r.off+r.klen]
}

func (p *pending) body(r pendingRef) []byte {
	return p.blocks[r.block][r.off+r.klen : r.end]
}

// add records a change's effect on key.
func (p *pending) add(key []byte, e *entry) error {
	p.changes++
	if bytes.Compare(key, p.maxKey) > 0 {
		p.maxKey = append(p.maxKey[:0], key...)
	}
	var err error
	if p.scratch, err = appendEntry(p.scratch[:0], e); err != nil {
		return fmt.Errorf("pending changes: %w", err)
	}
	need := len(key) + len(p.scratch)
	last := len(p.blocks) - 1
	if last < 0 || cap(p.blocks[last])-len(p.blocks[last]) < need {
		p.blocks = append(p.blocks, make([]byte, 0, max(p.blockSize(), need)))
		last++
		p.size += cap(p.blocks[last])
	}
	b := p.blocks[last]
	off := len(b)
	b = append(append(b, key...), p.scratch...)
	p.blocks[last] = b
	if cap(p.scratch) > maxScratch {
		// A huge change's encoding is not kept for the next ones.
		p.scratch = nil
	}
	had := cap(p.refs)
	p.refs = append(p.refs, pendingRef{block: int32(last), off: int32(off), klen: int32(len(key)), end: int32(len(b))})
	p.size += (cap(p.refs) - had) * refSize
	if p.byKey != nil {
		p.byKey[string(key)] = append(p.byKey[string(key)], int32(len(p.refs)-1))
		p.size += len(key) + 48
	}
	if len(p.refs) >= p.maxKeys || p.size >= p.maxBytes {
		return p.spill()
	}
	return nil
}

// get returns the folded entry held in memory for key, if any.
func (p *pending) get(key []byte) (*entry, error) {
	if p.byKey == nil {
		p.byKey = map[string][]int32{}
		for i, r := range p.refs {
			k := p.key(r)
			p.byKey[string(k)] = append(p.byKey[string(k)], int32(i))
			p.size += len(k) + 48
		}
	}
	var acc *entry
	for _, i := range p.byKey[string(key)] {
		e := &entry{}
		if err := decodeEntryInto(e, p.body(p.refs[i]), false, &p.decimals); err != nil {
			return nil, fmt.Errorf("pending changes: %w", err)
		}
		if acc == nil {
			acc = e
		} else {
			acc = combine(acc, e, p.multiset)
		}
	}
	return acc, nil
}

// truncate forgets every change so far: the mirror starts empty.
func (p *pending) truncate() {
	p.close()
	p.truncated = true
	p.maxKey = p.maxKey[:0]
	p.changes++
}

// close deletes the run files and frees the memory.
func (p *pending) close() {
	for _, r := range p.runs {
		os.Remove(r)
	}
	p.runs = nil
	p.clearMemory()
}

func (p *pending) clearMemory() {
	p.blocks, p.refs, p.byKey, p.size = nil, nil, nil, 0
}

// sortRefs sorts the references in memory by key; equal keys stay in order
// of arrival, which is the order of their places in the blocks.
func (p *pending) sortRefs() {
	slices.SortFunc(p.refs, func(a, b pendingRef) int {
		if c := bytes.Compare(p.key(a), p.key(b)); c != 0 {
			return c
		}
		if a.block != b.block {
			return int(a.block - b.block)
		}
		return int(a.off - b.off)
	})
}

// spill writes the records in memory to a new run file, sorted by key.
func (p *pending) spill() error {
	if err := os.MkdirAll(p.dir, 0o750); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	f, err := os.CreateTemp(p.dir, "run-*.bin")
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	p.runs = append(p.runs, f.Name())
	p.sortRefs()
	w := bufio.NewWriterSize(f, 256<<10)
	for _, r := range p.refs {
		if err := writeLengthPrefixed(w, p.key(r), p.body(r)); err != nil {
			f.Close()
			return fmt.Errorf("spill: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("spill: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	p.clearMemory()
	return nil
}

// mergeSource is one sorted input of the merge: a run file or the memory.
// key and body are the current record's, valid until next is called.
type mergeSource struct {
	age       int
	key, body []byte
	// owned says that body is the entry's own memory, never written
	// again (runSource).
	owned bool
	next  func() error
}

type sourceHeap []*mergeSource

func (h sourceHeap) Len() int { return len(h) }
func (h sourceHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].age < h[j].age
}
func (h sourceHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sourceHeap) Push(x any)   { *h = append(*h, x.(*mergeSource)) }
func (h *sourceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runSource returns the source reading a run file.
func runSource(age int, r *bufio.Reader) *mergeSource {
	s := &mergeSource{age: age}
	var kbuf, bbuf []byte
	read := func(buf []byte) ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		_, err = io.ReadFull(r, buf)
		return buf, err
	}
	s.next = func() (err error) {
		if kbuf, err = read(kbuf); err != nil {
			return err // io.EOF at the end
		}
		// A huge entry is read into memory of its own, which its row
		// then refers to (owned) instead of copying it, and which is
		// not kept for the entries after it.
		body, err := read(bbuf)
		if s.owned = cap(body) >= ownedEntryBytes; !s.owned {
			bbuf = body
		} else {
			bbuf = nil
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.key, s.body = kbuf, body
		return err
	}
	return s
}

// ownedEntryBytes is the size from which an entry read back from a run is
// its row's own.
const ownedEntryBytes = 1 << 20

// memorySource returns the source walking the sorted references.
func (p *pending) memorySource(age int) *mergeSource {
	s := &mergeSource{age: age}
	i := 0
	s.next = func() error {
		if i == len(p.refs) {
			return io.EOF
		}
		s.key, s.body = p.key(p.refs[i]), p.body(p.refs[i])
		i++
		return nil
	}
	return s
}

// iterate calls fn with every key and its folded entry, in key order. The
// key and the entry (its row too) are valid only during the call.
func (p *pending) iterate(fn func(key []byte, e *entry) error) error {
	var h sourceHeap
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	// The read buffers of the runs share the memory budget.
	bufSize := 256 << 10
	if len(p.runs) > 0 {
		bufSize = min(max(p.maxBytes/len(p.runs), 4<<10), bufSize)
	}
	for i, path := range p.runs {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("read spill: %w", err)
		}
		files = append(files, f)
		h = append(h, runSource(i, bufio.NewReaderSize(f, bufSize)))
	}
	p.sortRefs()
	h = append(h, p.memorySource(len(p.runs)))
	live := h[:0]
	for _, s := range h {
		err := s.next()
		if errors.Is(err, io.EOF) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read spill: %w", err)
		}
		live = append(live, s)
	}
	h = live
	heap.Init(&h)
	var key []byte
	// decoded are the entries of one key, used again for the next: fn
	// keeps nothing of them.
	var decoded []*entry
	for h.Len() > 0 {
		key = append(key[:0], h[0].key...)
		var acc *entry
		for n := 0; h.Len() > 0 && bytes.Equal(h[0].key, key); n++ {
			s := h[0]
			if n == len(decoded) {
				decoded = append(decoded, &entry{})
			}
			e := decoded[n]
			if err := decodeEntryInto(e, s.body, s.owned, &p.decimals); err != nil {
				return fmt.Errorf("read spill: %w", err)
			}
			if acc == nil {
				acc = e
			} else {
				acc = combine(acc, e, p.multiset)
			}
			switch err := s.next(); {
			case errors.Is(err, io.EOF):
				heap.Pop(&h)
			case err != nil:
				return fmt.Errorf("read spill: %w", err)
			default:
				heap.Fix(&h, 0)
			}
		}
		if err := fn(key, acc); err != nil {
			return err
		}
	}
	return nil
}

// spillDir returns the directory for a table's run files.
func spillDir(tablesDir, table string) string {
	return filepath.Join(tablesDir, ".spill", table)
}

// writeLengthPrefixed writes each of parts after its length (a uvarint),
// from where it is: a huge part is not copied first.
func writeLengthPrefixed(w *bufio.Writer, parts ...[]byte) error {
	var n [binary.MaxVarintLen64]byte
	for _, b := range parts {
		if _, err := w.Write(binary.AppendUvarint(n[:0], uint64(len(b)))); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
