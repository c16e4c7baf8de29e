package uploader_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lakeside/lakeside/uploader"
)

var errKilled = errors.New("killed by the test")

// killer is a hook that fails every request from the k-th hook call on,
// simulating a process killed at that point: before a request is sent, or
// after it succeeded but before the uploader recorded it.
type killer struct {
	mu    sync.Mutex
	k, n  int
	dead  bool
	order *orderChecker
}

func (k *killer) hook(ctx context.Context, r request) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if r.After && k.order != nil {
		// The request succeeded, whatever happens next.
		k.order.hook(ctx, r)
	}
	if k.dead {
		return errKilled
	}
	k.n++
	if k.n == k.k {
		k.dead = true
		return errKilled
	}
	return nil
}

// TestKillAtRandomPoints kills the upload at random requests (between data
// and commit, mid-multipart, between a put and its record) and restarts a
// new Uploader on the same state each time: in the end the remote equals the
// local table, every row is there once and every commit is the local one.
func TestKillAtRandomPoints(t *testing.T) {
	eachBackend(t, func(t *testing.T, newBackend func(t *testing.T) *backend) {
		b := newBackend(t)
		root := t.TempDir()
		db := openDB(t, t.TempDir())
		lt := newLocalTable(t, root, "public.items")
		order := newOrderChecker(t, root)
		ctx := t.Context()
		big := func(o *uploader.Options) {
			o.MultipartThreshold = 5<<20 + 1
			o.PartSize = 5 << 20
		}
		kills, finished := 0, false
		for round := 0; round < 60 && !finished; round++ {
			if round%4 == 0 && round < 24 {
				for range 3 {
					lt.commit(2, 10)
				}
				if round == 8 {
					lt.commit(5600, 2000) // about 11 MiB: three parts
				}
			}
			k := &killer{k: 1 + rand.N(14), order: order}
			if round >= 30 {
				k.k = 0 // let it finish
			}
			u := newUploader(t, db, b, root, big, withHook(k.hook))
			err := u.SyncOnce(ctx)
			switch {
			case k.dead:
				kills++
				if !errors.Is(err, errKilled) {
					t.Fatalf("round %d: killed, err = %v", round, err)
				}
			case err != nil:
				t.Fatalf("round %d: %v", round, err)
			case round >= 24:
				finished = true
			}
		}
		if !finished {
			t.Fatal("never finished")
		}
		t.Logf("%s: %d kills before the remote caught up with version %d", b.name, kills, lt.version)
		checkRemoteEqualsLocal(t, b, lt, lt.version)
		rows := rowsAt(t, b.download(t, lt.name), lt.version)
		seen := map[string]bool{}
		for _, r := range rows {
			if seen[r] {
				t.Fatalf("row %s twice", r)
			}
			seen[r] = true
		}
		if int64(len(rows)) != lt.nextID {
			t.Fatalf("remote has %d rows, want %d", len(rows), lt.nextID)
		}
	})
}
