//go:build bench

package uploader_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
)

// benchRounds is how many times the throughput is measured; medians are
// printed.
const benchRounds = 9

// tableFiles lists the files of a local table (not the hidden ones) and
// their total size.
func tableFiles(t *testing.T, dir string) (files []string, total int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(p)[0] == '.' {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files, total = append(files, p), total+fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, total
}

// rawPut uploads files with minio-go's FPutObject, workers at a time, to a
// new bucket (keys relative to root), and returns how long it took: the
// baseline the uploader is compared with.
func rawPut(t *testing.T, srv *s3test.Server, root string, files []string, workers int) time.Duration {
	t.Helper()
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
	return time.Since(start)
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestBenchThroughput uploads a backlog of many small versions and a few
// large ones with the uploader, and the same files with raw minio-go
// PutObject (same concurrency) to the same versitygw, benchRounds times in
// alternating order after a warm-up, and prints the median ratio and the
// requests per committed version. Run with
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
	files, total := tableFiles(t, lt.tbl.Path())
	const workers = uploader.DefaultConcurrency

	rawPut(t, srv, root, files, workers) // warm-up (page cache, server), not counted
	var raws, ours []time.Duration
	var ratios []float64
	var st uploader.Status
	for round := range benchRounds {
		var raw, up time.Duration
		runOurs := func() {
			u := newUploader(t, openDB(t, t.TempDir()), s3Backend(t, srv), root)
			start := time.Now()
			if err := u.SyncOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			up = time.Since(start)
			st = u.Status()
		}
		if round%2 == 0 {
			raw = rawPut(t, srv, root, files, workers)
			runOurs()
		} else {
			runOurs()
			raw = rawPut(t, srv, root, files, workers)
		}
		raws, ours = append(raws, raw), append(ours, up)
		ratios = append(ratios, raw.Seconds()/up.Seconds())
	}
	slices.Sort(ratios)
	mb := float64(total) / (1 << 20)
	raw, up := medianDuration(raws), medianDuration(ours)
	t.Logf("%d files, %.1f MiB, %d versions, median of %d rounds", len(files), mb, lt.version+1, benchRounds)
	t.Logf("raw minio-go PutObject: %s (%.1f MiB/s)", raw.Round(time.Millisecond), mb/raw.Seconds())
	t.Logf("uploader:               %s (%.1f MiB/s)", up.Round(time.Millisecond), mb/up.Seconds())
	t.Logf("throughput ratio uploader/raw: %.2f (rounds: %.2f; target >= 0.9)", ratios[len(ratios)/2], ratios)
	t.Logf("requests per committed version: %.2f (%d requests, %d versions)", float64(st.Requests)/float64(st.Versions), st.Requests, st.Versions)
}

// TestBenchCatchUp builds a backlog of about 1 GiB of Delta files over many
// versions while the replica is down, with the uploader running (offline,
// backing off), then brings the replica back and measures the time until the
// remote has the last version. The baseline is raw minio-go PutObject of the
// same files, same concurrency, to the same server.
func TestBenchCatchUp(t *testing.T) {
	srv := s3test.Start(t)
	root := t.TempDir()
	lt := newLocalTable(t, root, "public.items")
	u := newUploader(t, openDB(t, t.TempDir()), s3Backend(t, srv), root, func(o *uploader.Options) {
		o.PollInterval = 50 * time.Millisecond
		o.MinBackoff, o.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	})
	srv.Stop()
	stop := runUploader(u)
	defer stop()
	for range 450 {
		lt.commit(2000, 1000) // about 2 MB each
		u.Notify()
	}
	for range 4 {
		lt.commit(16000, 2000) // about 32 MB each: multipart
		u.Notify()
	}
	files, total := tableFiles(t, lt.tbl.Path())
	waitFor(t, "the backlog to be counted", time.Minute, func() bool { return u.Backlog().Versions == lt.version+1 })
	backlog := u.Backlog()

	srv.Restart()
	start := time.Now()
	remote := func() int64 {
		for _, ts := range u.Status().Tables {
			return ts.RemoteVersion
		}
		return -1
	}
	waitFor(t, "the remote to catch up", 30*time.Minute, func() bool { return remote() == lt.version })
	catchUp := time.Since(start)
	stop()
	raw := rawPut(t, srv, root, files, uploader.DefaultConcurrency)

	mb := float64(total) / (1 << 20)
	t.Logf("backlog: %d versions, %.1f MiB (%d files; %.1f MiB counted by the uploader)",
		backlog.Versions, mb, len(files), float64(backlog.Bytes)/(1<<20))
	t.Logf("catch-up after the replica returned: %s (%.1f MiB/s)", catchUp.Round(time.Millisecond), mb/catchUp.Seconds())
	t.Logf("raw minio-go PutObject of the same files: %s (%.1f MiB/s)", raw.Round(time.Millisecond), mb/raw.Seconds())
	t.Logf("catch-up ratio uploader/raw: %.2f", raw.Seconds()/catchUp.Seconds())
}
