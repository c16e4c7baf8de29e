package store

// Test helpers that read the queue the way the applier once did: the
// baseline the tests hold RecycledChunks to. Nothing outside the tests
// needs them, so they are not part of the package.

// sharedChunks is Chunks for a callee that keeps nothing of a chunk's
// changes once it returns: their byte values are slices of the state file's
// memory, valid only in the read transaction, and their value slices share
// one allocation. A large transaction is read without copying it value by
// value.
func (t *TxnCursor) sharedChunks(fn func(changes []Change) error) error {
	return t.chunks(decodeSharedChunk, fn)
}

// decodeSharedChunk is decodeChunk for a caller that keeps nothing of the
// changes once data may change (see TxnCursor.sharedChunks).
func decodeSharedChunk(data []byte) (subXid uint32, changes []Change, err error) {
	d := newDecoder(recordChunk, data)
	d.shared = true
	return decodeChunkWith(&d)
}
