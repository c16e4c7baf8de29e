package delta

import (
	"context"
	"fmt"
	"strings"

	"github.com/lakeside/lakeside/delta/internal/parquet"
)

// ReadParquetFile reads the columns of st from a Parquet file with arrow-go
// and returns its rows in st's field order, using the Go types listed in the
// package documentation. Columns, nested ones too, are matched by their
// fields' physical names: a field with a column mapping physical name by
// that name exactly, any other by its name (exactly, else ignoring case).
// Columns of st missing from the file read as null. It reads every row of
// the file: to read a data file of a table, whose add action may carry a
// deletion vector, use ReadDataFile.
func ReadParquetFile(ctx context.Context, path string, st *StructType) ([]Row, error) {
	return parquet.ReadFile(ctx, path, st)
}

// ReadDataFile reads the rows of the logical file of add, a data file of the
// table at root, as ReadParquetFile reads the file's columns: every row of
// the file but those its deletion vector deletes, in file order. Partition
// columns are not filled in (see Snapshot.ScanFiles). A deletion vector
// that cannot be read fails the read with an error naming it (see
// ReadDeletionVector), as does one that deletes a row the file does not
// have.
func ReadDataFile(ctx context.Context, root string, add *Add, st *StructType) ([]Row, error) {
	path, err := ResolvePath(root, add.Path)
	if err != nil {
		return nil, err
	}
	sel, err := skipDeleted(root, add.Path, add.DeletionVector)
	if err != nil {
		return nil, err
	}
	rows := []Row{}
	err = readSelected(ctx, path, st, sel, func(batch []Row, _ []uint64) error {
		rows = append(rows, batch...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", add.Path, err)
	}
	return rows, nil
}

// ReadDataFileIndexed reads the logical file of add as ReadDataFile does,
// and returns with its rows their indexes in the data file (from 0, across
// row groups), which a deletion vector that deletes some of them names.
// only, when not nil, restricts the read to the rows of those indexes.
func ReadDataFileIndexed(ctx context.Context, root string, add *Add, st *StructType, only *DeletionVector) ([]Row, []uint64, error) {
	path, err := ResolvePath(root, add.Path)
	if err != nil {
		return nil, nil, err
	}
	sel, err := skipDeleted(root, add.Path, add.DeletionVector)
	if err != nil {
		return nil, nil, err
	}
	sel.only, sel.indexed = only, true
	rows := []Row{}
	var index []uint64
	err = readSelected(ctx, path, st, sel, func(batch []Row, at []uint64) error {
		rows, index = append(rows, batch...), append(index, at...)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read data file %s: %w", add.Path, err)
	}
	return rows, index, nil
}

// rowSelection selects rows of a data file by their index (their position
// in the file, from 0 across row groups): those skip does not hold and,
// when only is set, that only holds. The zero value selects every row.
type rowSelection struct {
	skip, only *DeletionVector
	// indexed asks readSelected for the indexes of the rows it passes.
	indexed bool
}

// selects reports whether the row of index i is selected.
func (s rowSelection) selects(i uint64) bool {
	return !s.skip.Contains(i) && (s.only == nil || s.only.Contains(i))
}

// check fails unless every index the selection names is that of one of the
// file's n rows: a deletion vector beyond them is not the file's.
func (s rowSelection) check(n uint64) error {
	for _, dv := range []*DeletionVector{s.skip, s.only} {
		if m, ok := dv.Max(); ok && m >= n {
			return fmt.Errorf("%w: it deletes row %d of a file of %d rows", ErrCorruptDeletionVector, m, n)
		}
	}
	return nil
}

// skipDeleted returns the selection of the rows of a logical file: those
// its deletion vector d (nil for none) does not delete.
func skipDeleted(root, logPath string, d *DeletionVectorDescriptor) (rowSelection, error) {
	if d == nil {
		return rowSelection{}, nil
	}
	dv, err := ReadDeletionVector(root, d)
	if err != nil {
		return rowSelection{}, fmt.Errorf("read data file %s: %w", logPath, err)
	}
	return rowSelection{skip: dv}, nil
}

// readSelected reads the Parquet file at path as parquet.ReadBatches does,
// which hands over the file's rows in file order, and passes fn the rows
// sel selects, a batch at a time (never an empty one), with their indexes
// when sel.indexed is set (nil otherwise).
func readSelected(ctx context.Context, path string, st *StructType, sel rowSelection, fn func([]Row, []uint64) error) error {
	var next uint64 // the index of the batch's first row
	var index []uint64
	var fnErr error
	err := parquet.ReadBatches(ctx, path, st, func(rows []Row) error {
		base := next
		next += uint64(len(rows))
		if sel.skip != nil || sel.only != nil || sel.indexed {
			kept := rows[:0]
			index = index[:0]
			for i, r := range rows {
				if j := base + uint64(i); sel.selects(j) {
					kept = append(kept, r)
					if sel.indexed {
						index = append(index, j)
					}
				}
			}
			rows = kept
		}
		if len(rows) == 0 {
			return nil
		}
		if !sel.indexed {
			index = nil
		}
		fnErr = fn(rows, index)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return err
	}
	return sel.check(next)
}

// ReadRows reads every row of the snapshot: the data files' columns plus the
// partition columns filled from each file's partition values, in schema
// order, without the rows deletion vectors delete. A data file or deletion
// vector file that is gone (for example vacuumed) makes it fail with an
// error wrapping fs.ErrNotExist.
func (s *Snapshot) ReadRows(ctx context.Context) ([]Row, error) {
	var out []Row
	err := s.ScanFiles(ctx, func(add *Add, rows []Row) error {
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// ScanFiles reads the data files of the snapshot one at a time, in path
// order, and calls fn with each file's add action and rows (in schema order,
// partition columns filled in), without the rows the file's deletion vector
// deletes (see ReadDataFile). In column mapping mode name, columns and
// partition values are found by their physical names, so a renamed column
// reads as before and a column a file lacks reads as null.
func (s *Snapshot) ScanFiles(ctx context.Context, fn func(add *Add, rows []Row) error) error {
	r := newFileReader(s.table.root, s.schema, s.metadata.PartitionColumns, nil)
	for _, add := range s.Files() {
		if err := ctx.Err(); err != nil {
			return err
		}
		sel, err := skipDeleted(s.table.root, add.Path, add.DeletionVector)
		if err != nil {
			return err
		}
		rows, err := r.read(ctx, add.Path, add.PartitionValues, sel)
		if err != nil {
			return err
		}
		if err := fn(add, rows); err != nil {
			return err
		}
	}
	return nil
}

// fileReader reads the files of a table with one schema: the data columns
// from the file, the partition columns from the file's partition values,
// and extra columns (not in the table's schema, such as _change_type)
// from the file after the schema's fields.
type fileReader struct {
	root    string
	schema  *StructType
	data    *StructType
	dataIdx []int
	partIdx []int
	width   int
}

func newFileReader(root string, schema *StructType, partitionColumns []string, extra []*StructField) *fileReader {
	part := map[string]bool{}
	for _, pc := range partitionColumns {
		part[strings.ToLower(pc)] = true
	}
	r := &fileReader{root: root, schema: schema, data: &StructType{}, width: len(schema.Fields) + len(extra)}
	for i, f := range schema.Fields {
		if part[strings.ToLower(f.Name)] {
			r.partIdx = append(r.partIdx, i)
			continue
		}
		r.data.Fields = append(r.data.Fields, f)
		r.dataIdx = append(r.dataIdx, i)
	}
	for i, f := range extra {
		r.data.Fields = append(r.data.Fields, f)
		r.dataIdx = append(r.dataIdx, len(schema.Fields)+i)
	}
	return r
}

// read returns the rows sel selects of the file at logPath, in schema
// order followed by the extra columns.
func (r *fileReader) read(ctx context.Context, logPath string, partitionValues map[string]*string, sel rowSelection) ([]Row, error) {
	rows := []Row{}
	err := r.readBatches(ctx, logPath, partitionValues, sel, func(batch []Row) error {
		rows = append(rows, batch...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// readBatches hands the rows sel selects of the file at logPath to fn as
// read returns them, a batch at a time (parquet.ReadBatches), which fn may
// keep.
func (r *fileReader) readBatches(ctx context.Context, logPath string, partitionValues map[string]*string, sel rowSelection, fn func([]Row) error) error {
	path, err := ResolvePath(r.root, logPath)
	if err != nil {
		return err
	}
	pvals := make([]any, len(r.partIdx))
	for j, idx := range r.partIdx {
		f := r.schema.Fields[idx]
		raw, ok := partitionValues[f.PhysicalName()]
		if !ok && !f.HasPhysicalName() {
			for k, v := range partitionValues {
				if strings.EqualFold(k, f.Name) {
					raw = v
				}
			}
		}
		v, err := parsePartitionValue(f.Type, raw)
		if err != nil {
			return fmt.Errorf("read %s: %w", logPath, err)
		}
		pvals[j] = v
	}
	var fnErr error
	err = readSelected(ctx, path, r.data, sel, func(drows []Row, _ []uint64) error {
		rows := make([]Row, len(drows))
		for i, dr := range drows {
			row := make(Row, r.width)
			for j, idx := range r.dataIdx {
				row[idx] = dr[j]
			}
			for j, idx := range r.partIdx {
				row[idx] = pvals[j]
			}
			rows[i] = row
		}
		fnErr = fn(rows)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("read data file %s: %w", logPath, err)
	}
	return nil
}
