package store

import "fmt"

// bucketFleetRuns holds, per replica target, the ids of the agent's runs
// that may have committed to fleet tables, oldest first. A fleet commit
// names its run; a commit naming the site's own appId and a run not listed
// here is another agent's, one that holds a copy of this state. The bucket
// is created on the first write.
var bucketFleetRuns = []byte("fleet_runs")

// MaxFleetRuns is how many runs FleetRuns keeps: a run older than that
// many starts has no commit a site still reads (it reads the commits since
// the newest checkpoint of a table).
const MaxFleetRuns = 256

// FleetRuns returns the recorded run ids of target, oldest first.
func (r *Reader) FleetRuns(target string) ([]string, error) {
	b := r.tx.Bucket(bucketFleetRuns)
	if b == nil {
		return nil, nil
	}
	data := b.Get([]byte(target))
	if data == nil {
		return nil, nil
	}
	runs, err := decodeFleetRuns(data)
	if err != nil {
		return nil, fmt.Errorf("fleet runs of %s: %w", target, err)
	}
	return runs, nil
}

// AddFleetRun records run as the newest run of target, dropping the
// oldest past MaxFleetRuns.
func (w *Writer) AddFleetRun(target, run string) error {
	runs, err := w.FleetRuns(target)
	if err != nil {
		return err
	}
	runs = append(runs, run)
	if len(runs) > MaxFleetRuns {
		runs = runs[len(runs)-MaxFleetRuns:]
	}
	b, err := w.tx.CreateBucketIfNotExists(bucketFleetRuns)
	if err != nil {
		return fmt.Errorf("record fleet run: %w", err)
	}
	e := newEncoder(recordFleetRuns, 40*len(runs))
	e.uvarint(uint64(len(runs)))
	for _, r := range runs {
		e.str(r)
	}
	if err := b.Put([]byte(target), e.finish()); err != nil {
		return fmt.Errorf("record fleet run: %w", err)
	}
	return nil
}

func decodeFleetRuns(data []byte) ([]string, error) {
	d := newDecoder(recordFleetRuns, data)
	var runs []string
	// Each run takes at least one byte.
	if n := d.uvarint(); n > uint64(len(d.buf)) {
		d.fail("length")
	} else {
		runs = make([]string, n)
		for i := range runs {
			runs[i] = d.str()
		}
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("decode fleet runs: %w", err)
	}
	return runs, nil
}
