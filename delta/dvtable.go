package delta

// Deletion vectors: a table whose protocol has the deletionVectors
// feature (reader 3 / writer 7, in both feature lists) may give an add
// action a deletion vector, which names rows of its data file that are
// no longer in the table, so that deleting rows rewrites no data file
// (merge-on-read). Readers skip those rows wherever they read a file of
// the table (Snapshot.ScanFiles, ReadDataFile, ReadChanges, RewriteBin).
const (
	// DeletionVectorsFeature is the reader and writer table feature of
	// deletion vectors.
	DeletionVectorsFeature = "deletionVectors"
	// EnableDeletionVectorsKey is the table property that lets writers
	// write new deletion vectors.
	EnableDeletionVectorsKey = "delta.enableDeletionVectors"
)
