package source

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pollPair returns a pollConn dialled to a Unix socket and the server's end.
func pollPair(t *testing.T) (*pollConn, net.Conn) {
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
	c, err := dialPoll(context.Background(), "unix", path)
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); server.Close() })
	pc, ok := c.(*pollConn)
	if !ok {
		t.Fatalf("dialPoll returned a %T", c)
	}
	return pc, server
}

func TestPollConnReadsEverythingSentInPieces(t *testing.T) {
	c, server := pollPair(t)
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

func TestPollConnWritesPastAFullBuffer(t *testing.T) {
	c, server := pollPair(t)
	// Far more than the socket buffers hold: the writes wait for the
	// server, which starts reading late.
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<19)
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		b, _ := io.ReadAll(server)
		got <- b
	}()
	if n, err := c.Write(want); err != nil || n != len(want) {
		t.Fatalf("wrote %d of %d bytes: %v", n, len(want), err)
	}
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("server read %d bytes differing from the %d written", len(b), len(want))
	}
}

func TestPollConnKeepsTheDeadlines(t *testing.T) {
	c, server := pollPair(t)
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
	// A write that the server never reads fails at its deadline.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v, want a timeout", err)
	}
}

func TestPollConnParksALongWait(t *testing.T) {
	// A read waiting past holdFor leaves its scheduler thread: it waits
	// in Go's poller ("IO wait"), not in a system call, on an epoll
	// instance that watches the socket only while it waits.
	c, server := pollPair(t)
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 10)
		n, err := c.Read(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	var stacks []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stacks = make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		if parkedReads(stacks) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiting read never parked in Go's poller; goroutines:\n%s", stacks)
		}
	}
	if !epollWatched(t)[c.fd] {
		t.Fatalf("no epoll instance watches the socket (fd %d) while a read waits for it", c.fd)
	}
	server.Write([]byte("woken"))
	select {
	case s := <-got:
		if s != "woken" {
			t.Fatalf("the parked read returned %q, want %q", s, "woken")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("data sent did not wake the parked read")
	}
	if epollWatched(t)[c.fd] {
		t.Fatalf("an epoll instance still watches the socket (fd %d) after the wait", c.fd)
	}
}

// parkedReads counts the goroutines of a stack dump that wait in Go's
// poller inside parker.wait.
func parkedReads(stacks []byte) int {
	n := 0
	for _, g := range strings.Split(string(stacks), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, "(*parker).wait") {
			n++
		}
	}
	return n
}

func TestPollConnCloseEndsAWaitingRead(t *testing.T) {
	c, _ := pollPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a read of a closed connection succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the waiting read")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after Close: %v, want net.ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v, want net.ErrClosed", err)
	}
}

func TestPollConnOverTCP(t *testing.T) {
	// A DSN may name a host rather than a socket directory.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		s, err := l.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		io.Copy(s, s) // echo until the client closes its end
	}()
	c, err := dialPoll(context.Background(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*pollConn); !ok {
		t.Fatalf("dialPoll returned a %T", c)
	}
	if c.RemoteAddr().String() != l.Addr().String() {
		t.Fatalf("remote address %v, want %v", c.RemoteAddr(), l.Addr())
	}
	want := bytes.Repeat([]byte("tcp "), 1<<16)
	go c.Write(want)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("echo over TCP: %v", err)
	}
}

func TestPollConnIsNotWatchedByGosPoller(t *testing.T) {
	// The point of pollConn: the walsender's sends must not run the
	// callback of Go's epoll instance. As a check of the check, a socket
	// dialled the usual way is watched.
	c, _ := pollPair(t)
	path := filepath.Join(t.TempDir(), "plain")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	plain, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	raw, _ := plain.(*net.UnixConn).SyscallConn()
	plainFD := -1
	raw.Control(func(fd uintptr) { plainFD = int(fd) })

	watched := epollWatched(t)
	if !watched[plainFD] {
		t.Fatalf("a socket dialled with net.Dial (fd %d) is not among those Go's poller watches %v: the check finds nothing", plainFD, watched)
	}
	if watched[c.fd] {
		t.Fatalf("the pollConn's socket (fd %d) is watched by Go's poller", c.fd)
	}
}

// epollWatched returns the descriptors that the process's epoll instances
// watch, from /proc/self/fdinfo.
func epollWatched(t *testing.T) map[int]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	watched := map[int]bool{}
	instances := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || target != "anon_inode:[eventpoll]" {
			continue
		}
		instances++
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", fd.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" {
				n, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatalf("fdinfo line %q: %v", line, err)
				}
				watched[n] = true
			}
		}
	}
	if instances == 0 {
		t.Fatal("no epoll instance in /proc/self/fd")
	}
	return watched
}
