package uploader_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/s3"
)

// TestStalledBucketIsAnOfflineReplica makes the bucket stop answering
// while two tables have versions to upload: their requests are cancelled
// by their deadline, counted as stalls and reported as such, and once
// the bucket answers again every table is uploaded.
func TestStalledBucketIsAnOfflineReplica(t *testing.T) {
	srv := s3test.Start(t)
	px := s3test.NewStallingProxy(t, srv)
	b := s3Backend(t, srv, func(c *s3.Config) {
		c.Endpoint = px.Endpoint()
		c.Deadlines = s3.Deadlines{Stall: 500 * time.Millisecond, MinRate: 1 << 20}
	})
	root := t.TempDir()
	db := openDB(t, t.TempDir())
	tables := []*localTable{newLocalTable(t, root, "public.a"), newLocalTable(t, root, "public.b")}
	up := newUploader(t, db, b, root, func(o *uploader.Options) { o.PollInterval = 50 * time.Millisecond })
	stop := runUploader(up)
	defer stop()
	uploaded := func() bool {
		for _, lt := range tables {
			if v, _ := up.RemoteVersion(lt.name); v != lt.version {
				return false
			}
		}
		return true
	}
	for _, lt := range tables {
		lt.commit(3, 20)
	}
	up.Notify()
	waitFor(t, "first versions", 10*time.Second, uploaded)

	px.Stall(true)
	for range 3 {
		for _, lt := range tables {
			lt.commit(3, 20)
		}
		up.Notify()
	}
	waitFor(t, "a stall reported", 30*time.Second, func() bool {
		st := up.Status()
		return !st.Online && st.Stalls > 0 && strings.Contains(st.LastError, "stalled")
	})
	if st := up.Status(); uploaded() || st.Stalls > st.Failures {
		t.Fatalf("while stalled: %+v", st)
	}

	px.Stall(false)
	waitFor(t, "every table uploaded after the bucket answers again", 30*time.Second, uploaded)
	for _, lt := range tables {
		checkRemoteEqualsLocal(t, b, lt, lt.version)
	}
	if st := up.Status(); !st.Online {
		t.Fatalf("after recovery: %+v", st)
	}
}
