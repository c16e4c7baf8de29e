package delta

import (
	"errors"

	"github.com/lakeside/lakeside/delta/internal/parquet"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// ErrVersionExists is returned (wrapped, with the version number in the
// message) by Commit when another writer already committed the version this
// commit tried to create. The caller should re-read the table and retry on top
// of the new version.
var ErrVersionExists = errors.New("delta: version already exists")

// ErrUnsupportedFeature is returned (wrapped) when a table needs a protocol
// version or table feature that this package does not implement, such as
// column mapping mode id, a reader feature it does not know (v2Checkpoint,
// typeWidening...) or a reader version above 3.
var ErrUnsupportedFeature = types.ErrUnsupportedFeature

// ErrNotATable is returned (wrapped) when a path holds no Delta table, that is
// when it has no _delta_log directory or the directory holds no commit or
// checkpoint.
var ErrNotATable = errors.New("delta: not a delta table")

// ErrVersionNotFound is returned (wrapped) when a requested version does not
// exist or cannot be reconstructed from the files in the log, or when a
// timestamp lies before the earliest available commit.
var ErrVersionNotFound = errors.New("delta: version not found")

// ErrCorruptLog is returned (wrapped) when the transaction log is inconsistent:
// versions missing between a checkpoint and the requested version, missing
// version 0 without a checkpoint, or unparsable actions.
var ErrCorruptLog = errors.New("delta: corrupt transaction log")

// ErrInvalidValue is returned (wrapped) by writers when a Go value does not fit
// the Delta type of its column, or a null is given for a non-nullable column.
var ErrInvalidValue = types.ErrInvalidValue

// ErrInvalidSchema is returned (wrapped) when a schema string cannot be parsed
// or a schema is not usable for the requested operation.
var ErrInvalidSchema = types.ErrInvalidSchema

// ErrRowsLost reports a data file that would not hold every row written to
// it. It is a bug, caught before the file is used.
var ErrRowsLost = parquet.ErrRowsLost

// ErrCorruptFile is returned (wrapped) when a data file's structure does
// not parse, for example by RenameColumns.
var ErrCorruptFile = parquet.ErrCorruptFile
