package s3test

import (
	"bytes"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
)

func TestStartPutGetRestart(t *testing.T) {
	s := Start(t)
	bucket := s.NewBucket()
	c := s.Client()
	ctx := t.Context()
	if _, err := c.PutObject(ctx, bucket, "a/b", bytes.NewReader([]byte("hello")), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := c.StatObject(ctx, bucket, "a/b", minio.StatObjectOptions{}); err == nil {
		t.Fatal("stat succeeded while the server is stopped")
	}
	s.Restart()
	r, err := c.GetObject(ctx, bucket, "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello" {
		t.Fatalf("got %q, %v", b, err)
	}
}
