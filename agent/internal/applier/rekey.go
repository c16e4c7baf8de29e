package applier

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// rekey rewrites a mirror created as a multiset (by an earlier version,
// which keyed every REPLICA IDENTITY FULL table by all its columns) whose
// table has a key now: rel's (store.Relation.KeyColumns). Its rows are
// written again into files clustered by that key, and the table's
// configuration names the key, in one commit that keeps the mirror's txn
// version. Two rows of one key, which PostgreSQL cannot hold, are kept as
// one, with a warning; no other row is lost.
func (m *mirror) rekey(ctx context.Context, a *Applier, rel *store.Relation) error {
	keyNames := m.cols.mapping(rel).keyNames
	snap, err := m.t.SnapshotAt(ctx, m.version)
	if err != nil {
		return fmt.Errorf("rekey %s: %w", m.name, err)
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		return fmt.Errorf("rekey %s: %w", m.name, err)
	}
	old := m.files
	m.multiset, m.keyNames, m.files = false, keyNames, nil
	m.layout()
	m.begin(a)
	defer m.abort()
	seen := make(map[string]bool, len(rows))
	dups := 0
	for _, r := range rows {
		data := make([]any, len(m.cols.cols))
		for j, pos := range m.dataPos {
			if pos >= 0 && pos < len(r) {
				data[j] = r[pos]
			}
		}
		deleted := m.delIdx >= 0 && m.delIdx < len(r) && r[m.delIdx] == true
		k := m.key(data)
		if seen[k] {
			dups++
		}
		seen[k] = true
		if err := m.pend.add([]byte(k), &entry{row: data, deleted: deleted}); err != nil {
			return fmt.Errorf("rekey %s: %w", m.name, err)
		}
	}
	actions, _, err := m.merge(ctx, a)
	if err != nil {
		return fmt.Errorf("rekey %s: %w", m.name, err)
	}
	now := nowMillis(a.clock)
	for _, f := range old {
		actions = append(actions, delta.RemoveOf(f.add, now, true))
	}
	key, err := json.Marshal(keyNames)
	if err != nil {
		return fmt.Errorf("rekey %s: %w", m.name, err)
	}
	md := *m.meta
	md.Configuration = maps.Clone(md.Configuration)
	delete(md.Configuration, confMultiset)
	md.Configuration[confKey] = string(key)
	m.meta, m.schemaDirty = &md, true
	if err := a.commit(ctx, m.deltaTable, actions, commitInfo{operation: "REKEY", first: m.applied, last: m.applied}); err != nil {
		return err
	}
	m.files = m.nextFiles
	if dups > 0 {
		a.log.Warn("mirror had rows of one key more than once; one of each is kept", "table", m.name, "key", keyNames, "rows_dropped", dups)
	}
	a.log.Info("mirror keyed by the table's primary key now", "table", m.name, "key", keyNames, "rows", len(rows)-dups)
	return nil
}
