package source

import (
	"context"
	"io"
	"net"
	"runtime"
	"syscall"
	"time"
)

// spinFor is how long a read of the replication connection keeps trying
// before it waits to be woken.
const spinFor = 50 * time.Microsecond

// spinConn is a net.Conn whose reads, finding nothing to read, keep trying
// for spinFor before they wait for the socket to become readable.
//
// A walsender draining a backlog writes one message every few microseconds,
// each with its own send. A reader that waits for readability whenever it
// has caught up is woken by nearly every one of those sends, and the wakeup
// is paid by the walsender: on two cores, it was a tenth of its time, and
// the capture's pace is the walsender's. A reader that keeps trying for a
// few messages' time is seldom asleep when data comes.
type spinConn struct {
	net.Conn
	raw syscall.RawConn
}

// dialSpin is a pgconn DialFunc that wraps the connections it makes in a
// spinConn when they have a file descriptor to read.
func dialSpin(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return conn, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return conn, nil
	}
	return &spinConn{Conn: conn, raw: raw}, nil
}

// Read reads from the socket, trying again for spinFor when it is empty.
func (c *spinConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	var until time.Time
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			switch {
			case rerr == syscall.EINTR:
				continue
			case rerr == syscall.EAGAIN:
				now := time.Now()
				if until.IsZero() {
					until = now.Add(spinFor)
				}
				if now.After(until) {
					return false
				}
				runtime.Gosched()
				continue
			}
			return true
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, &net.OpError{Op: "read", Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: rerr}
	}
	if n <= 0 {
		return 0, io.EOF
	}
	return n, nil
}
