package applier

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// fakeFile is a dataFile whose Close waits for release and then returns
// err, or an add action named after the file.
type fakeFile struct {
	name    string
	rows    int64
	release chan struct{}
	err     error
	aborted bool
}

func newFakeFile(name string, rows int64) *fakeFile {
	return &fakeFile{name: name, rows: rows, release: make(chan struct{})}
}

func (f *fakeFile) NumRows() int64 { return f.rows }
func (f *fakeFile) Abort()         { f.aborted = true }
func (f *fakeFile) Close() (*delta.Add, error) {
	<-f.release
	if f.err != nil {
		return nil, f.err
	}
	return &delta.Add{Path: f.name}, nil
}

// TestCloserClosesInTheBackground: start returns while the file closes,
// the next start waits for it, and the files are recorded in order with
// their row counts.
func TestCloserClosesInTheBackground(t *testing.T) {
	var c closer
	var got []string
	record := func(add *delta.Add, rows int64) { got = append(got, fmt.Sprintf("%s:%d", add.Path, rows)) }

	first := newFakeFile("a", 3)
	started := make(chan error, 1)
	go func() { started <- c.start(first, record) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("start waited for the file to close: it does not close in the background")
	}

	// The next start waits for the first file.
	second := newFakeFile("b", 5)
	go func() { started <- c.start(second, record) }()
	select {
	case <-started:
		t.Fatal("a second file started closing while the first was still closing")
	case <-time.After(50 * time.Millisecond):
	}
	close(first.release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	close(second.release)
	if err := c.wait(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:3", "b:5"}; !slices.Equal(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
	if err := c.wait(); err != nil || len(got) != 2 {
		t.Fatalf("a second wait returned %v and recorded %v", err, got)
	}
}

// TestCloserReportsAFailedClose: a file that fails to close is not
// recorded; the next start returns its error and aborts its own file, and
// abort waits without recording.
func TestCloserReportsAFailedClose(t *testing.T) {
	var c closer
	var got []string
	record := func(add *delta.Add, _ int64) { got = append(got, add.Path) }
	errDisk := errors.New("disk full")

	bad := newFakeFile("a", 1)
	bad.err = errDisk
	close(bad.release)
	if err := c.start(bad, record); err != nil {
		t.Fatal(err)
	}
	next := newFakeFile("b", 1)
	if err := c.start(next, record); !errors.Is(err, errDisk) {
		t.Fatalf("start after a failed close returned %v, want %v", err, errDisk)
	}
	if !next.aborted {
		t.Error("the file started after a failed close was not aborted")
	}

	last := newFakeFile("c", 1)
	if err := c.start(last, record); err != nil {
		t.Fatal(err)
	}
	close(last.release)
	c.abort()
	if len(got) != 0 {
		t.Fatalf("recorded %v, want nothing", got)
	}
	if err := c.wait(); err != nil {
		t.Fatalf("wait after abort returned %v", err)
	}
}
