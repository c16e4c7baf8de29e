package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// The storage types of deletion vectors (DeletionVectorDescriptor.StorageType).
const (
	// DeletionVectorStorageRelative is a deletion vector in a file of the
	// table's directory whose name derives from a UUID: pathOrInlineDv is
	// an optional directory prefix followed by the UUID in Z85 (20
	// characters), and the file is <prefix>/deletion_vector_<uuid>.bin.
	DeletionVectorStorageRelative = "u"
	// DeletionVectorStorageInline is a deletion vector kept in the log:
	// pathOrInlineDv is its bytes in Z85.
	DeletionVectorStorageInline = "i"
	// DeletionVectorStorageAbsolute is a deletion vector in a file named
	// by an absolute path, a URI like the path of an add action.
	DeletionVectorStorageAbsolute = "p"
)

// deletionVectorFileVersion is the format version a deletion vector file
// starts with.
const deletionVectorFileVersion = 1

// z85UUIDLen is the length of a UUID in Z85.
const z85UUIDLen = 20

// DeletionVectorDescriptor is the deletionVector of an add or remove
// action: where the deletion vector of its logical file is stored and how
// many rows it deletes.
type DeletionVectorDescriptor struct {
	// StorageType is one of the DeletionVectorStorage* constants.
	StorageType string `json:"storageType"`
	// PathOrInlineDv is, by storage type, the prefix and Z85 UUID of the
	// file, the Z85 bytes of the deletion vector, or the file's path.
	PathOrInlineDv string `json:"pathOrInlineDv"`
	// Offset is where the deletion vector starts in its file (its size
	// field); absent (0) for an inline one.
	Offset *int32 `json:"offset,omitempty"`
	// SizeInBytes is the size of the serialised deletion vector
	// (DeletionVector.MarshalBinary), before Z85 when inline.
	SizeInBytes int32 `json:"sizeInBytes"`
	// Cardinality is the number of rows it deletes.
	Cardinality int64 `json:"cardinality"`
	// MaxRowIndex, written by some engines, is the largest row index it
	// holds.
	MaxRowIndex *int64 `json:"maxRowIndex,omitempty"`
}

// UniqueID returns the id that, with the data file's path, identifies a
// logical file: the storage type and pathOrInlineDv, followed by "@" and
// the offset when there is one. A nil descriptor's id is "".
func (d *DeletionVectorDescriptor) UniqueID() string {
	if d == nil {
		return ""
	}
	id := d.StorageType + d.PathOrInlineDv
	if d.Offset != nil {
		id += "@" + strconv.FormatInt(int64(*d.Offset), 10)
	}
	return id
}

// clone returns a copy of the descriptor, nil for nil.
func (d *DeletionVectorDescriptor) clone() *DeletionVectorDescriptor {
	if d == nil {
		return nil
	}
	c := *d
	if d.Offset != nil {
		o := *d.Offset
		c.Offset = &o
	}
	if d.MaxRowIndex != nil {
		m := *d.MaxRowIndex
		c.MaxRowIndex = &m
	}
	return &c
}

// offset returns the offset in the file. An absent one is taken to be 1,
// the first deletion vector's, right after the format version.
func (d *DeletionVectorDescriptor) offset() int64 {
	if d.Offset == nil {
		return 1
	}
	return int64(*d.Offset)
}

// FilePath returns the local path of the file that holds the deletion
// vector, for a table at root, and "" for an inline one.
func (d *DeletionVectorDescriptor) FilePath(root string) (string, error) {
	switch d.StorageType {
	case DeletionVectorStorageInline:
		return "", nil
	case DeletionVectorStorageAbsolute:
		return ResolvePath(root, d.PathOrInlineDv)
	case DeletionVectorStorageRelative:
		s := d.PathOrInlineDv
		if len(s) < z85UUIDLen {
			return "", fmt.Errorf("%w: %q is too short for a UUID", ErrCorruptDeletionVector, s)
		}
		prefix, enc := s[:len(s)-z85UUIDLen], s[len(s)-z85UUIDLen:]
		raw, err := z85Decode(enc)
		if err != nil {
			return "", fmt.Errorf("%w: path %q: %v", ErrCorruptDeletionVector, s, err)
		}
		name := "deletion_vector_" + formatUUID([16]byte(raw)) + ".bin"
		if prefix != "" {
			name = prefix + "/" + name
		}
		return filepath.Join(root, filepath.FromSlash(name)), nil
	}
	return "", fmt.Errorf("%w: deletion vector storage type %q", ErrUnsupportedFeature, d.StorageType)
}

