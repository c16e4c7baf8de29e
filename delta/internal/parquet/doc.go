// Package parquet is delta's Parquet engine: it writes the data files of a
// table with github.com/parquet-go/parquet-go, computing their Delta
// statistics as it goes, writes checkpoint files, and reads Parquet files
// with the Parquet reader of github.com/apache/arrow-go; each library has one
// job only.
//
// It knows the Delta data types and their Go values (delta/internal/types)
// but nothing of the protocol: a Writer writes one file at the path it is
// given, storing the fields of its schema it was told to, and returns the
// file's stats string; package delta names the file, keeps partition values
// out of it, flushes its directory and makes its add action. The protocol
// side imports this package, never the reverse. Columns are written and read
// by their fields' physical names (types.StructField.PhysicalName: the
// column mapping physical name, else the name), with the column mapping id
// as Parquet field id, and stats are keyed by the same names.
//
// A Writer converts each value to its Parquet physical form as it comes, in
// a typed slice per leaf column (flat.go), keeping the values of struct,
// array and map columns for the Dremel shredder (write.go); a full row group
// is encoded and committed on goroutines of its own while the next fills
// (columns.go). A RowBuilder (append.go) appends a row value by value without
// boxing any, and ColumnBuffers (buffers.go) lends the columns of closed
// writers to the next. A huge string or binary value (hugeValueBytes) is
// held apart from the others, its pages have short bounds (schema.go) and
// wait for their row group's turn in a temporary file (pagebuffers.go), so
// that the writer holds few copies of it at once. Files named tuning_*.go hold performance tricks, each
// with an off switch and the benchmark that measures it named in its doc
// comment.
package parquet
