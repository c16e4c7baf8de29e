package faultnet

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestProxyFaults runs an echo server behind a proxy: bytes pass, a
// black hole holds them until it ends, a slow proxy delays each kilobyte,
// and a cut closes the connection.
func TestProxyFaults(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(line))
				}
			}()
		}
	}()
	p := Start(t, ln.Addr().String())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	echo := func(s string, within time.Duration) error {
		c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			return err
		}
		_, err := r.ReadString('\n')
		return err
	}
	if err := echo("one", time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetMode(Blackhole)
	if err := echo("two", 300*time.Millisecond); err == nil {
		t.Fatal("a black hole forwarded a line")
	}
	// Back from the black hole, what waited arrives.
	p.SetMode(Pass)
	c.SetDeadline(time.Now().Add(time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "two\n" {
		t.Fatalf("after the black hole: %q, %v", line, err)
	}
	p.SetMode(Slow)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c2.Write([]byte("three\n"))
	if _, err := bufio.NewReader(c2).ReadString('\n'); err != nil {
		t.Fatalf("slow: %v", err)
	}
	if took := time.Since(start); took < 2*SlowDelay {
		t.Errorf("a slow round trip took %s", took)
	}
	p.SetMode(Pass)
	p.Cut()
	c2.SetDeadline(time.Now().Add(time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Error("a cut connection still reads")
	}
}
