package applier

import "github.com/lakeside/lakeside/delta"

// closer closes a table's full data files in the background, one at a
// time. A delta.DataWriter encodes each row group of RowGroupRows rows as
// it fills, and the last one (or the only one) when it closes: closed in
// the background, that is encoded, written and synced while the next file
// fills, instead of holding up the rows that follow. At most one file
// closes at a time, so a table holds at most two files' rows.
type closer struct {
	closing *closingFile
}

// dataFile is a data file being written, as closer needs it: a
// *delta.DataWriter.
type dataFile interface {
	NumRows() int64
	Close() (*delta.Add, error)
	Abort()
}

// closingFile is a data file closing in the background. Once done is
// closed, add and rows describe the file written, or err tells why not.
type closingFile struct {
	done chan struct{}
	add  *delta.Add
	rows int64
	err  error
	// then records the file, in the goroutine that waits for it.
	then func(add *delta.Add, rows int64)
}

// start waits for the file closing before, then starts closing w; then
// is called with w's add action and row count by the start or wait that
// finds it closed, in that caller's goroutine. Files are recorded in the
// order they were started. When the file before failed, w is aborted and
// that error returned.
func (c *closer) start(w dataFile, then func(add *delta.Add, rows int64)) error {
	if err := c.wait(); err != nil {
		w.Abort()
		return err
	}
	f := &closingFile{done: make(chan struct{}), then: then}
	c.closing = f
	go func() {
		defer close(f.done)
		f.rows = w.NumRows()
		f.add, f.err = w.Close()
	}()
	return nil
}

// wait waits for the file closing, if any, and records it.
func (c *closer) wait() error {
	f := c.closing
	if f == nil {
		return nil
	}
	<-f.done
	c.closing = nil
	if f.err != nil {
		return f.err
	}
	f.then(f.add, f.rows)
	return nil
}

// abort waits for the file closing, if any, without recording it: the
// flush it belongs to has failed, and nothing will reference the file
// (like a file written before a crash, vacuum deletes it).
func (c *closer) abort() {
	if f := c.closing; f != nil {
		<-f.done
		c.closing = nil
	}
}
