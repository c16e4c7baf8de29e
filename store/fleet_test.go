package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestFleetRuns records runs per target, keeps the newest MaxFleetRuns,
// and fails on a corrupt record.
func TestFleetRuns(t *testing.T) {
	db := openTest(t)
	for i := range MaxFleetRuns + 5 {
		if err := db.Update(func(w *Writer) error { return w.AddFleetRun("s3://b/x", fmt.Sprintf("run-%d", i)) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(w *Writer) error { return w.AddFleetRun("file:///y", "other") }); err != nil {
		t.Fatal(err)
	}
	var runs, other, none []string
	err := db.View(func(r *Reader) (err error) {
		if runs, err = r.FleetRuns("s3://b/x"); err != nil {
			return err
		}
		if other, err = r.FleetRuns("file:///y"); err != nil {
			return err
		}
		none, err = r.FleetRuns("s3://none")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != MaxFleetRuns || runs[0] != "run-5" || runs[len(runs)-1] != fmt.Sprintf("run-%d", MaxFleetRuns+4) {
		t.Errorf("runs: %d, from %s to %s", len(runs), runs[0], runs[len(runs)-1])
	}
	if len(other) != 1 || other[0] != "other" || none != nil {
		t.Errorf("other target %v, unknown target %v", other, none)
	}
	if err := db.Update(func(w *Writer) error {
		b := w.tx.Bucket(bucketFleetRuns)
		return b.Put([]byte("file:///y"), []byte{recordFleetRuns, 200})
	}); err != nil {
		t.Fatal(err)
	}
	err = db.View(func(r *Reader) error { _, err := r.FleetRuns("file:///y"); return err })
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("corrupt record: %v", err)
	}
}
