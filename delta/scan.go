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
// Columns of st missing from the file read as null.
func ReadParquetFile(ctx context.Context, path string, st *StructType) ([]Row, error) {
	return parquet.ReadFile(ctx, path, st)
}

// ReadRows reads every row of the snapshot: the data files' columns plus the
// partition columns filled from each file's partition values, in schema
// order. A data file that is gone (for example vacuumed) makes it fail with
// an error wrapping fs.ErrNotExist.
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
// partition columns filled in). In column mapping mode name, columns and
// partition values are found by their physical names, so a renamed column
// reads as before and a column a file lacks reads as null.
func (s *Snapshot) ScanFiles(ctx context.Context, fn func(add *Add, rows []Row) error) error {
	r := newFileReader(s.table.root, s.schema, s.metadata.PartitionColumns, nil)
	for _, add := range s.Files() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows, err := r.read(ctx, add.Path, add.PartitionValues)
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

// read returns the rows of the file at logPath, in schema order followed
// by the extra columns.
func (r *fileReader) read(ctx context.Context, logPath string, partitionValues map[string]*string) ([]Row, error) {
	rows := []Row{}
	err := r.readBatches(ctx, logPath, partitionValues, func(batch []Row) error {
		rows = append(rows, batch...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// readBatches hands the rows of the file at logPath to fn as read returns
// them, a batch at a time (parquet.ReadBatches), which fn may keep.
func (r *fileReader) readBatches(ctx context.Context, logPath string, partitionValues map[string]*string, fn func([]Row) error) error {
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
	err = parquet.ReadBatches(ctx, path, r.data, func(drows []Row) error {
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
