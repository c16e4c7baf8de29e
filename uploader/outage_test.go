package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/s3"
)

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runUploader runs u until the returned stop function is called.
func runUploader(u *uploader.Uploader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// TestOutageAndRestart stops S3 while new versions keep coming, restarts the
// uploader while offline, then brings S3 back: the remote catches up, every
// row once, and every remote version a reader could open during catch-up
// had all its files.
func TestOutageAndRestart(t *testing.T) {
	srv := s3test.Start(t)
	b := s3Backend(t, srv)
	root := t.TempDir()
	db := openDB(t, t.TempDir())
	lt := newLocalTable(t, root, "public.items")
	fast := func(o *uploader.Options) { o.PollInterval = 50 * time.Millisecond }
	u := newUploader(t, db, b, root, fast)
	stop := runUploader(u)
	for range 5 {
		lt.commit(3, 20)
		u.Notify()
	}
	waitFor(t, "first versions", 10*time.Second, func() bool {
		v, _ := u.RemoteVersion(lt.name)
		return v == lt.version
	})

	srv.Stop()
	for range 6 {
		lt.commit(3, 20)
		u.Notify()
	}
	waitFor(t, "offline", 10*time.Second, func() bool { return !u.Status().Online })
	waitFor(t, "backlog", 10*time.Second, func() bool { return u.Backlog().Versions == 6 })
	if bl := u.Backlog(); bl.Bytes <= 0 || bl.Tables[lt.name].Versions != 6 {
		t.Fatalf("backlog = %+v", bl)
	}
	stop()

	// Restart while offline: a new uploader on the same state.
	// Slow requests and a small window make the catch-up last long enough
	// for the reader to look at several intermediate versions.
	small := func(o *uploader.Options) { o.Window = 2 }
	slow := withHook(func(ctx context.Context, r request) error {
		if !r.After {
			time.Sleep(15 * time.Millisecond)
		}
		return nil
	})
	u = newUploader(t, db, b, root, fast, small, slow)
	stop = runUploader(u)
	defer func() { stop() }()
	for range 9 {
		lt.commit(3, 20)
		u.Notify()
	}
	waitFor(t, "backlog after restart", 10*time.Second, func() bool { return u.Backlog().Versions == 15 })
	if st := u.Status(); st.Online || st.Tables[0].BacklogVersions != 15 || st.Tables[0].LocalVersion != lt.version {
		t.Fatalf("status while offline = %+v", st)
	}

	// A reader polls the remote during catch-up.
	var checks atomic.Int64
	var wg sync.WaitGroup
	readerCtx, stopReader := context.WithCancel(context.Background())
	wg.Go(func() {
		for readerCtx.Err() == nil {
			if checkRemoteComplete(t, b, lt.name) {
				checks.Add(1)
			}
		}
	})
	srv.Restart()
	waitFor(t, "catch-up", 30*time.Second, func() bool {
		v, _ := u.RemoteVersion(lt.name)
		return v == lt.version
	})
	stopReader()
	wg.Wait()
	t.Logf("%d remote snapshots checked during catch-up", checks.Load())
	// The pass that caught up reports online and an empty backlog when it
	// ends, a moment after the last commit went up.
	waitFor(t, "online with no backlog", 10*time.Second, func() bool {
		return u.Status().Online && u.Backlog().Versions == 0
	})
	checkRemoteEqualsLocal(t, b, lt, lt.version)
	rows := rowsAt(t, b.download(t, lt.name), lt.version)
	if int64(len(rows)) != lt.nextID {
		t.Fatalf("remote has %d rows, want %d", len(rows), lt.nextID)
	}
}

// checkRemoteComplete opens the latest remote version from its log alone and
// checks that every file it references exists. It reports false when the
// server did not answer.
func checkRemoteComplete(t *testing.T, b *backend, table string) bool {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "remote-log-")
	if err != nil {
		t.Error(err)
		return false
	}
	defer os.RemoveAll(dir)
	prefix := "lake/" + site + "/" + table + "/"
	if err := b.server.Download(ctx, b.bucket, prefix+delta.LogDirName, filepath.Join(dir, delta.LogDirName)); err != nil {
		return false
	}
	tbl, err := delta.Open(ctx, dir)
	if errors.Is(err, delta.ErrNotATable) {
		return false
	}
	if err != nil {
		t.Errorf("open remote log: %v", err)
		return false
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Errorf("remote snapshot: %v", err)
		return false
	}
	c := b.server.Client()
	for _, f := range snap.Files() {
		if _, err := c.StatObject(ctx, b.bucket, prefix+f.Path, minio.StatObjectOptions{}); err != nil {
			if minio.ToErrorResponse(err).Code == "NoSuchKey" {
				t.Errorf("remote version %d references missing %s", snap.Version(), f.Path)
			}
			return false
		}
	}
	return true
}

