package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/store"
)

// capturedTable is a configured table as a session captures it.
type capturedTable struct {
	// configured is its entry in source.tables.
	configured Table
	// current is what PostgreSQL calls it now: configured, unless the
	// table was renamed; for a table re-created while the agent was
	// stopped, the new table (see resolveTables).
	current Table
	// oid is the PostgreSQL table captured.
	oid uint32
	// identity is the name its Delta tables go by
	// (store.TableIdentity.Table, store.Relation.Table).
	identity string
	// generation is the identity's generation captured.
	generation uint64
}

// TableStatus is what capture knows of a captured table.
type TableStatus struct {
	// Table is the name the table is captured as, its Delta tables'.
	Table string
	// Configured is its entry in source.tables.
	Configured string
	// PostgresName is what PostgreSQL calls it now, as capture last saw;
	// empty while no table of its OID exists.
	PostgresName string
	// OID and Generation are the PostgreSQL table captured and its
	// generation.
	OID        uint32
	Generation uint64
	// Event says what last happened to the table in PostgreSQL, if
	// anything (renamed, dropped, re-created), and when capture saw it.
	Event     string
	EventTime time.Time
}

// Tables returns what capture knows of the captured tables, by name.
func (s *Source) Tables() []TableStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TableStatus, 0, len(s.tables))
	for _, t := range s.tables {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b TableStatus) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// noteTable updates what Tables says of a table; fn changes its entry.
