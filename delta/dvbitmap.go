package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
)

// ErrCorruptDeletionVector is returned (wrapped, with the data file or the
// deletion vector file named in the message) when a deletion vector cannot
// be decoded: a bad magic number or version, a size or checksum that does
// not match, a malformed bitmap, a cardinality other than the descriptor's,
// or a row index beyond the rows of its data file.
var ErrCorruptDeletionVector = errors.New("delta: corrupt deletion vector")

// deletionVectorMagic is the magic number that starts a serialised
// RoaringBitmapArray, the format of a deletion vector, and
// deletionVectorNativeMagic that of its older native format.
const (
	deletionVectorMagic       = 1681511377
	deletionVectorNativeMagic = 1681511376
)

// DeletionVector is a set of row indexes of one data file: the positions,
// counted from 0 across the file's row groups, of the rows the file's
// logical file no longer holds. It is kept as the Delta protocol stores
// it, a 64-bit roaring bitmap: a 32-bit roaring bitmap (a bucket) per
// distinct high 32 bits of the indexes. The zero value is an empty set. A
// DeletionVector is not safe for concurrent use while it is changed.
type DeletionVector struct {
	// keys are the high 32 bits of the buckets, ascending; buckets[i]
	// holds the low 32 bits of the indexes of keys[i] and is never empty.
	keys    []uint32
	buckets []*roaring.Bitmap
}

// NewDeletionVector returns the deletion vector of the given row indexes.
func NewDeletionVector(rows ...uint64) *DeletionVector {
	dv := &DeletionVector{}
	for _, r := range rows {
		dv.Add(r)
	}
	return dv
}

// bucket returns the bucket of key, and its position or where it goes.
func (dv *DeletionVector) bucket(key uint32) (*roaring.Bitmap, int) {
	i := sort.Search(len(dv.keys), func(i int) bool { return dv.keys[i] >= key })
	if i < len(dv.keys) && dv.keys[i] == key {
		return dv.buckets[i], i
	}
	return nil, i
}

// Add adds a row index to the set.
func (dv *DeletionVector) Add(row uint64) {
	key := uint32(row >> 32)
	b, i := dv.bucket(key)
	if b == nil {
		b = roaring.New()
		dv.keys = slices.Insert(dv.keys, i, key)
		dv.buckets = slices.Insert(dv.buckets, i, b)
	}
	b.Add(uint32(row))
}

// Contains reports whether the set holds a row index.
func (dv *DeletionVector) Contains(row uint64) bool {
	if dv == nil {
		return false
	}
	b, _ := dv.bucket(uint32(row >> 32))
	return b != nil && b.Contains(uint32(row))
}

// Cardinality returns the number of row indexes in the set.
func (dv *DeletionVector) Cardinality() int64 {
	if dv == nil {
		return 0
	}
	var n uint64
	for _, b := range dv.buckets {
		n += b.GetCardinality()
	}
	return int64(n)
}

// Max returns the largest row index of the set, and false when it is
// empty.
func (dv *DeletionVector) Max() (uint64, bool) {
	if dv == nil || len(dv.keys) == 0 {
		return 0, false
	}
	last := len(dv.keys) - 1
	return uint64(dv.keys[last])<<32 | uint64(dv.buckets[last].Maximum()), true
}

// Rows returns the row indexes of the set in ascending order.
func (dv *DeletionVector) Rows() []uint64 {
	if dv == nil {
		return nil
	}
	out := make([]uint64, 0, dv.Cardinality())
	for i, b := range dv.buckets {
		high := uint64(dv.keys[i]) << 32
		it := b.Iterator()
		for it.HasNext() {
			out = append(out, high|uint64(it.Next()))
		}
	}
	return out
}

// Clone returns a copy of the set.
func (dv *DeletionVector) Clone() *DeletionVector {
	out := &DeletionVector{}
	if dv == nil {
		return out
	}
	out.keys = slices.Clone(dv.keys)
	out.buckets = make([]*roaring.Bitmap, len(dv.buckets))
	for i, b := range dv.buckets {
		out.buckets[i] = b.Clone()
	}
	return out
}

// Or adds every row index of other to the set: for example the rows a new
// delete removes to the deletion vector a file has already.
func (dv *DeletionVector) Or(other *DeletionVector) {
	if other == nil {
		return
	}
	for i, key := range other.keys {
		b, at := dv.bucket(key)
		if b == nil {
			dv.keys = slices.Insert(dv.keys, at, key)
			dv.buckets = slices.Insert(dv.buckets, at, other.buckets[i].Clone())
			continue
		}
		b.Or(other.buckets[i])
	}
}

// AndNot returns the row indexes of the set that other does not hold.
func (dv *DeletionVector) AndNot(other *DeletionVector) *DeletionVector {
	out := &DeletionVector{}
	if dv == nil {
		return out
	}
	for i, key := range dv.keys {
		b := dv.buckets[i].Clone()
		if other != nil {
			if ob, _ := other.bucket(key); ob != nil {
				b.AndNot(ob)
			}
		}
		if !b.IsEmpty() {
			out.keys = append(out.keys, key)
			out.buckets = append(out.buckets, b)
		}
	}
	return out
}

