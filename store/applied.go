package store

import "fmt"

var keyApplied = []byte("applied")

// Applied returns the applier's progress: the end LSN up to which every
// queued transaction has been applied to every Delta table. Zero means
// nothing was applied yet.
func (r *Reader) Applied() (LSN, error) {
	v := r.tx.Bucket(bucketMeta).Get(keyApplied)
	if v == nil {
		return 0, nil
	}
	d := newDecoder(recordMeta, v)
	l := LSN(d.uvarint())
	if err := d.done(); err != nil {
		return 0, fmt.Errorf("read applied position: %w", err)
	}
	return l, nil
}

// SetApplied records the applier's progress. It never moves backwards.
func (w *Writer) SetApplied(l LSN) error {
	cur, err := w.Applied()
	if err != nil {
		return err
	}
	if l <= cur {
		return nil
	}
	e := newEncoder(recordMeta, 10)
	e.uvarint(uint64(l))
	return w.tx.Bucket(bucketMeta).Put(keyApplied, e.finish())
}
