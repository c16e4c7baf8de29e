// Package delta implements the parts of the Delta Lake transaction protocol
// that Lakeside needs: the schema and action model, atomic commits, log replay
// into snapshots (with checkpoints and time travel), classic single-file
// checkpoints, vacuum of the data files no retained version needs and expiry
// of old log files (see Table.Vacuum and Table.ExpireLog), and reading and
// writing the Parquet data files of a table (DataWriter, WriteDataFile,
// Snapshot.ScanFiles).
//
// The package knows nothing about PostgreSQL. It writes tables that use
// protocol version {"minReaderVersion":1,"minWriterVersion":2} by default,
// and it reads tables written by other engines as long as they use no reader
// feature it does not support (see ErrUnsupportedFeature).
//
// # Deletion vectors
//
// Tables with the deletionVectors feature are read: an add action's
// DeletionVector names rows of its data file that are no longer in the
// table, and every read of a table's files skips them (Snapshot.ScanFiles,
// ReadDataFile, ReadChanges, RewriteBin). The log's logical files are a
// path and a deletion vector together, in commits and in checkpoints.
// Deletion vectors are decoded inline or from their files, whose size and
// checksum are checked; one that cannot be read fails the read
// (ErrCorruptDeletionVector, or fs.ErrNotExist), never returns the rows it
// deletes. Vacuum keeps the deletion vector files of retained versions.
//
// Writing them takes four steps, which this package provides and its
// caller strings together: EnableDeletionVectors raises the protocol
// (reader 3 / writer 7, listing the features the old versions implied)
// and sets delta.enableDeletionVectors; a DeletionVector collects the row
// indexes to delete (with Or, those already deleted); StoreDeletionVectors
// keeps small ones inline in the log and writes the others into one
// deletion_vector_<uuid>.bin file; DeletionVectorActions returns the
// remove of the file's old logical file and the add of the new, with
// stats whose tightBounds is false.
//
// # Column mapping
//
// Tables in column mapping mode name are read and written: each field
// carries a physical name and an id in its metadata (StructField.PhysicalName,
// StructField.ColumnID), data files store its column under the physical name
// with the id as Parquet field id, and add actions key their stats and
// partition values by physical names, so that renaming a field (changing its
// Name only) or dropping it is a metaData commit, and a field added later,
// with a new id and physical name (AssignColumnIDs), reads as null in older
// files. Create starts a table in this mode when its configuration sets
// ColumnMappingModeKey to ColumnMappingName; EnableColumnMapping turns an
// existing table into one. Mode id is refused.
//
// # Change data feed
//
// A table with delta.enableChangeDataFeed true may commit cdc actions
// (AddCDC) naming change data files under _change_data/ (written with
// NewChangeDataWriter): the table's columns plus _change_type. ChangeFiles
// and ReadChanges read the changes of a range of versions as the protocol
// says: a version's change data files when it has any, else its added and
// removed files as inserts and deletes. Vacuum and the snapshot treat
// change data files as no part of the table's files, kept and deleted by
// the retention like removed data files.
//
// The package is the protocol; the Parquet engine it writes and reads files
// with is delta/internal/parquet (files are written with
// github.com/parquet-go/parquet-go and read with the Parquet reader of
// github.com/apache/arrow-go), and the data types and Go values both use are
// in delta/internal/types. The names of those packages that callers need
// (the schema types, Row, WriteOptions, RowBuilder, ColumnBuffers...) are
// re-exported here, so that delta is the one package its callers import.
//
// # Go values
//
// Rows are passed as Row values ([]any in schema field order). The Go types
// used for each Delta type are the same on the write and on the read path:
//
//	Delta type        Go type returned by readers   also accepted by writers
//	null (any type)   nil
//	boolean           bool
//	byte              int8                          any Go integer in range
//	short             int16                         any Go integer in range
//	integer           int32                         any Go integer in range
//	long              int64                         any Go integer in range
//	float             float32                       float64
//	double            float64                       float32
//	decimal(p,s)      Decimal                       string ("-12.34"), *big.Int (unscaled)
//	string            string                        []byte
//	binary            []byte                        string
//	date              time.Time (UTC midnight)      int32 days since 1970-01-01
//	timestamp         time.Time (UTC, µs)           int64 µs since the epoch
//	timestamp_ntz     time.Time (UTC wall clock)    int64 µs since the epoch
//	array             []any                         any slice type
//	struct            Row                           []any
//	map               []MapEntry                    map[string]string, map[string]any
//
// A time.Time written to a date column contributes its calendar date in its
// own location; a time.Time written to a timestamp column is an instant, and
// one written to a timestamp_ntz column contributes its wall clock reading in
// its own location. Values are truncated to microseconds.
package delta
