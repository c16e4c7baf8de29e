package main

import (
	"io"
	"sync"
)

// lockedWriter serialises writes from a child process's output copier with
// reads by the test.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
