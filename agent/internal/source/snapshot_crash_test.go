package source

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestCrashAtEveryCommitOfTheSnapshot stops the source, in turn, at each
// commit of the state file that creating the slot and copying the initial
// snapshot makes (the commit fails, as a crash just before it would), and
// once the snapshot is queued and durable; then it starts again. Whenever
// the state file holds the queued snapshot, it also records the snapshot
// as done: a restart that found the snapshot queued but not done would
// start it over on a new slot, and the applier could have applied the
// first copy already. After the restart the queue holds exactly one
// snapshot.
func TestCrashAtEveryCommitOfTheSnapshot(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	h.exec(`CREATE TABLE items (id int PRIMARY KEY, v int)`, `INSERT INTO items SELECT g, g FROM generate_series(1, 100) g`)
	h.cfg.Tables = []Table{{"public", "items"}}
	errCrash := errors.New("simulated crash")
	for crashAt := 0; ; crashAt++ {
		h.stateDir = t.TempDir()
		commits := 0
		h.beforeCommit = func() error {
			commits++
			if commits == crashAt {
				return errCrash
			}
			return nil
		}
		h.failpoint = nil
		if crashAt == 0 {
			// Round 0 stops once the snapshot is queued and durable.
			h.failpoint = func(point string) error {
				if point != "snapshot-queued" {
					return nil
				}
				if err := h.src.writer.sync(context.Background()); err != nil {
					return err
				}
				h.cancel()
				return errCrash
			}
		}
		h.start()
		var crashed bool
		select {
		case err := <-h.done:
			if crashAt > 0 && !strings.Contains(fmt.Sprint(err), errCrash.Error()) {
				t.Fatalf("crash at commit %d: Run returned %v", crashAt, err)
			}
			crashed = true
			h.db.Close()
			h.src = nil
		case <-h.src.Ready():
		case <-time.After(60 * time.Second):
			t.Fatalf("crash at commit %d: the source neither failed nor streamed", crashAt)
		}
		if !crashed {
			// Every commit of the setup was made: the last round.
			h.stop()
			h.dropSlot()
			if crashAt < 3 {
				t.Fatalf("the setup made only %d commits", crashAt-1)
			}
			return
		}
		db, err := store.Open(h.stateDir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var queued bool
		var slot *store.SlotState
		err = db.View(func(r *store.Reader) error {
			if slot, err = r.SlotState(); err != nil {
				return err
			}
			return r.Txns(0, func(hd *store.TxnHeader, _ *store.TxnCursor) error {
				queued = queued || hd.Snapshot
				return nil
			})
		})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		if queued && (slot == nil || !slot.SnapshotDone) {
			t.Errorf("crash at commit %d: the snapshot is queued, but the slot state does not record it done", crashAt)
		}

		h.beforeCommit, h.failpoint = nil, nil
		h.start()
		h.waitStreaming()
		txns, _ := h.txns()
		snapshots := 0
		for _, txn := range txns {
			if txn.Snapshot {
				snapshots++
				if len(txn.Changes) != 100 {
					t.Errorf("crash at commit %d: the snapshot holds %d rows, want 100", crashAt, len(txn.Changes))
				}
			}
		}
		if snapshots != 1 {
			t.Errorf("crash at commit %d: the queue holds %d snapshots, want 1", crashAt, snapshots)
		}
		h.stop()
		h.dropSlot()
	}
}