// ReadDeletionVector reads the deletion vector a descriptor names, for a
// data file of the table at root: inline, or from its file, whose format
// version, size and CRC-32 it checks. A file that is gone fails with an
// error wrapping fs.ErrNotExist, and one that does not hold what the
// descriptor says with an error wrapping ErrCorruptDeletionVector; both
// name the file. So does a cardinality other than the descriptor's.
func ReadDeletionVector(root string, d *DeletionVectorDescriptor) (*DeletionVector, error) {
	data, where, err := deletionVectorBytes(root, d)
	if err != nil {
		return nil, fmt.Errorf("read deletion vector %s: %w", where, err)
	}
	dv := &DeletionVector{}
	if err := dv.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("read deletion vector %s: %w", where, err)
	}
	if n := dv.Cardinality(); n != d.Cardinality {
		return nil, fmt.Errorf("read deletion vector %s: %w: it holds %d rows, its descriptor says %d",
			where, ErrCorruptDeletionVector, n, d.Cardinality)
	}
	return dv, nil
}

// deletionVectorBytes returns the serialised deletion vector a descriptor
// names, and what to call its place in errors.
func deletionVectorBytes(root string, d *DeletionVectorDescriptor) ([]byte, string, error) {
	if d.StorageType == DeletionVectorStorageInline {
		where := "inline " + strconv.Quote(d.PathOrInlineDv)
		data, err := z85Decode(d.PathOrInlineDv)
		if err != nil {
			return nil, where, fmt.Errorf("%w: %v", ErrCorruptDeletionVector, err)
		}
		if d.SizeInBytes < 0 || int(d.SizeInBytes) > len(data) || len(data)-int(d.SizeInBytes) >= 4 {
			return nil, where, fmt.Errorf("%w: %d bytes inline, size says %d", ErrCorruptDeletionVector, len(data), d.SizeInBytes)
		}
		return data[:d.SizeInBytes], where, nil
	}
	path, err := d.FilePath(root)
	if err != nil {
		return nil, d.StorageType + strconv.Quote(d.PathOrInlineDv), err
	}
	data, err := readDeletionVectorFile(path, d.offset(), d.SizeInBytes)
	return data, path, err
}

// readDeletionVectorFile reads the deletion vector of size bytes at offset
// in a deletion vector file and checks it against its size field and
// checksum.
func readDeletionVectorFile(path string, offset int64, size int32) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var version [1]byte
	if _, err := f.ReadAt(version[:], 0); err != nil {
		return nil, fmt.Errorf("%w: no format version: %v", ErrCorruptDeletionVector, err)
	}
	if version[0] != deletionVectorFileVersion {
		return nil, fmt.Errorf("%w: file format version %d, want %d", ErrCorruptDeletionVector, version[0], deletionVectorFileVersion)
	}
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if offset < 1 || size < 0 || offset+4+int64(size)+4 > info.Size() {
		return nil, fmt.Errorf("%w: %d bytes at offset %d do not fit in the file's %d",
			ErrCorruptDeletionVector, size, offset, info.Size())
	}
	buf := make([]byte, 4+int(size)+4)
	if _, err := f.ReadAt(buf, offset); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: file ends before the %d bytes at offset %d", ErrCorruptDeletionVector, size, offset)
		}
		return nil, err
	}
	if n := binary.BigEndian.Uint32(buf); n != uint32(size) {
		return nil, fmt.Errorf("%w: size field %d at offset %d, descriptor says %d", ErrCorruptDeletionVector, n, offset, size)
	}
	data := buf[4 : 4+size]
	if want, got := binary.BigEndian.Uint32(buf[4+size:]), crc32.ChecksumIEEE(data); got != want {
		return nil, fmt.Errorf("%w: checksum %08x at offset %d, data sums to %08x", ErrCorruptDeletionVector, want, offset, got)
	}
	return data, nil
}

