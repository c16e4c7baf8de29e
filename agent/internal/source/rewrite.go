package source

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/lakeside/lakeside/store"
)

// A table rewrite that changes values (ALTER COLUMN … TYPE with USING, of
// another type or the same one; ADD COLUMN with a volatile default) sends
// no change for the rows it rewrote: capture must notice it in the
// catalog and have the rows copied again. It gives the table new storage
// (a new file node, or for a partitioned table new ones for its
// partitions) and writes the pg_attribute row of each column it changes.
// A rewrite that keeps every value (VACUUM FULL, CLUSTER, TRUNCATE)
// gives new storage too, but writes no pg_attribute row. So the catalog
// reads that describe a table take, besides its columns, its storage
// (storageSQL, store.Relation.FileNode) and a stamp of its pg_attribute
// rows (stampSQL, store.Relation.ColumnsStamp), and a table whose storage
// and stamp both changed since its rows were last seen in the mirror was
// rewritten.

// storageSQL returns the SQL of the storage of the table whose pg_class
// row is class (an alias) as an int8: its relfilenode, or for a
// partitioned table a 32-bit digest of its leaf partitions' OIDs and file
// nodes (0 for none).
func storageSQL(class string) string {
	return `CASE WHEN ` + class + `.relkind = 'p' THEN coalesce((
		SELECT hashtext(string_agg(p.relid::oid::text || ':' || l.relfilenode::text, ',' ORDER BY p.relid::oid::int8))::int8 & 4294967295
		FROM pg_partition_tree(` + class + `.oid) p JOIN pg_class l ON l.oid = p.relid
		WHERE p.isleaf AND p.relid <> ` + class + `.oid), 0)
	ELSE ` + class + `.relfilenode::int8 END`
}

// stampSQL returns the SQL of the stamp of the columns of the table whose
// pg_class row is class (an alias): a 64-bit digest of the number and the
// xmin of each of its pg_attribute rows, dropped columns' too.
func stampSQL(class string) string {
	return columnsDigestSQL(class, "true")
}

// keyStampSQL returns the SQL of the stamp of the replica identity columns
// of the table whose pg_class row is class (an alias), as stampSQL's.
func keyStampSQL(class string) string {
	return columnsDigestSQL(class, "NOT sa.attisdropped AND "+replicaIdentitySQL(class, "sa"))
}

// replicaIdentitySQL returns the SQL that tells whether the live column
// attr (a pg_attribute alias) of the table whose pg_class row is class is
// in its replica identity: every column under REPLICA IDENTITY FULL.
func replicaIdentitySQL(class, attr string) string {
	return `CASE ` + class + `.relreplident
		WHEN 'f' THEN true
		WHEN 'd' THEN ` + attr + `.attnum = ANY (SELECT unnest(i.indkey) FROM pg_index i WHERE i.indrelid = ` + class + `.oid AND i.indisprimary)
		WHEN 'i' THEN ` + attr + `.attnum = ANY (SELECT unnest(i.indkey) FROM pg_index i WHERE i.indrelid = ` + class + `.oid AND i.indisreplident)
		ELSE false END`
}

// tableStateSQL returns the SQL of the three columns a tableState is read
// from (scanTableState), for the table whose pg_class row is class.
func tableStateSQL(class string) string {
	return storageSQL(class) + ", " + stampSQL(class) + ", " + keyStampSQL(class)
}

// columnsDigestSQL returns the SQL of a 64-bit digest of the number and the
// xmin of the pg_attribute rows of the table whose pg_class row is class
// for which the condition on sa holds (0 for none).
func columnsDigestSQL(class, condition string) string {
	return `coalesce((SELECT hashtextextended(string_agg(sa.attnum::text || ':' || sa.xmin::text, ',' ORDER BY sa.attnum), 0)
		FROM pg_attribute sa WHERE sa.attrelid = ` + class + `.oid AND sa.attnum > 0 AND ` + condition + `), 0)`
}

// tableState is a table's storage, columns stamp and key stamp, as the
// catalog gave them (see store.Relation.FileNode, ColumnsStamp and
// KeyStamp; zero when unknown).
type tableState struct {
	fileNode uint32
	stamp    int64
	keyStamp int64
}

// stateOf returns the storage and stamps schema version rel recorded.
func stateOf(rel *store.Relation) tableState {
	return tableState{fileNode: rel.FileNode, stamp: rel.ColumnsStamp, keyStamp: rel.KeyStamp}
}

