// Package store keeps the agent's durable state in one bbolt file: the queue
// of committed transactions, the spool of large transactions still in
// progress, the schema history, the replication checkpoint and the slot's
// identity. Every record is versioned and checksummed (see encoding.go).
//
// The file has these top-level buckets (and upload, see upload.go):
//
//	queue     end LSN (8 bytes) -> TxnHeader and its one chunk of changes, framed as one record
//	          or, for a larger or streamed transaction,
//	          end LSN (8 bytes) -> bucket: 0 -> TxnHeader, 1..n -> chunks of changes
//	spool     spool id (8 bytes) -> bucket: 0 -> spool totals, 1..n -> chunks of changes
//	relations OID (4 bytes) + LSN (8 bytes) -> Relation
//	meta      name -> value (checkpoint, slot state, queue totals)
//	backfill  table OID (4 bytes) -> Backfill (created on first write)
//
// and, created on first write, upload (see upload.go) and tables (table
// identities by Delta table name, see identity.go).
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// FileName is the name of the state file inside the state directory.
const FileName = "lakeside.db"

// initialMmapSize is the address space mapped for the state file at open.
const initialMmapSize = 8 << 30

var (
	bucketQueue     = []byte("queue")
	bucketSpool     = []byte("spool")
	bucketRelations = []byte("relations")
	bucketMeta      = []byte("meta")
)

// DB is an open state file.
type DB struct {
	bolt     *bolt.DB
	path     string
	readOnly bool
	// arena holds the values of the write transaction under way.
	arena valueArena
}

// Options configures Open.
type Options struct {
	// ReadOnly opens the file with a shared lock, for inspection while no
	// agent is writing it.
	ReadOnly bool
	// LockTimeout is how long to wait for another process's lock; zero means
	// one second.
	LockTimeout time.Duration
}

// Open opens or creates the state file in dir.
func Open(dir string, opts Options) (*DB, error) {
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create state dir: %w", err)
		}
	}
	path := filepath.Join(dir, FileName)
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open state: %w", err)
		}
	}
	timeout := opts.LockTimeout
	if timeout == 0 {
		timeout = time.Second
	}
	b, err := bolt.Open(path, 0o640, &bolt.Options{
		Timeout:      timeout,
		ReadOnly:     opts.ReadOnly,
		FreelistType: bolt.FreelistMapType,
		// The free page list is rebuilt at open instead of written with
		// every commit: the file of a drained queue is mostly free pages.
		NoFreelistSync: true,
		// bbolt remaps the file as it grows, and a remap waits for every
		// read transaction to end. The applier and the live view read
		// while capture writes; reserving address space up front (not
		// memory) keeps their reads from stalling the queue's writer.
		InitialMmapSize: initialMmapSize,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open state %s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	db := &DB{bolt: b, path: path, readOnly: opts.ReadOnly}
	if !opts.ReadOnly {
		err := b.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bucketQueue, bucketSpool, bucketRelations, bucketMeta} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("init state: %w", err)
		}
	}
	return db, nil
}

// Path returns the state file's path.
func (db *DB) Path() string { return db.path }

// Close closes the file.
func (db *DB) Close() error { return db.bolt.Close() }

// Update runs fn in one write transaction, committed and fsync'd when fn
// returns nil. Many changes written in one Update share one fsync.
func (db *DB) Update(fn func(w *Writer) error) error {
	return db.bolt.Update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		if err := fn(w); err != nil {
			return err
		}
		return w.flush()
	})
}

// Begin starts a write transaction that the caller ends with Commit or
// Rollback, from the goroutine that began it. It holds the state file's
// write lock until then; Update is the form for a transaction that fits in
// one function.
func (db *DB) Begin() (*Writer, error) {
	tx, err := db.bolt.Begin(true)
	if err != nil {
		return nil, err
	}
	return db.writer(tx), nil
}

// writer returns the Writer of a write transaction that has just begun,
// which then owns the arena (write transactions take turns).
func (db *DB) writer(tx *bolt.Tx) *Writer {
	db.arena.reset()
	return &Writer{Reader: Reader{tx: tx}, arena: &db.arena}
}

// Commit writes the transaction's changes and fsyncs them. The transaction
// is over whatever it returns.
func (w *Writer) Commit() error {
	if err := w.flush(); err != nil {
		w.tx.Rollback()
		return err
	}
	return w.tx.Commit()
}

// Rollback discards the transaction's changes.
func (w *Writer) Rollback() error { return w.tx.Rollback() }

// View runs fn in a read transaction that sees one consistent state.
func (db *DB) View(fn func(r *Reader) error) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		return fn(&Reader{tx: tx})
	})
}

// FileSize returns the size of the state file in bytes.
func (db *DB) FileSize() (int64, error) {
	fi, err := os.Stat(db.path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
