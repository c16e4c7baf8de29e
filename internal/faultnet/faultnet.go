// Package faultnet is a TCP proxy for tests that stands between a client
// and a server and injects network faults: it cuts every connection,
// black-holes them (accepts and forwards nothing) or slows them.
package faultnet

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Mode is how the proxy forwards bytes.
type Mode int

const (
	// Pass forwards every byte at once.
	Pass Mode = iota
	// Blackhole forwards nothing: connections stay open and what is sent
	// waits, as over a link that lost its route, where TCP retransmits
	// until the route is back or a side gives up.
	Blackhole
	// Slow forwards each read of at most 1 KiB after SlowDelay.
	Slow
)

// SlowDelay is how long Slow holds each read of at most 1 KiB: about
// 10 KiB/s, under the agent's stall bound.
const SlowDelay = 100 * time.Millisecond

// Proxy forwards connections from its address to a target address.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   Mode
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Start starts a proxy on a loopback port in front of target (host:port);
// the test's cleanup stops it.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// SetMode changes how every connection, open or new, forwards bytes.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	p.mode = m
	p.mu.Unlock()
}

// Cut closes every open connection, both ways; new ones are accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

func (p *Proxy) currentMode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// closed reports whether Cut or the proxy's end closed c.
func (p *Proxy) closed(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, open := p.conns[c]
	return !open
}

// pipe copies from src to dst by the proxy's mode until either closes.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		mode := p.currentMode()
		for mode == Blackhole {
			time.Sleep(10 * time.Millisecond)
			if mode = p.currentMode(); p.closed(src) {
				return
			}
		}
		chunk := buf
		if mode == Slow {
			chunk = buf[:1024]
		}
		n, err := src.Read(chunk)
		if n > 0 {
			for p.currentMode() == Blackhole && !p.closed(src) {
				time.Sleep(10 * time.Millisecond)
			}
			if mode == Slow {
				time.Sleep(SlowDelay)
			}
			if _, werr := dst.Write(chunk[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: close the other way too
		}
	}
}
