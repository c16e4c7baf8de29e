package source

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// spinPair returns a spinConn dialled to a Unix socket and the server's end.
func spinPair(t *testing.T) (*spinConn, net.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := dialSpin(context.Background(), "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); server.Close() })
	sc, ok := c.(*spinConn)
	if !ok {
		t.Fatalf("dialSpin returned a %T", c)
	}
	return sc, server
}

func TestSpinConnReadsEverythingSentInPieces(t *testing.T) {
	c, server := spinPair(t)
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		// Pieces of every size, some sent at once, some after a pause
		// longer than the reader spins.
		rest := want
		for i := 1; len(rest) > 0; i++ {
			n := min(len(rest), i*37%5000+1)
			server.Write(rest[:n])
			rest = rest[n:]
			if i%50 == 0 {
				time.Sleep(2 * spinFor)
			}
		}
		server.Close()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes differing from the %d sent", len(got), len(want))
	}
}

func TestSpinConnKeepsTheReadDeadline(t *testing.T) {
	c, server := spinPair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 10)
	_, err := c.Read(buf)
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	// The connection works again once the deadline is cleared.
	c.SetReadDeadline(time.Time{})
	server.Write([]byte("hello"))
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read after the deadline: %q, %v", buf[:n], err)
	}
	// A deadline in the past interrupts a waiting read, as pgconn does to
	// cancel one.
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(buf)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.SetReadDeadline(time.Unix(1, 0))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("interrupted read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline in the past did not interrupt the read")
	}
}
