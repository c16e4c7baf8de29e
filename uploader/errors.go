package uploader

import "errors"

// These errors are returned, wrapped, by the uploader and by backends; test
// for them with errors.Is.
var (
	// ErrRemoteConflict means the remote holds an object with the same key
	// and different bytes, typically another agent's commit because two
	// agents are configured onto one prefix. Replication of the table stops
	// and the remote is left untouched.
	ErrRemoteConflict = errors.New("remote holds a different object")

	// ErrNotFound is returned by ReplicaClient.GetObject when the object
	// does not exist.
	ErrNotFound = errors.New("object not found")

	// ErrPreconditionFailed is returned by a put with IfNoneMatch when the
	// object already exists.
	ErrPreconditionFailed = errors.New("object already exists")

	// ErrNoSuchUpload is returned by multipart calls when the upload id is
	// unknown to the remote (completed, aborted or expired).
	ErrNoSuchUpload = errors.New("no such multipart upload")

	// ErrChecksumMismatch means the remote rejected a body whose checksum
	// did not match the one sent with it.
	ErrChecksumMismatch = errors.New("checksum mismatch")

	// ErrTableStopped is returned for a table whose replication stopped
	// after a conflict; see Uploader.Resume.
	ErrTableStopped = errors.New("table replication stopped")

	// ErrStalled means a request to the replica was cancelled because
	// nothing of it moved for a while, or it went slower than a minimum
	// rate: a bucket that stalls is an offline replica, retried.
	ErrStalled = errors.New("replica request stalled")

	// ErrLocal means a local file needed for the upload is missing or
	// unreadable; it is not a remote failure and does not make the uploader
	// go offline.
	ErrLocal = errors.New("local table")
)
