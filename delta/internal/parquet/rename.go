package parquet

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// MaxFooterBytes bounds the footer RenameColumns reads.
const MaxFooterBytes = 64 << 20

// Rename says what a column of a file becomes: given the path of a schema
// element by its names in the file (top level first), its new name and
// field id, and whether it is renamed at all.
type Rename func(path []string) (name string, fieldID int32, ok bool)

// RenameColumns writes to dst the Parquet file src of size bytes with its
// columns renamed by rename, and returns the bytes written. Only the footer
// is rewritten (schema names and field ids, each column chunk's path); the
// data pages and indexes are copied as they are, so their offsets hold. A
// stored Arrow schema, which would name the old columns, is dropped.
func RenameColumns(dst io.Writer, src io.ReaderAt, size int64, rename Rename) (int64, error) {
	if size < 12 {
		return 0, fmt.Errorf("rename columns: %w: %d bytes", ErrCorruptFile, size)
	}
	var tail [8]byte
	if _, err := src.ReadAt(tail[:], size-8); err != nil {
		return 0, fmt.Errorf("rename columns: %w", err)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if string(tail[4:]) != "PAR1" || n > size-12 || n > MaxFooterBytes {
		return 0, fmt.Errorf("rename columns: %w: bad footer", ErrCorruptFile)
	}
	footer := make([]byte, n)
	if _, err := src.ReadAt(footer, size-8-n); err != nil {
		return 0, fmt.Errorf("rename columns: %w", err)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), footer, &md); err != nil {
		return 0, fmt.Errorf("rename columns: %w: %v", ErrCorruptFile, err)
	}
	renamed := map[string][]string{} // old path, joined, to new path
	var walk func(i int, parent []string, newParent []string) (int, error)
	walk = func(i int, parent, newParent []string) (int, error) {
		if i >= len(md.Schema) {
			return i, fmt.Errorf("%w: schema ends inside a group", ErrCorruptFile)
		}
		e := &md.Schema[i]
		path := append(append([]string(nil), parent...), e.Name)
		newName := e.Name
		if name, id, ok := rename(path); ok {
			newName, e.FieldID = name, id
		}
		newPath := append(append([]string(nil), newParent...), newName)
		e.Name = newName
		children := int(e.NumChildren.V)
		if !e.NumChildren.Valid || children == 0 {
			renamed[pathKey(path)] = newPath
			return i + 1, nil
		}
		j := i + 1
		for range children {
			var err error
			if j, err = walk(j, path, newPath); err != nil {
				return j, err
			}
		}
		return j, nil
	}
	if len(md.Schema) == 0 {
		return 0, fmt.Errorf("rename columns: %w: no schema", ErrCorruptFile)
	}
	j := 1
	for range int(md.Schema[0].NumChildren.V) {
		var err error
		if j, err = walk(j, nil, nil); err != nil {
			return 0, fmt.Errorf("rename columns: %w", err)
		}
	}
	for g := range md.RowGroups {
		for c := range md.RowGroups[g].Columns {
			cm := &md.RowGroups[g].Columns[c].MetaData
			p, ok := renamed[pathKey(cm.PathInSchema)]
			if !ok {
				return 0, fmt.Errorf("rename columns: %w: a column chunk of %v, not in the schema", ErrCorruptFile, []string(cm.PathInSchema))
			}
			cm.PathInSchema = p
		}
	}
	kv := md.KeyValueMetadata[:0]
	for _, x := range md.KeyValueMetadata {
		if x.Key != arrowSchemaKey {
			kv = append(kv, x)
		}
	}
	md.KeyValueMetadata = kv
	out, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	if err != nil {
		return 0, fmt.Errorf("rename columns: %w", err)
	}
	copied, err := io.Copy(dst, io.NewSectionReader(src, 0, size-8-n))
	if err != nil {
		return copied, fmt.Errorf("rename columns: %w", err)
	}
	binary.LittleEndian.PutUint32(tail[:4], uint32(len(out)))
	for _, b := range [][]byte{out, tail[:]} {
		k, err := dst.Write(b)
		copied += int64(k)
		if err != nil {
			return copied, fmt.Errorf("rename columns: %w", err)
		}
	}
	return copied, nil
}

func pathKey(p []string) string {
	k := ""
	for _, s := range p {
		k += fmt.Sprintf("%d:%s", len(s), s)
	}
	return k
}