// corruptingTransport flips one byte of every PUT body after it was signed.
type corruptingTransport struct{ base http.RoundTripper }

func (c corruptingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && req.Body != nil && req.ContentLength > 0 {
		data, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		data[len(data)/2] ^= 0x01
		req.Body = io.NopCloser(bytes.NewReader(data))
	}
	return c.base.RoundTrip(req)
}

// TestCorruptBodyIsRejected checks that the server verifies the SHA-256 the
// uploader sends with each put and part, and that the file backend verifies
// it too.
func TestCorruptBodyIsRejected(t *testing.T) {
	body := func(data []byte) uploader.Body {
		return uploader.Body{R: bytes.NewReader(data), Size: int64(len(data)), SHA256: testSHA256(data)}
	}
	data := []byte(strings.Repeat("lakeside ", 1000))
	ctx := t.Context()

	srv := s3test.Start(t)
	b := s3Backend(t, srv, func(c *s3.Config) { c.Transport = corruptingTransport{http.DefaultTransport} })
	err := b.client.PutObject(ctx, "x/obj", body(data), uploader.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, uploader.ErrChecksumMismatch) {
		t.Fatalf("corrupt put: err = %v, want ErrChecksumMismatch", err)
	}
	mc := b.client.(uploader.MultipartClient)
	id, err := mc.CreateMultipartUpload(ctx, "x/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mc.UploadPart(ctx, "x/big", id, 1, body(data)); !errors.Is(err, uploader.ErrChecksumMismatch) {
		t.Fatalf("corrupt part: err = %v, want ErrChecksumMismatch", err)
	}
	// The same puts through a clean transport succeed.
	good := s3Backend(t, srv)
	if err := good.client.PutObject(ctx, "x/obj", body(data), uploader.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if err := good.client.PutObject(ctx, "x/obj", body(data), uploader.PutOptions{IfNoneMatch: true}); !errors.Is(err, uploader.ErrPreconditionFailed) {
		t.Fatalf("second conditional put: err = %v, want ErrPreconditionFailed", err)
	}
	if _, err := good.client.GetObject(ctx, "x/none"); !errors.Is(err, uploader.ErrNotFound) {
		t.Fatalf("get missing: err = %v, want ErrNotFound", err)
	}

	fc, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bad := body(data)
	bad.SHA256[0] ^= 0xff
	if err := fc.PutObject(ctx, "x/obj", bad, uploader.PutOptions{}); !errors.Is(err, uploader.ErrChecksumMismatch) {
		t.Fatalf("file backend: err = %v, want ErrChecksumMismatch", err)
	}
	if _, err := fc.GetObject(ctx, "x/obj"); !errors.Is(err, uploader.ErrNotFound) {
		t.Fatalf("file backend kept a corrupt object: %v", err)
	}
}

// countingLimiter records what the uploader asks of the bandwidth limiter.
type countingLimiter struct {
	mu      sync.Mutex
	total   int64
	maxCall int
}

func (c *countingLimiter) WaitN(ctx context.Context, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(n)
	c.maxCall = max(c.maxCall, n)
	return nil
}

func (c *countingLimiter) Burst() int { return 4096 }

// TestBandwidthLimiterIsConsulted checks that every uploaded byte goes
// through the limiter, in calls no larger than its burst.
func TestBandwidthLimiterIsConsulted(t *testing.T) {
	b := fileBackend(t)
	root := t.TempDir()
	lt := newLocalTable(t, root, "public.items")
	for range 12 {
		lt.commit(50, 100)
	}
	lim := &countingLimiter{}
	u := newUploader(t, openDB(t, t.TempDir()), b, root, func(o *uploader.Options) { o.Limiter = lim })
	if err := u.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := u.Status()
	if lim.total != st.BytesUploaded || lim.total == 0 || lim.maxCall > 4096 {
		t.Fatalf("limiter saw %d bytes (largest call %d), uploaded %d", lim.total, lim.maxCall, st.BytesUploaded)
	}

	// A real limit: about 200 KB/s for ~100 KB takes about half a second.
	lt2 := newLocalTable(t, t.TempDir(), "t")
	lt2.commit(1000, 100)
	root2 := filepath.Dir(lt2.tbl.Path())
	u2 := newUploader(t, openDB(t, t.TempDir()), fileBackend(t), root2, func(o *uploader.Options) { o.MaxBytesPerSecond = 200_000 })
	start := time.Now()
	if err := u2.SyncOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	rate := float64(u2.Status().BytesUploaded) / elapsed.Seconds()
	t.Logf("uploaded %d bytes in %s: %.0f B/s", u2.Status().BytesUploaded, elapsed, rate)
	if rate > 400_000 {
		t.Fatalf("rate %.0f B/s, limit 200000", rate)
	}
}
