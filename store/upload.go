package store

import (
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The upload state lives in its own top-level bucket, created on first write:
//
//	upload    target -> bucket: table -> bucket:
//	            "state"     -> UploadState
//	            "files"     -> bucket: path -> UploadedFile
//	            "multipart" -> bucket: path -> MultipartUpload
//	            "deletes"   -> bucket: path -> RemoteDelete
//
// A target names one remote location (URL and site), so pointing the agent at
// another replica starts over instead of trusting state about a different
// remote.
var (
	bucketUpload       = []byte("upload")
	keyUploadState     = []byte("state")
	bucketUploadFiles  = []byte("files")
	bucketUploadMulti  = []byte("multipart")
	bucketUploadDelete = []byte("deletes")
	errUploadReadOnly  = fmt.Errorf("upload state: write outside a write transaction")
	uploadBucketsOrder = [][]byte{bucketUploadFiles, bucketUploadMulti, bucketUploadDelete}
)

// Record types of the upload state (see encoding.go for the framing).
const (
	recordUploadState byte = 'u'
	recordUploadFile  byte = 'f'
	recordMultipart   byte = 'p'
	recordDelete      byte = 'd'
)

// UploadState is the replication progress of one table to one target.
type UploadState struct {
	// RemoteVersion is the newest commit confirmed on the remote; -1 when
	// none is.
	RemoteVersion int64
	// CheckpointVersion is the version the remote _last_checkpoint names;
	// -1 when the uploader has not written one.
	CheckpointVersion int64
	// Stopped, when not empty, says why replication of the table stopped
	// (for example another writer's commit on the remote).
	Stopped string
	// LastSuccess is when a version was last confirmed.
	LastSuccess time.Time
}

// UploadedFile records one data or checkpoint file confirmed on the remote.
type UploadedFile struct {
	// Path is the file's path relative to the table root, slash-separated.
	Path string
	Size int64
	// Version is the table version the file was uploaded for.
	Version    int64
	UploadedAt time.Time
}

// MultipartUpload is a multipart upload in progress, so that it resumes
// after a restart instead of starting over.
type MultipartUpload struct {
	Path     string
	UploadID string
	// Size is the size of the local file when the upload started.
	Size     int64
	PartSize int64
	// Parts are the completed parts, in any order.
	Parts []UploadedPart
}

// UploadedPart is one completed part of a multipart upload.
type UploadedPart struct {
	Number int
	ETag   string
	Size   int64
}

// RemoteDelete is a file that vacuum deletes locally and that the remote
// deletes once it is safe there too.
type RemoteDelete struct {
	// Path is the file's path relative to the table root, slash-separated.
	Path string
	Size int64
	// AfterVersion is the oldest version the local vacuum kept: no version
	// from it on references the file, so the remote may delete it once its
	// own version reaches AfterVersion.
	AfterVersion int64
	// PlannedAt is when the local vacuum decided to delete the file.
	PlannedAt time.Time
}

// uploadTable returns the bucket of a table, or nil when it does not exist.
func (r *Reader) uploadTable(target, table string) *bolt.Bucket {
	top := r.tx.Bucket(bucketUpload)
	if top == nil {
		return nil
	}
	t := top.Bucket([]byte(target))
	if t == nil {
		return nil
	}
	return t.Bucket([]byte(table))
}

// uploadTableRW returns the bucket of a table, creating it and its
// sub-buckets when needed.
func (w *Writer) uploadTableRW(target, table string) (*bolt.Bucket, error) {
	if !w.tx.Writable() {
		return nil, errUploadReadOnly
	}
	top, err := w.tx.CreateBucketIfNotExists(bucketUpload)
	if err != nil {
		return nil, fmt.Errorf("upload state: %w", err)
	}
	t, err := top.CreateBucketIfNotExists([]byte(target))
	if err != nil {
		return nil, fmt.Errorf("upload state: %w", err)
	}
	b, err := t.CreateBucketIfNotExists([]byte(table))
	if err != nil {
		return nil, fmt.Errorf("upload state: %w", err)
	}
	for _, name := range uploadBucketsOrder {
		if _, err := b.CreateBucketIfNotExists(name); err != nil {
			return nil, fmt.Errorf("upload state: %w", err)
		}
	}
	return b, nil
}

// UploadTables returns the names of the tables with upload state for target.
func (r *Reader) UploadTables(target string) ([]string, error) {
	top := r.tx.Bucket(bucketUpload)
	if top == nil {
		return nil, nil
	}
	t := top.Bucket([]byte(target))
	if t == nil {
		return nil, nil
	}
	var names []string
	err := t.ForEachBucket(func(k []byte) error {
		names = append(names, string(k))
		return nil
	})
	return names, err
}

// UploadState returns the progress of table to target; a table never
// uploaded has RemoteVersion and CheckpointVersion -1.
func (r *Reader) UploadState(target, table string) (UploadState, error) {
	none := UploadState{RemoteVersion: -1, CheckpointVersion: -1}
	b := r.uploadTable(target, table)
	if b == nil {
		return none, nil
	}
	v := b.Get(keyUploadState)
	if v == nil {
		return none, nil
	}
	d := newDecoder(recordUploadState, v)
	s := UploadState{
		RemoteVersion:     d.varint(),
		CheckpointVersion: d.varint(),
		Stopped:           d.str(),
	}
	if us := d.varint(); us != 0 {
		s.LastSuccess = time.UnixMicro(us).UTC()
	}
	if err := d.done(); err != nil {
		return none, fmt.Errorf("read upload state of %s: %w", table, err)
	}
	return s, nil
}

// PutUploadState records the progress of table to target.
func (w *Writer) PutUploadState(target, table string, s UploadState) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	e := newEncoder(recordUploadState, 32+len(s.Stopped))
	e.varint(s.RemoteVersion)
	e.varint(s.CheckpointVersion)
	e.str(s.Stopped)
	var us int64
	if !s.LastSuccess.IsZero() {
		us = s.LastSuccess.UnixMicro()
	}
	e.varint(us)
	return b.Put(keyUploadState, e.finish())
}

