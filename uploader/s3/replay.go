package s3

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
)

// Retries without buffering.
//
// go-retryablehttp replays a request body it can seek; any other body it
// reads whole into memory first, before the first attempt. A data file or a
// part is many megabytes, so the client hands the transport a way to read the
// same bytes again (uploader.Body.Reopen) through the request's context, and
// the transport gives retryablehttp a body that seeks to its start by
// reopening. The first attempt still sends the body minio-go prepared.

// reopenKey is the context key of a request's reopener.
type reopenKey struct{}

// reopener reads a request's body again from the start.
type reopener struct {
	open func() io.Reader
	size int64
}

// withReopen returns ctx carrying open, which reads the size bytes of the
// body again; a nil open leaves ctx as it is.
func withReopen(ctx context.Context, open func() io.Reader, size int64) context.Context {
	if open == nil {
		return ctx
	}
	return context.WithValue(ctx, reopenKey{}, reopener{open: open, size: size})
}

// replayTransport passes requests to next, giving those whose context
// carries a reopener a body that replays by reopening.
type replayTransport struct{ next http.RoundTripper }

func (t replayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ro, ok := r.Context().Value(reopenKey{}).(reopener)
	// The body must be the bytes themselves: not a signed, chunked or
	// trailed encoding of them, which minio-go would make of some bodies.
	if !ok || r.Body == nil || r.ContentLength != ro.size || r.Header.Get("Content-Encoding") != "" ||
		strings.HasPrefix(r.Header.Get("X-Amz-Content-Sha256"), "STREAMING") {
		return t.next.RoundTrip(r)
	}
	r2 := *r
	r2.Body = &replayBody{cur: r.Body, open: ro.open}
	return t.next.RoundTrip(&r2)
}

// errSeek is returned for any seek but to the start.
var errSeek = errors.New("a request body seeks only to its start")

// replayBody reads cur; seeking to the start after bytes were read makes
// it read a reopened reader instead.
type replayBody struct {
	cur  io.Reader
	open func() io.Reader
	read bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	if b.cur == nil {
		b.cur = b.open()
	}
	n, err := b.cur.Read(p)
	if n > 0 {
		b.read = true
	}
	return n, err
}

func (b *replayBody) Seek(offset int64, whence int) (int64, error) {
	if offset != 0 || whence != io.SeekStart {
		return 0, errSeek
	}
	if b.read {
		b.cur, b.read = nil, false
	}
	return 0, nil
}

// Close does nothing: minio-go owns the first body, and reopened readers
// need no closing.
func (b *replayBody) Close() error { return nil }
