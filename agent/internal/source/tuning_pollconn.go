package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// spinFor is how long a read of the replication connection keeps trying
// before it waits for the socket.
const spinFor = 50 * time.Microsecond

// holdFor is how long a wait stays in poll(2) before it parks in Go's
// network poller (see pollConn.wait).
const holdFor = 2 * time.Millisecond

// pollConn is a net.Conn over a connected socket that Go's network poller
// does not watch; its reads and writes wait for the socket in poll(2),
// and past holdFor in an epoll instance of their own.
//
// Go registers each socket it opens with its epoll instance, for as long
// as the socket is open. Each send by the peer then runs epoll's callback
// in the peer's own system call. A walsender draining a backlog sends one
// message every few microseconds, so it paid for that callback a million
// times per million rows: measured on 2 cores, the walsender used 6% more
// CPU than with pg_recvlogical, and the capture's pace is the walsender's.
// A socket waited for in poll(2) has a waiter only while the agent waits.
//
// Reads and writes may run side by side, one of each at a time.
//
// A read finding nothing to read keeps trying for spinFor before it waits,
// as a reader that sleeps whenever it has caught up is woken, at the
// walsender's expense, by nearly every message.
//
// A goroutine in a system call keeps its scheduler thread (P) until the
// runtime's monitor takes it back, which an idle monitor does only every
// 10 to 20 ms. A capture waiting in poll(2) for the next message could
// keep one of two threads from a flush that way: in runtime traces of the
// end-to-end bench, waiting in slices of 50 ms, it was in poll(2) for
// 225-308 ms of a 680-780 ms 1M-row flush while other goroutines were
// ready to run. So a wait longer than holdFor parks instead, in Go's
// network poller, on an epoll instance of the connection's own that
// watches the socket only for the length of that wait (parker). The first
// holdFor stays in poll(2):
// while capture catches up on one thread, a goroutine parked in the
// poller is woken only when the busy thread next looks at the network,
// and the short waits of a drain return at once.
//
// A performance trick, measured by TestBenchCapture and
// TestBenchDeltaEndToEnd (make bench); switched off by Config.Off.PollConn
// (LAKESIDE_TUNING_OFF=pollconn for the agent), which reads the stream
// through Go's network poller like any connection.
type pollConn struct {
	fd            int
	local, remote net.Addr
	// The deadlines, in Unix nanoseconds; 0 means none. The parkers keep
	// them too, as their files' read deadlines.
	readDeadline, writeDeadline atomic.Int64
	// readPark and writePark wait for the socket to be readable and
	// writable.
	readPark, writePark *parker
	// inUse is held shared by Read and Write and exclusively by Close,
	// so that the descriptor is not closed, and its number reused,
	// while either uses it.
	inUse  sync.RWMutex
	closed atomic.Bool
}

// dialPoll is a pgconn DialFunc that makes pollConns: it dials as net.Dialer
// does and keeps a duplicate of the socket's descriptor, which Go's poller
// does not watch, closing the original.
func dialPoll(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	// Closing the original takes it out of the poller; the socket stays
	// open through the duplicate.
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("dial %s %s: %T has no descriptor", network, addr, conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", network, addr, err)
	}
	fd, dupErr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("dial %s %s: %w", network, addr, err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("dial %s %s: duplicate socket: %w", network, addr, dupErr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("dial %s %s: %w", network, addr, err)
	}
	c := &pollConn{fd: fd, local: conn.LocalAddr(), remote: conn.RemoteAddr()}
	if c.readPark, err = newParker(fd, unix.EPOLLIN); err == nil {
		c.writePark, err = newParker(fd, unix.EPOLLOUT)
	}
	if err != nil {
		c.closeParkers()
		unix.Close(fd)
		return nil, fmt.Errorf("dial %s %s: %w", network, addr, err)
	}
	return c, nil
}

// Read reads what the socket holds, waiting for it when it is empty.
func (c *pollConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.inUse.RLock()
	defer c.inUse.RUnlock()
	var spinUntil time.Time
	for {
		if err := c.usable(&c.readDeadline); err != nil {
			return 0, c.opError("read", err)
		}
		n, err := unix.Read(c.fd, p)
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return 0, c.opError("read", err)
		}
		now := time.Now()
		if spinUntil.IsZero() {
			spinUntil = now.Add(spinFor)
		}
		if now.Before(spinUntil) {
			runtime.Gosched()
			continue
		}
		if err := c.wait(unix.POLLIN, &c.readDeadline, c.readPark); err != nil {
			return 0, c.opError("read", err)
		}
		spinUntil = time.Time{}
	}
}