func encodeUploadedFile(f *UploadedFile) []byte {
	e := newEncoder(recordUploadFile, 32+len(f.Path))
	e.str(f.Path)
	e.varint(f.Size)
	e.varint(f.Version)
	e.varint(f.UploadedAt.UnixMicro())
	return e.finish()
}

func decodeUploadedFile(data []byte) (UploadedFile, error) {
	d := newDecoder(recordUploadFile, data)
	f := UploadedFile{Path: d.str(), Size: d.varint(), Version: d.varint()}
	f.UploadedAt = time.UnixMicro(d.varint()).UTC()
	if err := d.done(); err != nil {
		return UploadedFile{}, fmt.Errorf("read uploaded file: %w", err)
	}
	return f, nil
}

// UploadedFile returns the record of a file confirmed on the remote, and
// false when the file is not recorded as uploaded.
func (r *Reader) UploadedFile(target, table, path string) (UploadedFile, bool, error) {
	b := r.uploadTable(target, table)
	if b == nil {
		return UploadedFile{}, false, nil
	}
	v := b.Bucket(bucketUploadFiles).Get([]byte(path))
	if v == nil {
		return UploadedFile{}, false, nil
	}
	f, err := decodeUploadedFile(v)
	return f, err == nil, err
}

// UploadedFiles calls fn for every file of table recorded as uploaded, in
// path order.
func (r *Reader) UploadedFiles(target, table string, fn func(f UploadedFile) error) error {
	b := r.uploadTable(target, table)
	if b == nil {
		return nil
	}
	return b.Bucket(bucketUploadFiles).ForEach(func(_, v []byte) error {
		f, err := decodeUploadedFile(v)
		if err != nil {
			return err
		}
		return fn(f)
	})
}

// PutUploadedFile records a file as confirmed on the remote.
func (w *Writer) PutUploadedFile(target, table string, f UploadedFile) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	return b.Bucket(bucketUploadFiles).Put([]byte(f.Path), encodeUploadedFile(&f))
}

