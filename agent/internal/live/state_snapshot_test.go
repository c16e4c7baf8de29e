package live

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// TestSnapshotChangeIsAnUpsert applies a copied row (store.OpSnapshot) of a
// key the live view holds and of a new key: the first replaces the row,
// the second adds one, and clients are told "snapshot" with the row.
func TestSnapshotChangeIsAnUpsert(t *testing.T) {
	rel := &store.Relation{Key: store.RelationKey{OID: 1, LSN: 1}, Schema: "public", Name: "t", ReplicaIdentity: 'd',
		Columns: []store.Column{{Name: "id", TypeOID: pgtype.Int4OID, Key: true}, {Name: "v", TypeOID: pgtype.TextOID}}}
	row := func(id int64, v string) []store.Value {
		return []store.Value{{Kind: store.KindInt32, Int: id}, {Kind: store.KindString, Bytes: []byte(v)}}
	}
	ts := newTableState(rel, DefaultMaxValueBytes)
	ts.apply(rel, &store.Change{Op: store.OpInsert, Relation: rel.Key, New: row(1, "old")}, true)
	for _, c := range []store.Change{
		{Op: store.OpSnapshot, Relation: rel.Key, New: row(1, "copied")},
		{Op: store.OpSnapshot, Relation: rel.Key, New: row(2, "new")},
	} {
		out, ok := ts.apply(rel, &c, true)
		if !ok || out.Op != "snapshot" || out.Row == nil {
			t.Fatalf("applying %+v: ok %v, change %+v", c, ok, out)
		}
	}
	if len(ts.rows) != 2 {
		t.Fatalf("%d rows held, want 2", len(ts.rows))
	}
	if got := string(ts.rows["[1]"].json["v"]); got != `"copied"` {
		t.Fatalf("row 1 holds v = %s, want the copied value", got)
	}
}
