package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// maxFuzzRows bounds the rows a fuzz target lists: a few bytes of run
// containers stand for billions of rows.
const maxFuzzRows = 1 << 20

// FuzzDeletionVector reads arbitrary bytes as a serialised deletion
// vector (DeletionVector.UnmarshalBinary, the portable and the native
// formats): it must never panic and fails only with an error wrapping
// ErrCorruptDeletionVector. A set it reads encodes (MarshalBinary) and
// decodes back to the same rows, encoded the same; the set operations
// agree with it. The bytes are also taken as row indexes, eight bytes
// each: their set must encode and decode back to the same rows, also
// through an inline descriptor.
func FuzzDeletionVector(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		dv := &DeletionVector{}
		if err := dv.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorruptDeletionVector) {
				t.Fatalf("error %v does not wrap ErrCorruptDeletionVector", err)
			}
		} else {
			checkDeletionVector(t, dv)
		}

		var rows []uint64
		for b := data; len(b) >= 8; b = b[8:] {
			// The protocol keeps the top bit of a bucket's key clear.
			rows = append(rows, binary.LittleEndian.Uint64(b)&(math.MaxInt32<<32|math.MaxUint32))
		}
		set := NewDeletionVector(rows...)
		want := slices.Compact(slices.Sorted(slices.Values(rows)))
		if got := set.Rows(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("rows %v, want %v", got, want)
		}
		enc, err := set.MarshalBinary()
		if err != nil {
			t.Fatalf("encode %v: %v", want, err)
		}
		back := &DeletionVector{}
		if err := back.UnmarshalBinary(enc); err != nil {
			t.Fatalf("decode the encoding of %v: %v", want, err)
		}
		if got := back.Rows(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("rows %v decoded as %v", want, got)
		}
		d, err := InlineDeletionVector(set)
		if err != nil {
			t.Fatal(err)
		}
		inline, err := ReadDeletionVector("", d)
		if err != nil {
			t.Fatalf("inline %+v of %v: %v", d, want, err)
		}
		if got := inline.Rows(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
			t.Fatalf("rows %v read inline as %v", want, got)
		}
	})
}

// checkDeletionVector checks a deletion vector decoded from arbitrary
// bytes.
func checkDeletionVector(t *testing.T, dv *DeletionVector) {
	t.Helper()
	n := dv.Cardinality()
	if n < 0 || (n == 0) != (len(dv.keys) == 0) {
		t.Fatalf("cardinality %d of %d buckets", n, len(dv.keys))
	}
	enc, err := dv.MarshalBinary()
	if err != nil {
		// Only a row index of a key with its top bit set does not encode.
		if m, _ := dv.Max(); m < 1<<63 {
			t.Fatalf("decoded set of max %d does not encode: %v", m, err)
		}
		return
	}
	back := &DeletionVector{}
	if err := back.UnmarshalBinary(enc); err != nil {
		t.Fatalf("encoding of a decoded set does not decode: %v", err)
	}
	if back.Cardinality() != n {
		t.Fatalf("%d rows encoded and decoded as %d", n, back.Cardinality())
	}
	if again, err := back.MarshalBinary(); err != nil || !bytes.Equal(again, enc) {
		t.Fatalf("a set encoded, decoded and encoded again differs: %v", err)
	}
	if n > maxFuzzRows {
		return
	}
	rows := dv.Rows()
	if int64(len(rows)) != n || !slices.IsSorted(rows) || !slices.Equal(back.Rows(), rows) {
		t.Fatalf("rows %v, cardinality %d, decoded back as %v", rows, n, back.Rows())
	}
	if len(rows) > 0 {
		if m, ok := dv.Max(); !ok || m != rows[len(rows)-1] || !dv.Contains(m) || !dv.Contains(rows[0]) {
			t.Fatalf("max %d, %v of rows %v", m, ok, rows)
		}
	}
	if c := dv.AndNot(dv).Cardinality(); c != 0 {
		t.Fatalf("a set less itself has %d rows", c)
	}
	c := dv.Clone()
	c.Or(dv)
	if !slices.Equal(c.Rows(), rows) {
		t.Fatalf("a set or itself is %v, want %v", c.Rows(), rows)
	}
}

// FuzzZ85 decodes arbitrary text as Z85 and encodes arbitrary bytes: text
// that decodes encodes back to itself, and bytes encode and decode back
// to themselves, padded with zeros to a multiple of four. z85Decode must
// never panic.
func FuzzZ85(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string, data []byte) {
		if raw, err := z85Decode(s); err == nil {
			if len(raw) != len(s)/5*4 || z85Encode(raw) != s {
				t.Fatalf("%q decodes as %x, which encodes as %q", s, raw, z85Encode(raw))
			}
		} else if !strings.HasPrefix(err.Error(), "z85: ") {
			t.Fatalf("%q: error %v", s, err)
		}
		enc := z85Encode(data)
		back, err := z85Decode(enc)
		padded := append(slices.Clone(data), make([]byte, (4-len(data)%4)%4)...)
		if err != nil || !bytes.Equal(back, padded) {
			t.Fatalf("%x encodes as %q, which decodes as %x, %v", data, enc, back, err)
		}
	})
}

// fuzzDVFileID is the Z85 UUID of the deletion vector file of
// FuzzDeletionVectorDescriptor's table.
const fuzzDVFileID = "vBn[lx{q8@P<9BNH/isA"

// FuzzDeletionVectorDescriptor reads arbitrary bytes as the deletionVector
// of an add action, in a table whose root holds a deletion vector file:
// the descriptor's id and file path, and the deletion vector it names
// inline or in a file of the table (storage types i and u), must read
// without panicking, and fail only with ErrCorruptDeletionVector or, for
// a file that cannot be opened, the error of opening it. An absolute path (p) is not
// read: it may name any file.
func FuzzDeletionVectorDescriptor(f *testing.F) {
	root := f.TempDir()
	descs, err := WriteDeletionVectorFile(root, []*DeletionVector{NewDeletionVector(3, 4, 7, 11, 18, 29), NewDeletionVector(0, 1<<32, 5<<32+7)})
	if err != nil {
		f.Fatal(err)
	}
	// The file is renamed to the UUID of table-with-dv-small's, so that
	// the seeds of testdata/fuzz can name it.
	from, err := descs[0].FilePath(root)
	if err != nil {
		f.Fatal(err)
	}
	for _, d := range descs {
		d.PathOrInlineDv = fuzzDVFileID
	}
	to, err := descs[0].FilePath(root)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.Rename(from, to); err != nil {
		f.Fatal(err)
	}
	for _, d := range descs {
		data, err := json.Marshal(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d DeletionVectorDescriptor
		if json.Unmarshal(data, &d) != nil {
			return
		}
		d.UniqueID()
		d.FilePath(root)
		if d.StorageType != DeletionVectorStorageInline && d.StorageType != DeletionVectorStorageRelative {
			return
		}
		dv, err := ReadDeletionVector(root, &d)
		if err != nil {
			var pathErr *fs.PathError
			if !errors.Is(err, ErrCorruptDeletionVector) && !errors.As(err, &pathErr) {
				t.Fatalf("%+v: error %v wraps neither ErrCorruptDeletionVector nor a file's error", d, err)
			}
			return
		}
		if dv.Cardinality() != d.Cardinality {
			t.Fatalf("%+v read with %d rows", d, dv.Cardinality())
		}
	})
}
