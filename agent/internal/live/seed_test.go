package live

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// TestSeedTakesAMirrorNotCommittedYetFromTheQueue: a hub that starts while
// the applier creates a table's mirror (its log directory made, no version
// in it yet) takes the table's rows from the queue, which holds all of
// them, rather than serve the table from a mirror that holds nothing.
func TestSeedTakesAMirrorNotCommittedYetFromTheQueue(t *testing.T) {
	tablesDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tablesDir, "public.stock", delta.LogDirName), 0o750); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h := NewHub(db, HubConfig{TablesDir: tablesDir, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	rel := &store.Relation{Key: store.RelationKey{OID: 16384, LSN: 0x100}, Schema: "public", Name: "stock", ReplicaIdentity: 'd',
		Columns: []store.Column{{Name: "id", TypeOID: 20, TypeMod: -1, Key: true}}}
	tables, _ := h.seed(context.Background(), map[store.RelationKey]*store.Relation{rel.Key: rel}, defaultAppIDPrefix)
	if st := tables["public.stock"]; st != nil && st.overflow {
		t.Fatal("a table whose mirror has no version yet is served from that mirror")
	}
}
