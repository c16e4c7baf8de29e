//go:build bench

package uploader_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/s3test"
)

// TestBenchThroughput uploads a backlog of many small versions and a few
// large ones with the uploader, and the same files with raw minio-go
// PutObject (same concurrency) to the same versitygw, and prints the ratio
// and the requests per committed version. Run with
// go test -tags bench -run TestBench ./uploader/...
func TestBenchThroughput(t *testing.T) {
	srv := s3test.Start(t)
	root := t.TempDir()
	lt := newLocalTable(t, root, "public.items")
	for range 300 {
		lt.commit(20, 100) // small: a few KB each
	}
	for range 4 {
		lt.commit(10000, 2000) // large: about 20 MB each
	}
	var files []string
	filepath.WalkDir(lt.tbl.Path(), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p)[0] != '.' {
			files = append(files, p)
		}
		return nil
	})
	var total int64
	for _, f := range files {
		fi, _ := os.Stat(f)
		total += fi.Size()
	}
	const workers = uploader.DefaultConcurrency

	// Baseline: raw minio-go PutObject of every file, same concurrency.
	c := srv.Client()
	bucket := srv.NewBucket()
	start := time.Now()
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for _, f := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rel, _ := filepath.Rel(root, f)
			if _, err := c.FPutObject(context.Background(), bucket, "raw/"+rel, f, minio.PutObjectOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	raw := time.Since(start)

	b := s3Backend(t, srv)
	u := newUploader(t, openDB(t, t.TempDir()), b, root)
	start = time.Now()
	if err := u.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	ours := time.Since(start)
	st := u.Status()
	mb := float64(total) / (1 << 20)
	t.Logf("%d files, %.1f MiB, %d versions", len(files), mb, lt.version+1)
	t.Logf("raw minio-go PutObject: %s (%.1f MiB/s)", raw.Round(time.Millisecond), mb/raw.Seconds())
	t.Logf("uploader:               %s (%.1f MiB/s)", ours.Round(time.Millisecond), mb/ours.Seconds())
	t.Logf("throughput ratio uploader/raw: %.2f (target >= 0.9)", raw.Seconds()/ours.Seconds())
	t.Logf("requests per committed version: %.2f (%d requests, %d versions)", float64(st.Requests)/float64(st.Versions), st.Requests, st.Versions)
}