// InlineDeletionVector returns the descriptor of dv kept inline in the log
// (storage type i). Inline suits a small deletion vector: it makes the
// log and checkpoints larger by its Z85 text, and needs no file.
func InlineDeletionVector(dv *DeletionVector) (*DeletionVectorDescriptor, error) {
	data, err := dv.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(data) > math.MaxInt32 {
		return nil, fmt.Errorf("inline deletion vector: %d bytes is too large", len(data))
	}
	return &DeletionVectorDescriptor{
		StorageType:    DeletionVectorStorageInline,
		PathOrInlineDv: z85Encode(data),
		SizeInBytes:    int32(len(data)),
		Cardinality:    dv.Cardinality(),
	}, nil
}

// WriteDeletionVectorFile writes dvs to one new deletion vector file in the
// root of the table at root, deletion_vector_<uuid>.bin, flushed to stable
// storage, and returns their descriptors (storage type u, without a
// prefix), in the order of dvs. The file holds the format version (1) and
// then, per deletion vector, its size (big-endian 32 bits), its bytes
// (DeletionVector.MarshalBinary) and their CRC-32 (big-endian). Nothing
// is committed: the descriptors go into add actions (see
// WithDeletionVector); a file no commit names is an orphan that vacuum
// deletes.
func WriteDeletionVectorFile(root string, dvs []*DeletionVector) ([]*DeletionVectorDescriptor, error) {
	if len(dvs) == 0 {
		return nil, nil
	}
	id, err := newUUIDBytes()
	if err != nil {
		return nil, err
	}
	buf := []byte{deletionVectorFileVersion}
	out := make([]*DeletionVectorDescriptor, len(dvs))
	for i, dv := range dvs {
		data, err := dv.MarshalBinary()
		if err != nil {
			return nil, err
		}
		if int64(len(buf))+int64(len(data))+8 > math.MaxInt32 {
			return nil, errors.New("write deletion vector file: more than 2 GiB of deletion vectors")
		}
		off := int32(len(buf))
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(data)))
		buf = append(buf, data...)
		buf = binary.BigEndian.AppendUint32(buf, crc32.ChecksumIEEE(data))
		out[i] = &DeletionVectorDescriptor{
			StorageType:    DeletionVectorStorageRelative,
			PathOrInlineDv: z85Encode(id[:]),
			Offset:         &off,
			SizeInBytes:    int32(len(data)),
			Cardinality:    dv.Cardinality(),
		}
	}
	if err := mkdirAllSync(root); err != nil {
		return nil, fmt.Errorf("write deletion vector file: %w", err)
	}
	path := filepath.Join(root, "deletion_vector_"+formatUUID(id)+".bin")
	if err := writeFileSync(path, buf); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write deletion vector file: %w", err)
	}
	if err := fsyncDir(root); err != nil {
		return nil, fmt.Errorf("write deletion vector file: %w", err)
	}
	return out, nil
}

// StoreDeletionVectors stores dvs for the table at root and returns their
// descriptors, in the order of dvs: inline those of at most maxInline
// bytes serialised (InlineDeletionVector), the others in one new file
// (WriteDeletionVectorFile). A maxInline of zero or less writes every one
// to the file.
func StoreDeletionVectors(root string, dvs []*DeletionVector, maxInline int) ([]*DeletionVectorDescriptor, error) {
	out := make([]*DeletionVectorDescriptor, len(dvs))
	var toFile []*DeletionVector
	var at []int
	for i, dv := range dvs {
		if maxInline > 0 {
			data, err := dv.MarshalBinary()
			if err != nil {
				return nil, err
			}
			if len(data) <= maxInline {
				if out[i], err = InlineDeletionVector(dv); err != nil {
					return nil, err
				}
				continue
			}
		}
		toFile = append(toFile, dv)
		at = append(at, i)
	}
	written, err := WriteDeletionVectorFile(root, toFile)
	if err != nil {
		return nil, err
	}
	for j, d := range written {
		out[at[j]] = d
	}
	return out, nil
}