// MarshalBinary returns the set in the format of the Delta protocol's
// deletion vectors (RoaringBitmapArray): the magic number 1681511377 as a
// little-endian 32-bit integer, then the 64-bit roaring bitmap in the
// portable format of the RoaringBitmap specification: the number of
// buckets (64 bits), and for each, in ascending order, its key (32 bits)
// and its 32-bit roaring bitmap, all little-endian. Buckets are
// run-optimised first. It is what an inline deletion vector encodes and a
// deletion vector file holds.
func (dv *DeletionVector) MarshalBinary() ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(binary.LittleEndian.AppendUint32(nil, deletionVectorMagic))
	var n int
	if dv != nil {
		n = len(dv.keys)
	}
	buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	for i := range n {
		if dv.keys[i] > math.MaxInt32 {
			// The protocol keeps the keys' top bit clear, for readers
			// that read them signed.
			return nil, fmt.Errorf("encode deletion vector: row index %d is too large", uint64(dv.keys[i])<<32)
		}
		buf.Write(binary.LittleEndian.AppendUint32(nil, dv.keys[i]))
		b := dv.buckets[i].Clone()
		b.RunOptimize()
		if _, err := b.WriteTo(&buf); err != nil {
			return nil, fmt.Errorf("encode deletion vector: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// UnmarshalBinary sets the set to the deletion vector data holds: in the
// format MarshalBinary writes, or in the older native format of Delta's
// RoaringBitmapArray that the protocol's inline example uses (magic number
// 1681511376 big-endian, the number of buckets and each bucket's size as
// big-endian 32-bit integers, a bucket's key being its position). Data of
// another format, or with bytes left over, fails with an error wrapping
// ErrCorruptDeletionVector.
func (dv *DeletionVector) UnmarshalBinary(data []byte) (err error) {
	defer func() {
		// The roaring decoder trusts the sizes it reads; a corrupt
		// bitmap must be an error, not a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: malformed bitmap: %v", ErrCorruptDeletionVector, r)
		}
	}()
	if len(data) < 8 {
		return fmt.Errorf("%w: %d bytes is too short", ErrCorruptDeletionVector, len(data))
	}
	var out DeletionVector
	switch {
	case binary.LittleEndian.Uint32(data) == deletionVectorMagic:
		err = out.readPortable(data[4:])
	case binary.BigEndian.Uint32(data) == deletionVectorNativeMagic:
		err = out.readNative(data[4:])
	default:
		err = fmt.Errorf("%w: magic number %d, want %d", ErrCorruptDeletionVector,
			binary.LittleEndian.Uint32(data), deletionVectorMagic)
	}
	if err != nil {
		return err
	}
	*dv = out
	return nil
}

// readPortable reads the 64-bit roaring bitmap in the portable format into
// an empty set.
func (dv *DeletionVector) readPortable(data []byte) error {
	if len(data) < 8 {
		return fmt.Errorf("%w: no bucket count", ErrCorruptDeletionVector)
	}
	n := binary.LittleEndian.Uint64(data)
	rest := data[8:]
	// A bucket takes at least 4 bytes of key and 8 of bitmap header.
	if n > uint64(len(rest))/12 {
		return fmt.Errorf("%w: %d buckets in %d bytes", ErrCorruptDeletionVector, n, len(rest))
	}
	for i := range n {
		if len(rest) < 4 {
			return fmt.Errorf("%w: bucket %d is cut short", ErrCorruptDeletionVector, i)
		}
		key := binary.LittleEndian.Uint32(rest)
		read, err := dv.readBucket(key, rest[4:])
		if err != nil {
			return fmt.Errorf("%w: bucket %d: %v", ErrCorruptDeletionVector, i, err)
		}
		rest = rest[4+read:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: %d bytes after the bitmap", ErrCorruptDeletionVector, len(rest))
	}
	return nil
}

// readNative reads the buckets of the native format into an empty set.
func (dv *DeletionVector) readNative(data []byte) error {
	n := binary.BigEndian.Uint32(data)
	rest := data[4:]
	if uint64(n) > uint64(len(rest))/12 {
		return fmt.Errorf("%w: %d buckets in %d bytes", ErrCorruptDeletionVector, n, len(rest))
	}
	for i := range n {
		if len(rest) < 4 {
			return fmt.Errorf("%w: bucket %d is cut short", ErrCorruptDeletionVector, i)
		}
		size := binary.BigEndian.Uint32(rest)
		if uint64(size) > uint64(len(rest)-4) {
			return fmt.Errorf("%w: bucket %d of %d bytes is cut short", ErrCorruptDeletionVector, i, size)
		}
		read, err := dv.readBucket(i, rest[4:4+size])
		if err != nil {
			return fmt.Errorf("%w: bucket %d: %v", ErrCorruptDeletionVector, i, err)
		}
		if read != int64(size) {
			return fmt.Errorf("%w: bucket %d holds %d bytes, its size says %d", ErrCorruptDeletionVector, i, read, size)
		}
		rest = rest[4+size:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: %d bytes after the bitmap", ErrCorruptDeletionVector, len(rest))
	}
	return nil
}

// readBucket reads the 32-bit roaring bitmap at the start of data as the
// bucket of key, which must be above the set's keys, and returns the bytes
// it took.
func (dv *DeletionVector) readBucket(key uint32, data []byte) (int64, error) {
	if len(dv.keys) > 0 && key <= dv.keys[len(dv.keys)-1] {
		return 0, errors.New("bucket keys are not ascending")
	}
	b := roaring.New()
	read, err := b.ReadFrom(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	if err := b.Validate(); err != nil {
		return 0, err
	}
	if !b.IsEmpty() {
		dv.keys = append(dv.keys, key)
		dv.buckets = append(dv.buckets, b)
	}
	return read, nil
}
