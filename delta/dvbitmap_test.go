package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// TestZ85 checks the Z85 codec against the example of ZeroMQ RFC 32 and
// the UUID of a deletion vector file of a reference table.
func TestZ85(t *testing.T) {
	raw := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	if got := z85Encode(raw); got != "HelloWorld" {
		t.Errorf("encode = %q, want HelloWorld", got)
	}
	back, err := z85Decode("HelloWorld")
	if err != nil || !bytes.Equal(back, raw) {
		t.Errorf("decode = %x, %v", back, err)
	}
	// table-with-dv-small names deletion_vector_61d16c75-....bin so.
	uuid, err := z85Decode("vBn[lx{q8@P<9BNH/isA")
	if err != nil {
		t.Fatal(err)
	}
	if got := formatUUID([16]byte(uuid)); got != "61d16c75-6994-46b7-a15b-8b538852e50e" {
		t.Errorf("uuid = %s", got)
	}
	// Bytes not a multiple of four are padded with zeros.
	if got := z85Encode([]byte{1, 2, 3}); len(got) != 5 {
		t.Errorf("padded encoding %q", got)
	}
	for _, bad := range []string{"abcd", "abcd\"", "#####"} {
		if _, err := z85Decode(bad); err == nil {
			t.Errorf("decode %q: no error", bad)
		}
	}
}