// setOn records s in schema version rel.
func (s tableState) setOn(rel *store.Relation) {
	rel.FileNode, rel.ColumnsStamp, rel.KeyStamp = s.fileNode, s.stamp, s.keyStamp
}

// parseTableState reads the text of tableStateSQL's three columns.
func parseTableState(storage, stamp, keyStamp []byte) (tableState, error) {
	node, err := strconv.ParseUint(string(storage), 10, 32)
	if err != nil {
		return tableState{}, fmt.Errorf("storage: %w", err)
	}
	s := tableState{fileNode: uint32(node)}
	if s.stamp, err = strconv.ParseInt(string(stamp), 10, 64); err != nil {
		return tableState{}, fmt.Errorf("columns stamp: %w", err)
	}
	if s.keyStamp, err = strconv.ParseInt(string(keyStamp), 10, 64); err != nil {
		return tableState{}, fmt.Errorf("key stamp: %w", err)
	}
	return s, nil
}

// keysRewritten reports whether a rewrite of the table from was to rel
// (rewritten) may have changed the values of its replica identity's
// columns: their stamp changed, or is not known.
func keysRewritten(was tableState, rel *store.Relation) bool {
	return was.keyStamp == 0 || rel.KeyStamp == 0 || was.keyStamp != rel.KeyStamp
}

// rewritten reports whether rel, the table's schema version read from the
// catalog now, follows a rewrite that changed values since was, the
// storage and stamp the table had when its rows were last seen (see
// baseline) under prev, its newest schema version: the storage changed,
// and so did the stamp. When either stamp is unknown (a version recorded
// before stamps were kept), a column whose type changed or that was added
// stands for the stamp. A rename, or a rewrite that changes no value
// (VACUUM FULL, CLUSTER, TRUNCATE), is not a rewrite.
func rewritten(prev *store.Relation, was tableState, rel *store.Relation) bool {
	if prev == nil || prev.Key.OID != rel.Key.OID || was.fileNode == 0 || rel.FileNode == 0 || was.fileNode == rel.FileNode {
		return false
	}
	if was.stamp != 0 && rel.ColumnsStamp != 0 {
		return was.stamp != rel.ColumnsStamp
	}
	for _, c := range rel.Columns {
		i := slices.IndexFunc(prev.Columns, func(p store.Column) bool {
			return c.AttNum != 0 && p.AttNum == c.AttNum || c.AttNum == 0 && p.Name == c.Name
		})
		if i < 0 || prev.Columns[i].TypeOID != c.TypeOID || prev.Columns[i].TypeMod != c.TypeMod {
			return true
		}
	}
	return false
}

// baseline returns the storage and stamp the table of schema version prev
// had when its rows were last seen: what a TRUNCATE or a look of the
// watcher since the version was recorded noted, else the version's own.
func (st *stream) baseline(prev *store.Relation) tableState {
	if prev == nil {
		return tableState{}
	}
	if was, ok := st.noted[prev.Key.OID]; ok {
		return was
	}
	return stateOf(prev)
}

// notice notes the storage and stamp of rel, a schema version read from
// the catalog now with the shape of the table's newest, when they are
// known and differ from was, the baseline, with no rewrite (rewritten)
// between: the next versions are compared with them.
func (st *stream) notice(was tableState, rel *store.Relation) {
	if now := stateOf(rel); now.fileNode != 0 && now.stamp != 0 && now != was {
		st.noted[rel.Key.OID] = now
		st.s.log.Debug("a captured table has new storage that holds the values it had (VACUUM FULL, CLUSTER, TRUNCATE) or a column changed in place; nothing to copy",
			"table", rel.TableName())
	}
}

// noteTruncate notes the storage a TRUNCATE of the table of schema
// version rel gave it, so that a column added later (which changes the
// storage only with a volatile default) is not taken for a rewrite. The
// storage is read from the catalog once the transaction is visible, and
// noted only when the catalog's columns are still those of rel and no
// pg_attribute row changed (the stamp): the storage then holds no value a
// later schema change rewrote (a transaction in progress, streamed, shows
// its truncate to no one, and is not noted).
func (st *stream) noteTruncate(ctx context.Context, rel *store.Relation) error {
	oid := rel.Key.OID
	was := st.baseline(rel)
	delete(st.noted, oid)
	if committed, err := st.awaitCommitVisible(ctx); err != nil || !committed {
		return err
	}
	facts, err := st.columnFacts(ctx, oid)
	if err != nil {
		return err
	}
	if facts.describe(rel.Columns) && (was.stamp == 0 || facts.state.stamp == was.stamp) {
		st.noted[oid] = facts.state
	}
	return nil
}