// Write writes all of p, waiting whenever the socket's buffer is full.
func (c *pollConn) Write(p []byte) (int, error) {
	c.inUse.RLock()
	defer c.inUse.RUnlock()
	written := 0
	for written < len(p) {
		if err := c.usable(&c.writeDeadline); err != nil {
			return written, c.opError("write", err)
		}
		// MSG_NOSIGNAL: a peer gone is an error, not a SIGPIPE.
		n, err := unix.SendmsgN(c.fd, p[written:], nil, nil, unix.MSG_NOSIGNAL)
		switch {
		case err == nil:
			written += n
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := c.wait(unix.POLLOUT, &c.writeDeadline, c.writePark); err != nil {
				return written, c.opError("write", err)
			}
		default:
			return written, c.opError("write", err)
		}
	}
	return written, nil
}

// usable fails when the connection is closed or the deadline has passed.
func (c *pollConn) usable(deadline *atomic.Int64) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if d := deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait waits until the socket is ready for events (or has failed: the
// read or write that follows says how), the deadline passes, or the
// connection is closed: for up to holdFor in poll(2), then parked in p.
func (c *pollConn) wait(events int16, deadline *atomic.Int64, p *parker) error {
	holdUntil := time.Now().Add(holdFor)
	for {
		if err := c.usable(deadline); err != nil {
			return err
		}
		timeout := time.Until(holdUntil)
		if timeout <= 0 {
			break
		}
		if d := deadline.Load(); d != 0 {
			timeout = min(timeout, time.Until(time.Unix(0, d)))
		}
		ts := unix.NsecToTimespec(max(timeout, 0).Nanoseconds())
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: events}}
		n, err := unix.Ppoll(fds, &ts, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return err
		case n > 0:
			return nil
		}
	}
	err := p.wait()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded
	case err != nil && c.closed.Load():
		return net.ErrClosed
	}
	return err
}

func (c *pollConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.local.Network(), Source: c.local, Addr: c.remote, Err: err}
}

// Close closes the socket. A read or write waiting for it returns at once:
// shutting the socket down wakes it.
func (c *pollConn) Close() error {
	if c.closed.Swap(true) {
		return c.opError("close", net.ErrClosed)
	}
	unix.Shutdown(c.fd, unix.SHUT_RDWR)
	c.inUse.Lock()
	defer c.inUse.Unlock()
	c.closeParkers()
	if err := unix.Close(c.fd); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// closeParkers closes the parkers made.
func (c *pollConn) closeParkers() {
	for _, p := range []*parker{c.readPark, c.writePark} {
		if p != nil {
			p.close()
		}
	}
}

// LocalAddr returns the local address the socket was dialled from.
func (c *pollConn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the address the socket was dialled to.
func (c *pollConn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read and the write deadline.
func (c *pollConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the time after which reads fail; the zero time
// means never.
func (c *pollConn) SetReadDeadline(t time.Time) error {
	c.readDeadline.Store(deadlineNanos(t))
	return c.readPark.setDeadline(t)
}

// SetWriteDeadline sets the time after which writes fail; the zero time
// means never.
func (c *pollConn) SetWriteDeadline(t time.Time) error {
	c.writeDeadline.Store(deadlineNanos(t))
	return c.writePark.setDeadline(t)
}

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// parker waits for a socket to be ready for one kind of events without
// keeping a scheduler thread: in Go's network poller, on an epoll instance
// of its own, which the poller watches and which watches the socket only
// while parker waits. Its file's read deadline is the connection's
// deadline for that kind of events, which wakes a wait when it passes.
type parker struct {
	sock   int
	events uint32
	ep     *os.File
	raw    syscall.RawConn
	ready  [1]unix.EpollEvent
}

// newParker makes the epoll instance of a parker of the socket sock for
// events.
func newParker(sock int, events uint32) (*parker, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	// Non-blocking, the instance goes into Go's poller (os.NewFile).
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	f := os.NewFile(uintptr(ep), "epoll")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("epoll: %w", err)
	}
	return &parker{sock: sock, events: events, ep: f, raw: raw}, nil
}

// wait parks until the socket is ready for the parker's events, or has
// failed, or the deadline passes (os.ErrDeadlineExceeded), or the parker
// is closed.
func (p *parker) wait() error {
	var werr error
	err := p.raw.Control(func(ep uintptr) {
		ev := unix.EpollEvent{Events: p.events, Fd: int32(p.sock)}
		werr = unix.EpollCtl(int(ep), unix.EPOLL_CTL_ADD, p.sock, &ev)
	})
	if err = cmp.Or(err, werr); err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	defer p.raw.Control(func(ep uintptr) { unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, p.sock, nil) })
	// Read calls the function until it reports done, parking between
	// calls until the instance is readable: until the socket is ready.
	err = p.raw.Read(func(ep uintptr) bool {
		n, err := unix.EpollWait(int(ep), p.ready[:], 0)
		werr = err
		return n > 0 || err != nil && err != unix.EINTR
	})
	return cmp.Or(err, werr)
}

// setDeadline sets the time after which a wait fails; the zero time means
// never.
func (p *parker) setDeadline(t time.Time) error { return p.ep.SetReadDeadline(t) }

// close closes the epoll instance; a wait returns.
func (p *parker) close() error { return p.ep.Close() }