// TestDeletionVectorInlineSpecExample decodes the inline deletion vector of
// the protocol's third JSON example: row indexes 3, 4, 7, 11, 18, 29.
func TestDeletionVectorInlineSpecExample(t *testing.T) {
	d := &DeletionVectorDescriptor{StorageType: DeletionVectorStorageInline,
		PathOrInlineDv: "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", SizeInBytes: 40, Cardinality: 6}
	dv, err := ReadDeletionVector("", d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dv.Rows(), []uint64{3, 4, 7, 11, 18, 29}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if d.UniqueID() != "iwi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L" {
		t.Errorf("unique id %q", d.UniqueID())
	}
	d.Cardinality = 7
	if _, err := ReadDeletionVector("", d); !errors.Is(err, ErrCorruptDeletionVector) {
		t.Errorf("wrong cardinality: %v", err)
	}
}

// TestDeletionVectorRoundTrip encodes sets of row indexes, small and large,
// in runs and scattered, some above 2^32, and decodes them back; the
// encoding is the portable 64-bit format of roaring64 after the magic
// number.
func TestDeletionVectorRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sets := map[string][]uint64{
		"empty":  nil,
		"one":    {0},
		"small":  {3, 4, 7, 11, 18, 29},
		"run":    nil,
		"random": nil,
		"high":   {1, 1 << 32, 1<<32 + 5, 3<<32 + 1},
	}
	for i := range uint64(100000) {
		sets["run"] = append(sets["run"], 1000+i)
	}
	for range 5000 {
		sets["random"] = append(sets["random"], rng.Uint64N(1<<22))
	}
	for name, rows := range sets {
		dv := NewDeletionVector(rows...)
		data, err := dv.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m := binary.LittleEndian.Uint32(data); m != 1681511377 {
			t.Fatalf("%s: magic %d", name, m)
		}
		ref := roaring64.BitmapOf(rows...)
		ref.RunOptimize()
		var refBuf bytes.Buffer
		if _, err := ref.WriteTo(&refBuf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data[4:], refBuf.Bytes()) {
			t.Errorf("%s: encoding differs from roaring64's portable format", name)
		}
		back := &DeletionVector{}
		if err := back.UnmarshalBinary(data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := slices.Sorted(slices.Values(slices.Compact(slices.Sorted(slices.Values(rows)))))
		if got := back.Rows(); !slices.Equal(got, want) && len(want)+len(got) > 0 {
			t.Errorf("%s: %d rows back, want %d", name, len(got), len(want))
		}
		if back.Cardinality() != int64(len(want)) {
			t.Errorf("%s: cardinality %d, want %d", name, back.Cardinality(), len(want))
		}
		for _, r := range rows {
			if !back.Contains(r) {
				t.Errorf("%s: %d missing", name, r)
				break
			}
		}
		if len(want) > 0 {
			if m, ok := back.Max(); !ok || m != want[len(want)-1] {
				t.Errorf("%s: max %d %v", name, m, ok)
			}
		}
	}
	if _, err := NewDeletionVector(1 << 63).MarshalBinary(); err == nil {
		t.Error("row index with the key's top bit set encoded")
	}
}

// TestDeletionVectorSetOps checks Or, AndNot and Clone.
func TestDeletionVectorSetOps(t *testing.T) {
	a := NewDeletionVector(1, 2, 3, 1<<33)
	b := NewDeletionVector(3, 4, 1<<34)
	c := a.Clone()
	c.Or(b)
	if got := c.Rows(); !slices.Equal(got, []uint64{1, 2, 3, 4, 1 << 33, 1 << 34}) {
		t.Errorf("or: %v", got)
	}
	if got := a.Rows(); !slices.Equal(got, []uint64{1, 2, 3, 1 << 33}) {
		t.Errorf("clone changed with the copy: %v", got)
	}
	if got := c.AndNot(a).Rows(); !slices.Equal(got, []uint64{4, 1 << 34}) {
		t.Errorf("and not: %v", got)
	}
	if got := a.AndNot(nil).Rows(); !slices.Equal(got, a.Rows()) {
		t.Errorf("and not nil: %v", got)
	}
	var none *DeletionVector
	if none.Contains(1) || none.Cardinality() != 0 || len(none.Rows()) != 0 {
		t.Error("nil deletion vector is not empty")
	}
}

// TestDeletionVectorCorrupt checks that damaged bytes are an error
// wrapping ErrCorruptDeletionVector, never a crash or a wrong set.
func TestDeletionVectorCorrupt(t *testing.T) {
	data, err := NewDeletionVector(3, 4, 7, 11, 18, 29, 1<<32).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(data) {
		if err := (&DeletionVector{}).UnmarshalBinary(data[:n]); !errors.Is(err, ErrCorruptDeletionVector) {
			t.Errorf("cut to %d bytes: %v", n, err)
		}
	}
	if err := (&DeletionVector{}).UnmarshalBinary(append(slices.Clone(data), 0)); !errors.Is(err, ErrCorruptDeletionVector) {
		t.Errorf("trailing byte: %v", err)
	}
	bad := slices.Clone(data)
	bad[0]++
	if err := (&DeletionVector{}).UnmarshalBinary(bad); !errors.Is(err, ErrCorruptDeletionVector) {
		t.Errorf("bad magic: %v", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		bad := slices.Clone(data)
		bad[4+rng.IntN(len(bad)-4)] ^= byte(1 + rng.IntN(255))
		_ = (&DeletionVector{}).UnmarshalBinary(bad) // must not panic
	}
}

// TestDeletionVectorFile writes deletion vectors to one file and reads each
// back by its descriptor, then damages the file in the ways a reader must
// notice: each read then fails naming the file.
func TestDeletionVectorFile(t *testing.T) {
	root := t.TempDir()
	dvs := []*DeletionVector{NewDeletionVector(0, 9), NewDeletionVector(1, 2, 3, 100000), NewDeletionVector(5)}
	descs, err := WriteDeletionVectorFile(root, dvs)
	if err != nil {
		t.Fatal(err)
	}
	if len(descs) != 3 || *descs[0].Offset != 1 {
		t.Fatalf("descriptors %+v", descs)
	}
	path, err := descs[0].FilePath(root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(path), "deletion_vector_") || filepath.Dir(path) != root {
		t.Errorf("file %s", path)
	}
	for i, d := range descs {
		if d.StorageType != DeletionVectorStorageRelative || len(d.PathOrInlineDv) != 20 || d.Cardinality != dvs[i].Cardinality() {
			t.Errorf("descriptor %d: %+v", i, d)
		}
		got, err := ReadDeletionVector(root, d)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !slices.Equal(got.Rows(), dvs[i].Rows()) {
			t.Errorf("dv %d: %v, want %v", i, got.Rows(), dvs[i].Rows())
		}
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size := int(descs[1].SizeInBytes)
	off := int(*descs[1].Offset)
	// The file format, by hand: version, then size, bytes and CRC-32.
	data, _ := dvs[1].MarshalBinary()
	if good[0] != 1 || int(binary.BigEndian.Uint32(good[off:])) != size ||
		!bytes.Equal(good[off+4:off+4+size], data) || binary.BigEndian.Uint32(good[off+4+size:]) != crc32.ChecksumIEEE(data) {
		t.Error("file layout differs from the protocol's")
	}
	damage := map[string]func([]byte) []byte{
		"version":  func(b []byte) []byte { b[0] = 2; return b },
		"size":     func(b []byte) []byte { b[off+3]++; return b },
		"checksum": func(b []byte) []byte { b[off+4+size+3]++; return b },
		"bitmap":   func(b []byte) []byte { b[off+4+size-1]++; return b },
		"cut":      func(b []byte) []byte { return b[:off+size] },
	}
	for name, f := range damage {
		if err := os.WriteFile(path, f(slices.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadDeletionVector(root, descs[1])
		if !errors.Is(err, ErrCorruptDeletionVector) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want a corrupt deletion vector error naming %s", name, err, path)
		}
	}
	os.Remove(path)
	if _, err := ReadDeletionVector(root, descs[0]); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
}

// TestStoreDeletionVectors checks that small deletion vectors go inline and
// the others to one file.
func TestStoreDeletionVectors(t *testing.T) {
	root := t.TempDir()
	big := NewDeletionVector()
	for i := range uint64(2000) {
		big.Add(i * 3)
	}
	dvs := []*DeletionVector{NewDeletionVector(1), big, NewDeletionVector(2, 3), big}
	descs, err := StoreDeletionVectors(root, dvs, 64)
	if err != nil {
		t.Fatal(err)
	}
	types := ""
	for i, d := range descs {
		types += d.StorageType
		got, err := ReadDeletionVector(root, d)
		if err != nil || !slices.Equal(got.Rows(), dvs[i].Rows()) {
			t.Errorf("%d: %v", i, err)
		}
	}
	if types != "iuiu" || descs[1].PathOrInlineDv != descs[3].PathOrInlineDv {
		t.Errorf("storage %q, files %s %s", types, descs[1].PathOrInlineDv, descs[3].PathOrInlineDv)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deletion_vector_*.bin"))
	if len(files) != 1 {
		t.Errorf("%d files", len(files))
	}
	if descs, err := StoreDeletionVectors(root, dvs[:1], 64); err != nil || descs[0].StorageType != "i" {
		t.Errorf("inline only: %v", err)
	}
	files, _ = filepath.Glob(filepath.Join(root, "deletion_vector_*.bin"))
	if len(files) != 1 {
		t.Errorf("a file written for inline deletion vectors only")
	}
}
