package store

var keyApplied = []byte("applied")

// Applied returns the applier's progress: the end LSN up to which every
// queued transaction has been applied to every Delta table. Zero means
// nothing was applied yet.
func (r *Reader) Applied() (LSN, error) { return r.metaLSN(keyApplied, "applied position") }

// SetApplied records the applier's progress. It never moves backwards.
func (w *Writer) SetApplied(l LSN) error { return w.raiseMetaLSN(keyApplied, "applied position", l) }
