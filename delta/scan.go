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
	part := map[string]bool{}
	for _, pc := range s.metadata.PartitionColumns {
		part[strings.ToLower(pc)] = true
	}
	data := &StructType{}
	var dataIdx, partIdx []int
	for i, f := range s.schema.Fields {
		if part[strings.ToLower(f.Name)] {
			partIdx = append(partIdx, i)
			continue
		}
		data.Fields = append(data.Fields, f)
		dataIdx = append(dataIdx, i)
	}
	for _, add := range s.Files() {
		if err := ctx.Err(); err != nil {
			return err
		}
		path, err := ResolvePath(s.table.root, add.Path)
		if err != nil {
			return err
		}
		pvals := make([]any, len(partIdx))
		for j, idx := range partIdx {
			f := s.schema.Fields[idx]
			raw, ok := add.PartitionValues[f.PhysicalName()]
			if !ok && !f.HasPhysicalName() {
				for k, v := range add.PartitionValues {
					if strings.EqualFold(k, f.Name) {
						raw = v
					}
				}
			}
			v, err := parsePartitionValue(f.Type, raw)
			if err != nil {
				return fmt.Errorf("read %s: %w", add.Path, err)
			}
			pvals[j] = v
		}
		drows, err := parquet.ReadFile(ctx, path, data)
		if err != nil {
			return fmt.Errorf("read data file %s: %w", add.Path, err)
		}
		rows := make([]Row, len(drows))
		for r, dr := range drows {
			row := make(Row, len(s.schema.Fields))
			for j, idx := range dataIdx {
				row[idx] = dr[j]
			}
			for j, idx := range partIdx {
				row[idx] = pvals[j]
			}
			rows[r] = row
		}
		if err := fn(add, rows); err != nil {
			return err
		}
	}
	return nil
}
