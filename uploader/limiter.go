package uploader

import (
	"context"
	"io"
)

// Limiter limits upload bandwidth. *rate.Limiter from golang.org/x/time/rate
// implements it; the uploader calls WaitN with at most Burst() bytes, after
// reading them from the local file and before handing them to the client.
type Limiter interface {
	WaitN(ctx context.Context, n int) error
	Burst() int
}

// limitedReader consults a Limiter for every byte read.
type limitedReader struct {
	ctx context.Context
	r   io.Reader
	lim Limiter
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if b := l.lim.Burst(); b > 0 && len(p) > b {
		p = p[:b]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.lim.WaitN(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
