// Package types holds the Delta data types (the schema of a table) and the
// Go values of each, which both halves of delta use: the protocol in delta,
// which stores schemas in the log and values in partition paths and
// checkpoints, and the Parquet encoder and reader in delta/internal/parquet,
// which write and read those values in data files. It sits below both so
// that neither imports the other's half.
//
// Package delta re-exports every name here that its callers use, and its
// package documentation lists the Go type of each Delta type; the errors
// here are delta's own error values, so that errors.Is works the same
// whichever package returns them.
package types
