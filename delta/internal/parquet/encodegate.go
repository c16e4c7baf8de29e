package parquet

import "sync"

// EncodeGate lets the writers that share it (WriteOptions.EncodeGate)
// encode one row group holding a huge value (hugeValueBytes) at a time.
// While parquet-go encodes such a row group it holds several copies of the
// value (the column's buffer, the encoded page, the page with its levels);
// writers side by side, such as a table's mirror and changelog in one
// flush, would otherwise hold theirs at once, and the next one reuses the
// buffers the last gave back. Row groups without a huge value never wait.
// The zero value is ready for use; it is safe for concurrent use.
type EncodeGate struct {
	mu sync.Mutex
}

// enter waits for the gate if g holds a huge value and returns the
// function that leaves it.
func (e *EncodeGate) enter(g *rowGroupColumns) (leave func()) {
	if e == nil || !g.hasHuge() {
		return func() {}
	}
	e.mu.Lock()
	return e.mu.Unlock
}
