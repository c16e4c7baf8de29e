package store

import "errors"

// These errors are returned, wrapped, by the functions of this package; test
// for them with errors.Is.
var (
	// ErrCorrupt means a record failed its checksum or could not be decoded.
	// The file is damaged; nothing is guessed.
	ErrCorrupt = errors.New("state file is corrupt")

	// ErrUnsupportedFormat means a record was written by a newer format than
	// this build understands.
	ErrUnsupportedFormat = errors.New("unsupported state format")

	// ErrLocked means another process holds the state file open for writing.
	ErrLocked = errors.New("state file is locked by another process")

	// ErrSpoolBusy means a spool was committed in the same write transaction
	// that changed it; commit that write first.
	ErrSpoolBusy = errors.New("spool changed in this write transaction")
)
