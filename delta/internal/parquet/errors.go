package parquet

import "errors"

// ErrRowsLost reports a data file that would not hold every row written to
// it. It is a bug, caught before the file is used.
var ErrRowsLost = errors.New("delta: rows lost writing a data file")

// ErrCorruptFile reports a data file whose structure does not parse: a
// footer that is cut, too long, or names columns its schema lacks.
var ErrCorruptFile = errors.New("delta: corrupt data file")
