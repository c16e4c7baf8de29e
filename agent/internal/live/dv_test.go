package live

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// TestMirrorScanHonoursDeletionVectors reads a mirror version written
// merge-on-read: a row of the first file is deleted by a deletion vector
// and its new version is in a new file whose key range overlaps the
// first's. Pages and lookups give the new version only, after the same
// file was read (and cached) at the version before without the vector.
func TestMirrorScanHonoursDeletionVectors(t *testing.T) {
	ctx := context.Background()
	h := NewHub(nil, HubConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	keys := []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}
	v1 := writeMirror(t, h, store.Column{Name: "k", TypeOID: pgtype.Float8OID, TypeMod: -1, Key: true}, keys, 3)
	if ids, _ := pageSource(t, h, v1, len(keys)); len(ids) != len(keys) {
		t.Fatalf("version 1: ids %v", ids)
	}
	root := v1.files[0].root
	descs, err := delta.StoreDeletionVectors(root, []*delta.DeletionVector{delta.NewDeletionVector(1)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var adds []*delta.Add
	for i, f := range v1.files {
		add := f.add
		if i == 0 {
			if add, err = add.WithDeletionVector(descs[0]); err != nil {
				t.Fatal(err)
			}
		}
		adds = append(adds, add)
	}
	// Key 2 (row 1 of the first file) gets id 100, in a file of its own.
	k := typemap.AppendKeyValue(nil, float64(2))
	add, err := delta.WriteDataFile(ctx, root, v1.schema, nil, nil, []delta.Row{{float64(2), int32(100)}}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	add.Tags = map[string]string{tagMirrorMinKey: hex.EncodeToString(k), tagMirrorMaxKey: hex.EncodeToString(k)}
	adds = append(adds, add)
	v2, err := h.mirrorScanOf(v1.rel, mirrorLayout{root: root, version: 2, schema: v1.schema, conf: map[string]string{confMirrorKey: `["k"]`}, adds: adds})
	if err != nil {
		t.Fatal(err)
	}
	if v2.ordered {
		t.Error("a scan of files of overlapping key ranges is ordered")
	}
	want := []string{"0", "100", "2", "3", "4", "5", "6", "7", "8"}
	for _, limit := range []int{1, 2, 4, len(keys)} {
		if ids, _ := pageSource(t, h, v2, limit); !slices.Equal(ids, want) {
			t.Errorf("limit %d: ids %v, want %v", limit, ids, want)
		}
	}
	row, ok, err := findRow(ctx, h.types, v2, "2")
	if err != nil || !ok || string(row.Values["id"]) != strconv.Itoa(100) {
		t.Errorf("key 2: %+v, %v, %v; want id 100", row, ok, err)
	}
}