// DeleteUploadedFile forgets a file, for example after a remote vacuum
// deleted it.
func (w *Writer) DeleteUploadedFile(target, table, path string) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	return b.Bucket(bucketUploadFiles).Delete([]byte(path))
}

// Multipart returns the multipart upload in progress for a file, or nil.
func (r *Reader) Multipart(target, table, path string) (*MultipartUpload, error) {
	b := r.uploadTable(target, table)
	if b == nil {
		return nil, nil
	}
	v := b.Bucket(bucketUploadMulti).Get([]byte(path))
	if v == nil {
		return nil, nil
	}
	d := newDecoder(recordMultipart, v)
	m := &MultipartUpload{Path: d.str(), UploadID: d.str(), Size: d.varint(), PartSize: d.varint()}
	n := d.length(3)
	for range n {
		m.Parts = append(m.Parts, UploadedPart{Number: int(d.uvarint()), ETag: d.str(), Size: d.varint()})
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("read multipart upload of %s: %w", path, err)
	}
	return m, nil
}

// PutMultipart records a multipart upload in progress.
func (w *Writer) PutMultipart(target, table string, m *MultipartUpload) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	e := newEncoder(recordMultipart, 64+len(m.Path)+48*len(m.Parts))
	e.str(m.Path)
	e.str(m.UploadID)
	e.varint(m.Size)
	e.varint(m.PartSize)
	e.uvarint(uint64(len(m.Parts)))
	for _, p := range m.Parts {
		e.uvarint(uint64(p.Number))
		e.str(p.ETag)
		e.varint(p.Size)
	}
	return b.Bucket(bucketUploadMulti).Put([]byte(m.Path), e.finish())
}

// DeleteMultipart forgets a multipart upload (completed or abandoned).
func (w *Writer) DeleteMultipart(target, table, path string) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	return b.Bucket(bucketUploadMulti).Delete([]byte(path))
}

// DeleteUploadState forgets everything recorded about table for target, so
// that its replication starts over.
func (w *Writer) DeleteUploadState(target, table string) error {
	top := w.tx.Bucket(bucketUpload)
	if top == nil {
		return nil
	}
	t := top.Bucket([]byte(target))
	if t == nil || t.Bucket([]byte(table)) == nil {
		return nil
	}
	return t.DeleteBucket([]byte(table))
}

// PutRemoteDelete records a file to delete from the remote; recording it
// again replaces the record.
func (w *Writer) PutRemoteDelete(target, table string, d RemoteDelete) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	e := newEncoder(recordDelete, 32+len(d.Path))
	e.str(d.Path)
	e.varint(d.Size)
	e.varint(d.AfterVersion)
	e.varint(d.PlannedAt.UnixMicro())
	return b.Bucket(bucketUploadDelete).Put([]byte(d.Path), e.finish())
}

// RemoteDeletes calls fn for every file of table waiting to be deleted from
// the remote, in path order.
func (r *Reader) RemoteDeletes(target, table string, fn func(d RemoteDelete) error) error {
	b := r.uploadTable(target, table)
	if b == nil || b.Bucket(bucketUploadDelete) == nil {
		return nil // none recorded, or state written before deletes existed
	}
	return b.Bucket(bucketUploadDelete).ForEach(func(_, v []byte) error {
		dec := newDecoder(recordDelete, v)
		d := RemoteDelete{Path: dec.str(), Size: dec.varint(), AfterVersion: dec.varint()}
		d.PlannedAt = time.UnixMicro(dec.varint()).UTC()
		if err := dec.done(); err != nil {
			return fmt.Errorf("read remote delete: %w", err)
		}
		return fn(d)
	})
}

// RemoteDeleted records that a file is gone from the remote: its pending
// delete and its upload record are forgotten in one write, so a delete that
// succeeded is never repeated.
func (w *Writer) RemoteDeleted(target, table, path string) error {
	b, err := w.uploadTableRW(target, table)
	if err != nil {
		return err
	}
	if err := b.Bucket(bucketUploadDelete).Delete([]byte(path)); err != nil {
		return err
	}
	return b.Bucket(bucketUploadFiles).Delete([]byte(path))
}
