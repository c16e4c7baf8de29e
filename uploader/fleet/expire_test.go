package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// TestExpireLog expires a fleet table's log on a directory and on S3:
// within the retention nothing goes; past it the versions before the
// newest checkpoint old enough go, oldest first, and the table still
// opens with every site's progress; a second run deletes nothing.
func TestExpireLog(t *testing.T) {
	eachClient(t, func(t *testing.T, newClient func(t *testing.T) uploader.ReplicaClient) {
		ctx := context.Background()
		client := newClient(t)
		store := uploader.FleetStore(client)
		scratch := t.TempDir()
		proto, md := fleetSchema(t)
		for s := range 2 {
			if _, err := commitSite(ctx, store, siteOptions(t, s, 5, scratch), s, 1, 6, proto, md); err != nil {
				t.Fatal(err)
			}
		}
		log := fleet.NewLog(store, table)
		head, err := log.Latest(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := log.ExpireLog(ctx, time.Now(), time.Hour, 5); err != nil || n != 0 {
			t.Fatalf("expiry within the retention deleted %d objects: %v", n, err)
		}
		n, err := log.ExpireLog(ctx, time.Now().Add(2*time.Hour), time.Hour, 5)
		if err != nil {
			t.Fatal(err)
		}
		lc, err := log.LastCheckpoint(ctx)
		if err != nil || lc == nil {
			t.Fatalf("_last_checkpoint: %v, %v", lc, err)
		}
		present := func(name string) bool {
			rc, err := client.GetObject(ctx, table+"/_delta_log/"+name)
			if errors.Is(err, uploader.ErrNotFound) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, rc)
			rc.Close()
			return true
		}
		for v := int64(0); v <= head; v++ {
			if got, want := present(delta.CommitFileName(v)), v >= lc.Version; got != want {
				t.Errorf("version %d present %v after expiry, want %v (checkpoint %d)", v, got, want, lc.Version)
			}
		}
		if present(delta.CheckpointFileName(5)) || !present(delta.CheckpointFileName(lc.Version)) {
			t.Errorf("checkpoint 5 should go and %d stay", lc.Version)
		}
		if want := int(lc.Version) + int(lc.Version)/5 - 1; n != want {
			t.Errorf("deleted %d objects, want %d", n, want)
		}
		for s := range 2 {
			w, err := fleet.Open(ctx, store, table, siteOptions(t, s, 5, scratch))
			if err != nil {
				t.Fatalf("site %d after expiry: %v", s, err)
			}
			if local, _, ok := w.Progress(w.AppID("mirror", fmt.Sprintf("local-site-%d", s))); !ok || local != 6 {
				t.Errorf("site %d after expiry: progress %d (%v), want 6", s, local, ok)
			}
		}
		if n, err := log.ExpireLog(ctx, time.Now().Add(2*time.Hour), time.Hour, 5); err != nil || n != 0 {
			t.Errorf("a second expiry deleted %d objects: %v", n, err)
		}
	})
}