func (s *Source) noteTable(table string, fn func(t *TableStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tables == nil {
		s.tables = map[string]*TableStatus{}
	}
	t := s.tables[table]
	if t == nil {
		t = &TableStatus{Table: table}
		s.tables[table] = t
	}
	fn(t)
}

// loadIdentities reads the table identities. A state file written before
// they were kept has none: they are derived from the schema history and
// recorded first.
func (s *Source) loadIdentities(ctx context.Context) ([]*store.TableIdentity, error) {
	var ids []*store.TableIdentity
	var rels map[store.RelationKey]*store.Relation
	err := s.db.View(func(r *store.Reader) error {
		var err error
		if ids, err = r.TableIdentities(); err != nil || len(ids) > 0 {
			return err
		}
		rels, err = r.Relations()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read table identities: %w", err)
	}
	if len(ids) > 0 || len(rels) == 0 {
		return ids, nil
	}
	ids = store.DeriveTableIdentities(rels)
	if err := s.writer.send(writeOp{kind: opIdentities, identities: ids}); err != nil {
		return nil, err
	}
	if err := s.writer.sync(ctx); err != nil {
		return nil, err
	}
	for _, id := range ids {
		s.log.Info("recorded the identity of a captured table from its schema history", "table", id.Table,
			"oid", id.Current().OID, "generation", id.Current().Generation)
	}
	return ids, nil
}

// resolveTables finds the PostgreSQL table of each configured table. A
// table is its OID: the configured name finds a new table, or a table
// already captured (under this name or, renamed, under the one it had);
// a configured name that no longer finds the captured table's OID is
// still that table while the OID exists under another name. The returned
// identities are the new ones, to record before capture starts. A
// configured table that does not exist is returned with no OID, for
// preflight to report.
func (s *Source) resolveTables(ctx context.Context, conn *pgx.Conn, ids []*store.TableIdentity) (tables []*capturedTable, fresh []*store.TableIdentity, err error) {
	byName := map[string]*store.TableIdentity{}
	byOID := map[uint32]*store.TableIdentity{}
	for _, id := range ids {
		byName[id.Table] = id
		byOID[id.Current().OID] = id
	}
	claimed := map[string]Table{}
	for _, t := range s.cfg.Tables {
		nameOID, err := oidOf(ctx, conn, t)
		if err != nil {
			return nil, nil, err
		}
		c := &capturedTable{configured: t, current: t}
		switch id := byName[t.String()]; {
		case nameOID != 0 && byOID[nameOID] != nil:
			id := byOID[nameOID]
			c.oid, c.identity, c.generation = nameOID, id.Table, id.Current().Generation
			if id.Table != t.String() {
				s.log.Info("a configured table is a captured table under its new name; its changes go on into the Delta tables it has",
					"table", t.String(), "oid", nameOID, "delta_table", id.Table)
			}
		case id != nil:
			cur := id.Current().OID
			now, exists, err := nameOf(ctx, conn, cur)
			if err != nil {
				return nil, nil, err
			}
			switch {
			case exists:
				c.oid, c.current, c.identity, c.generation = cur, now, id.Table, id.Current().Generation
				s.log.Warn("a captured table has another name in PostgreSQL now; its Delta tables keep their name (update source.tables to the new name at leisure)",
					"table", t.String(), "oid", cur, "now", now.String(), "delta_table", id.Table)
				s.noted.Store(cur, true)
				if nameOID != 0 {
					s.log.Warn("the configured name of a renamed table names another table now, which is not captured",
						"table", t.String(), "oid", nameOID)
				}
			case nameOID != 0:
				// Dropped and created again while the agent was
				// stopped: the old table's changes come first, then
				// the catalog watcher takes the new one over.
				c.oid, c.identity, c.generation = cur, id.Table, id.Current().Generation
				s.log.Warn("a captured table was dropped and created again while the agent was stopped; its new table is captured as its next generation once capture reaches the present",
					"table", t.String(), "old_oid", cur, "oid", nameOID)
			default:
				return nil, nil, fatalf("table %s (OID %d) no longer exists in PostgreSQL, under that name or another: it was dropped. Create it again (it is then captured as the next generation of %s, into the same Delta tables), or remove it from source.tables",
					t, cur, id.Table)
			}
		case nameOID != 0:
			c.oid, c.identity, c.generation = nameOID, t.String(), 1
			fresh = append(fresh, &store.TableIdentity{Table: t.String(), Generations: []store.TableGeneration{{OID: nameOID, Generation: 1}}})
		}
		if c.identity != "" {
			if other, dup := claimed[c.identity]; dup {
				return nil, nil, fatalf("source.tables names %s and %s, which are the same table (OID %d, captured as %s); keep one of them", other, t, c.oid, c.identity)
			}
			claimed[c.identity] = t
			s.noteTable(c.identity, func(st *TableStatus) {
				st.Configured, st.PostgresName, st.OID, st.Generation = t.String(), c.current.String(), c.oid, c.generation
			})
		}
		tables = append(tables, c)
	}
	return tables, fresh, nil
}

// oidOf returns the OID of the table of a name, or 0 when there is none.
func oidOf(ctx context.Context, conn *pgx.Conn, t Table) (uint32, error) {
	var oid uint32
	err := conn.QueryRow(ctx, `SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up %s: %w", t, err)
	}
	return oid, nil
}

// nameOf returns what PostgreSQL calls the table of an OID; exists is
// false when there is none.
func nameOf(ctx context.Context, conn *pgx.Conn, oid uint32) (t Table, exists bool, err error) {
	return NameOf(ctx, conn, oid)
}

// NameOf returns what PostgreSQL calls the table oid now; exists is false
// when no table has that OID.
func NameOf(ctx context.Context, conn *pgx.Conn, oid uint32) (t Table, exists bool, err error) {
	err = conn.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = $1`, oid).Scan(&t.Schema, &t.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, false, nil
	}
	if err != nil {
		return Table{}, false, fmt.Errorf("look up table %d: %w", oid, err)
	}
	return t, true, nil
}

// currentNames returns the names PostgreSQL has now for the tables, for
// the checks and the publication.
func currentNames(tables []*capturedTable) []Table {
	out := make([]Table, len(tables))
	for i, c := range tables {
		out[i] = c.current
	}
	return out
}
