package applier

import (
	"bufio"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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
	return e.row == nil || slices.Contains(e.row, unchanged)
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
		if v == unchanged {
			if i < len(base) {
				out[i] = base[i]
			} else {
				out[i] = nil
			}
		}
	}
	return out
}

// pending collects the net effect of a flush's changes on a mirror, by key,
// in bounded memory: when more than limit keys are held, they are sorted and
// written to a run file, and iterate merges the runs with what is left in
// memory, oldest first, folding the entries of one key with combine. This is
// an external sort: memory holds at most limit entries plus one read buffer
// per run.
type pending struct {
	multiset bool
	limit    int
	dir      string

	mem       map[string]*entry
	runs      []string
	truncated bool
	changes   int
}

func newPending(dir string, limit int, multiset bool) *pending {
	return &pending{dir: dir, limit: limit, multiset: multiset, mem: map[string]*entry{}}
}

// get returns the entry held in memory for key, if any.
func (p *pending) get(key string) *entry { return p.mem[key] }

// add records a change's effect on key.
func (p *pending) add(key string, e *entry) error {
	p.changes++
	if old := p.mem[key]; old != nil {
		p.mem[key] = combine(old, e, p.multiset)
		return nil
	}
	p.mem[key] = e
	if len(p.mem) >= p.limit {
		return p.spill()
	}
	return nil
}

// truncate forgets every change so far: the mirror starts empty.
func (p *pending) truncate() {
	p.close()
	p.mem = map[string]*entry{}
	p.truncated = true
	p.changes++
}

// close deletes the run files.
func (p *pending) close() {
	for _, r := range p.runs {
		os.Remove(r)
	}
	p.runs = nil
}

func (p *pending) sortedKeys() []string {
	keys := make([]string, 0, len(p.mem))
	for k := range p.mem {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// spill writes the entries in memory to a new run file, sorted by key.
func (p *pending) spill() error {
	if err := os.MkdirAll(p.dir, 0o750); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	f, err := os.CreateTemp(p.dir, "run-*.bin")
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	p.runs = append(p.runs, f.Name())
	w := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	for _, k := range p.sortedKeys() {
		e := p.mem[k]
		buf = appendBytes(buf[:0], []byte(k))
		flags := byte(0)
		if e.deleted {
			flags |= 1
		}
		if e.row != nil {
			flags |= 2
		}
		buf = append(buf, flags)
		buf = binary.AppendVarint(buf, int64(e.count))
		if e.row != nil {
			buf = binary.AppendUvarint(buf, uint64(len(e.row)))
			for _, v := range e.row {
				buf = appendRowValue(buf, v)
			}
		}
		if _, err := w.Write(buf); err != nil {
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
	clear(p.mem)
	return nil
}

// mergeSource is one sorted input of the merge: a run file or the memory.
type mergeSource struct {
	age  int
	key  string
	e    *entry
	next func() (string, *entry, error)
}

type sourceHeap []*mergeSource

func (h sourceHeap) Len() int { return len(h) }
func (h sourceHeap) Less(i, j int) bool {
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
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

func readRunEntry(s *spillReader) (string, *entry, error) {
	k, err := s.bytes()
	if err != nil {
		return "", nil, err
	}
	flags, err := s.r.ReadByte()
	if err != nil {
		return "", nil, err
	}
	count, err := binary.ReadVarint(s.r)
	if err != nil {
		return "", nil, err
	}
	e := &entry{deleted: flags&1 != 0, count: int(count)}
	if flags&2 != 0 {
		n, err := s.uvarint()
		if err != nil {
			return "", nil, err
		}
		e.row = make([]any, n)
		for i := range e.row {
			if e.row[i], err = s.value(); err != nil {
				return "", nil, err
			}
		}
	}
	return string(k), e, nil
}

// iterate calls fn with every key and its folded entry, in key order.
func (p *pending) iterate(fn func(key []byte, e *entry) error) error {
	var h sourceHeap
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for i, path := range p.runs {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("read spill: %w", err)
		}
		files = append(files, f)
		sr := &spillReader{r: bufio.NewReaderSize(f, 256<<10)}
		h = append(h, &mergeSource{age: i, next: func() (string, *entry, error) { return readRunEntry(sr) }})
	}
	keys := p.sortedKeys()
	h = append(h, &mergeSource{age: len(p.runs), next: func() (string, *entry, error) {
		if len(keys) == 0 {
			return "", nil, io.EOF
		}
		k := keys[0]
		keys = keys[1:]
		return k, p.mem[k], nil
	}})
	live := h[:0]
	for _, s := range h {
		k, e, err := s.next()
		if errors.Is(err, io.EOF) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read spill: %w", err)
		}
		s.key, s.e = k, e
		live = append(live, s)
	}
	h = live
	heap.Init(&h)
	for h.Len() > 0 {
		key := h[0].key
		var acc *entry
		for h.Len() > 0 && h[0].key == key {
			s := h[0]
			if acc == nil {
				acc = s.e
			} else {
				acc = combine(acc, s.e, p.multiset)
			}
			k, e, err := s.next()
			switch {
			case errors.Is(err, io.EOF):
				heap.Pop(&h)
			case err != nil:
				return fmt.Errorf("read spill: %w", err)
			default:
				s.key, s.e = k, e
				heap.Fix(&h, 0)
			}
		}
		if err := fn([]byte(key), acc); err != nil {
			return err
		}
	}
	return nil
}

// spillDir returns the directory for a table's run files.
func spillDir(tablesDir, table string) string {
	return filepath.Join(tablesDir, ".spill", table)
}
