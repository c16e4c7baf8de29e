package parquet

import (
	"io"
	"os"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
	"golang.org/x/sys/unix"
)

// pageBuffers is the pool of the buffers parquet-go keeps the pages of a
// column chunk in until its row group goes into the file
// (parquet.ColumnPageBuffers): parquet-go's buffers in memory, except that
// a buffer given a page of spillBytes or more, which only a huge value
// makes, moves to an unnamed temporary file in the directory of the data
// file. The heap then holds no copy of the page while its row group waits
// to go into the file, and parquet-go's other copies of the value are
// fewer at once. The file's bytes are the same either way; a buffer that
// cannot move stays in memory. It is safe for concurrent use.
type pageBuffers struct {
	mem        parquet.BufferPool
	dir        string
	spillBytes int
	// spilled counts the buffers moved to a file.
	spilled atomic.Int64
}

// newPageBuffers returns the page buffers of a writer of a file in dir
// whose row groups hold at most maxBytes of byte array values before their
// last row. The pages of a flat column hold values of one row group: a page
// of maxBytes and two huge values more holds a huge one. (A page of a
// nested column, whose values maxBytes does not count, may be that large
// without one, and then goes to a file too.)
func newPageBuffers(dir string, maxBytes int) *pageBuffers {
	return &pageBuffers{mem: parquet.NewBufferPool(), dir: dir, spillBytes: maxBytes + 2*hugeValueBytes}
}

// GetBuffer returns an empty buffer in memory.
func (p *pageBuffers) GetBuffer() io.ReadWriteSeeker {
	return &pageBuffer{pool: p, rw: p.mem.GetBuffer()}
}

// PutBuffer takes back a buffer of the pool, dropping it if it is a file.
func (p *pageBuffers) PutBuffer(rw io.ReadWriteSeeker) {
	b := rw.(*pageBuffer)
	if b.file != nil {
		b.file.Close()
		return
	}
	p.mem.PutBuffer(b.rw)
}

// pageBuffer is a buffer of pageBuffers: rw, in memory or, once moved, the
// temporary file.
type pageBuffer struct {
	pool *pageBuffers
	rw   io.ReadWriteSeeker
	file *os.File
}

// Write writes p, after moving the buffer to a file if p is a huge page.
func (b *pageBuffer) Write(p []byte) (int, error) {
	if b.file == nil && len(p) >= b.pool.spillBytes {
		b.spill()
	}
	return b.rw.Write(p)
}

// Read reads from the buffer.
func (b *pageBuffer) Read(p []byte) (int, error) { return b.rw.Read(p) }

// Seek sets the offset of the next Read or Write.
func (b *pageBuffer) Seek(offset int64, whence int) (int64, error) {
	return b.rw.Seek(offset, whence)
}

// WriteTo writes the rest of the buffer to w, as the buffer in memory or
// the file does (parquet-go copies a column chunk into the data file so).
func (b *pageBuffer) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := b.rw.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, b.rw)
}

// spill moves the buffer from memory to a temporary file, keeping its
// offset; the buffer stays in memory if it cannot.
func (b *pageBuffer) spill() {
	f, err := openTempFile(b.pool.dir)
	if err != nil {
		return
	}
	offset, err := b.rw.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = b.rw.Seek(0, io.SeekStart)
	}
	if err == nil {
		_, err = io.Copy(f, b.rw)
	}
	if err == nil {
		_, err = f.Seek(offset, io.SeekStart)
	}
	if err != nil {
		f.Close()
		b.rw.Seek(offset, io.SeekStart)
		return
	}
	b.pool.mem.PutBuffer(b.rw)
	b.rw, b.file = f, f
	b.pool.spilled.Add(1)
}

// openTempFile opens a new temporary file in dir that has no name, so that
// nothing is left of it once closed, even after a crash: an O_TMPFILE file,
// else a file removed as soon as it is created.
func openTempFile(dir string) (*os.File, error) {
	if f, err := os.OpenFile(dir, os.O_RDWR|unix.O_TMPFILE, 0o600); err == nil {
		return f, nil
	}
	f, err := os.CreateTemp(dir, ".pages-*.tmp")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
