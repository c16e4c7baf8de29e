package source

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// oid returns the OID of a table.
func (h *harness) oid(table string) uint32 {
	h.t.Helper()
	var oid uint32
	if err := h.conn.QueryRow(context.Background(), "SELECT $1::regclass::oid", table).Scan(&oid); err != nil {
		h.t.Fatal(err)
	}
	return oid
}

// identities reads the table identities of the running source.
func (h *harness) identities() []*store.TableIdentity {
	h.t.Helper()
	var ids []*store.TableIdentity
	if err := h.db.View(func(r *store.Reader) error {
		var err error
		ids, err = r.TableIdentities()
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return ids
}

// capturedAs checks that every queued change of the table oids refers to a
// schema version captured as table, and returns how many there are.
func (h *harness) capturedAs(table string, oids ...uint32) int {
	h.t.Helper()
	txns, rels := h.txns()
	n := 0
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if !slices.Contains(oids, c.Relation.OID) {
				continue
			}
			n++
			if got := rels[c.Relation].Table; got != table {
				h.t.Errorf("a change of table %d at %s is captured as %q, want %q", c.Relation.OID, txn.EndLSN, got, table)
			}
		}
	}
	return n
}

// TestRenamedTableKeepsItsIdentity renames a captured table while the
// source runs, or moves it to another schema: its changes go on into the
// same Delta tables (its schema versions keep the name it was first
// captured as), and the source starts again cleanly both with the old name
// in source.tables and with the new.
func TestRenamedTableKeepsItsIdentity(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, ddl string
		now       Table
	}{
		{"renamed", `ALTER TABLE items RENAME TO goods`, Table{"public", "goods"}},
		{"moved to another schema", `CREATE SCHEMA archive; ALTER TABLE items SET SCHEMA archive`, Table{"archive", "items"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := streamingItems(t)
			oid := h.oid("items")
			now := c.now.Quoted()
			h.xid(`INSERT INTO items VALUES (1, 1, 'a')`)
			h.exec(c.ddl)
			h.waitXid(h.xid(`INSERT INTO ` + now + ` VALUES (2, 2, 'b')`))
			if err := h.stop(); err != nil {
				t.Fatal(err)
			}

			// The old name: it is the renamed table.
			h.start()
			h.waitStreaming()
			h.waitXid(h.xid(`INSERT INTO ` + now + ` VALUES (3, 3, 'c')`))
			if err := h.stop(); err != nil {
				t.Fatal(err)
			}

			// The new name: it is the table captured as public.items.
			h.cfg.Tables = []Table{c.now}
			h.start()
			h.waitStreaming()
			h.waitXid(h.xid(`INSERT INTO ` + now + ` VALUES (4, 4, 'd')`))
			if n := h.capturedAs("public.items", oid); n != 4 {
				t.Errorf("%d changes of the table queued, want 4", n)
			}
			ids := h.identities()
			if len(ids) != 1 || ids[0].Table != "public.items" || len(ids[0].Generations) != 1 || ids[0].Current().OID != oid {
				t.Errorf("identities = %+v, want public.items of OID %d alone", ids, oid)
			}
			st := h.src.Tables()
			want := c.now.Schema + "." + c.now.Name
			if len(st) != 1 || st[0].Table != "public.items" || st[0].Configured != want || st[0].PostgresName != want {
				t.Errorf("Tables() = %+v", st)
			}
		})
	}
}

// backfillCall is one call of Config.Backfill.
type backfillCall struct {
	table  string
	oid    uint32
	reason string
}

// recordBackfills makes the harness's Config.Backfill send its calls.
func (h *harness) recordBackfills() <-chan backfillCall {
	calls := make(chan backfillCall, 16)
	h.cfg.Backfill = func(_ context.Context, table string, oid uint32, reason string) error {
		calls <- backfillCall{table, oid, reason}
		return nil
	}
	return calls
}

// waitBackfill waits for the next call of Config.Backfill.
func (h *harness) waitBackfill(calls <-chan backfillCall) backfillCall {
	h.t.Helper()
	select {
	case c := <-calls:
		return c
	case err := <-h.done:
		h.t.Fatalf("source stopped while waiting for a backfill: %v", err)
	case <-time.After(90 * time.Second):
		h.t.Fatal("no backfill asked for in 90s")
	}
	return backfillCall{}
}

// otherWorkload inserts into the table other from its own connection
// until stopped.
func otherWorkload(t *testing.T, dsn string) (stop func() int64) {
	conn := pgtest.Conn(t, dsn)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var n int64
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			n++
			if _, err = conn.Exec(context.Background(), `INSERT INTO other VALUES ($1, $1)`, n); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		if err != nil {
			t.Fatalf("other workload: %v", err)
		}
		return n
	}
}

// TestRecreatedTableIsTakenOver drops a captured table and creates it again
// while the source runs: the new table is captured as the next generation
// of the same table, after a truncate queued between the old table's last
// change and the new one's first; the backfill of the new table is asked
// for; and another table's changes flow throughout. With a publication FOR
// ALL TABLES, PostgreSQL describes the new table before capture takes it
// over (its first rows are the backfill's), and not again after.
func TestRecreatedTableIsTakenOver(t *testing.T) {
	t.Parallel()
	t.Run("agent's publication", func(t *testing.T) {
		t.Parallel()
		testRecreatedTableIsTakenOver(t, false)
	})
	t.Run("publication for all tables", func(t *testing.T) {
		t.Parallel()
		testRecreatedTableIsTakenOver(t, true)
	})
}

func testRecreatedTableIsTakenOver(t *testing.T, forAllTables bool) {
	h := newHarness(t)
	h.exec(itemsTable, `CREATE TABLE other (id int8 PRIMARY KEY, v int8)`, `INSERT INTO items VALUES (1, 1, 'a'), (2, 2, 'b')`)
	if forAllTables {
		h.exec(`CREATE PUBLICATION lakeside_test FOR ALL TABLES`)
	}
	h.cfg.Tables = []Table{{"public", "items"}, {"public", "other"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	calls := h.recordBackfills()
	h.start()
	h.waitStreaming()
	stopOther := otherWorkload(t, h.dsn)

	oldOID := h.oid("items")
	lastOld := h.xid(`UPDATE items SET v = 10 WHERE id = 1`)
	// The new table has rows before the watcher can see it, the second in
	// a transaction of its own: under FOR ALL TABLES, PostgreSQL describes
	// the new table for it (again, after the first transaction's
	// invalidations), and not before the next change once the table is
	// taken over.
	h.xid(`DROP TABLE items; ` + itemsTable + `; INSERT INTO items VALUES (5, 5, 'before it is captured')`)
	h.xid(`INSERT INTO items VALUES (6, 6, 'before it is captured')`)
	newOID := h.oid("items")
	call := h.waitBackfill(calls)
	if want := (backfillCall{"public.items", newOID, ReasonRecreated}); call != want {
		t.Fatalf("Backfill called with %+v, want %+v", call, want)
	}
	firstNew := h.xid(`INSERT INTO items VALUES (10, 10, 'new')`)
	h.waitXid(firstNew)
	n := stopOther()
	h.waitCaughtUp()

	txns, rels := h.txns()
	var oldAt, truncateAt, newAt int
	truncates := 0
	for i, txn := range txns {
		switch txn.Xid {
		case lastOld:
			oldAt = i
		case firstNew:
			newAt = i
			if len(txn.Changes) != 1 {
				t.Fatalf("the new table's insert queued with %d changes", len(txn.Changes))
			}
			if c := txn.Changes[0]; c.Relation.OID != newOID || rels[c.Relation].Table != "public.items" {
				t.Errorf("the new table's insert refers to %+v, captured as %q", c.Relation, rels[c.Relation].Table)
			}
		}
		for _, c := range txn.Changes {
			if c.Op == store.OpTruncate {
				truncates++
				truncateAt = i
				if c.Relation.OID != oldOID || rels[c.Relation].Table != "public.items" {
					t.Errorf("truncate of %+v, captured as %q; want the old table %d", c.Relation, rels[c.Relation].Table, oldOID)
				}
			}
		}
	}
	if truncates != 1 || !(oldAt < truncateAt && truncateAt < newAt) {
		t.Fatalf("%d truncates, at %d; the old table's last change at %d, the new one's first at %d", truncates, truncateAt, oldAt, newAt)
	}
	h.waitFor("the backfill recorded as asked for", func(r *store.Reader) bool {
		id, err := r.TableIdentity("public.items")
		return err == nil && id != nil && id.Current().Backfill == ""
	})
	id := h.identities()[0]
	want := []store.TableGeneration{{OID: oldOID, Generation: 1}, {OID: newOID, Generation: 2, Since: txns[truncateAt].EndLSN, BackfillRequest: 1}}
	if id.Table != "public.items" || !slices.Equal(id.Generations, want) {
		t.Errorf("identity %+v, want public.items with generations %+v", id, want)
	}
	st := h.src.Tables()
	if len(st) != 2 || st[0].Table != "public.items" || st[0].OID != newOID || st[0].Generation != 2 || !strings.HasPrefix(st[0].Event, "re-created") {
		t.Errorf("Tables() = %+v", st)
	}

	// The other table missed nothing.
	rep, err := replay(txns, rels)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(rep["public.other"]); int64(got) != n-1 && int64(got) != n {
		t.Fatalf("other: %d rows queued, %d inserted", got, n)
	}
	var rows int64
	if err := h.conn.QueryRow(context.Background(), `SELECT count(*) FROM other`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if int64(len(rep["public.other"])) != rows {
		t.Fatalf("other: %d rows queued, the table has %d", len(rep["public.other"]), rows)
	}

	// A restart asks for nothing again and captures the new table.
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items VALUES (11, 11, 'after restart')`))
	select {
	case c := <-calls:
		t.Fatalf("Backfill called again after a restart: %+v", c)
	default:
	}
}

// TestTableRecreatedWhileStoppedIsTakenOver drops and re-creates a captured
// table while the source is stopped: the next start is clean, the old
// table's last changes are queued, then the truncate and the new table's.
// A table dropped and not created again stops the start, naming it.
func TestTableRecreatedWhileStoppedIsTakenOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	calls := h.recordBackfills()
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, 'a')`))
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	oldOID := h.oid("items")
	lastOld := h.xid(`INSERT INTO items VALUES (2, 2, 'b')`)
	h.exec(`DROP TABLE items`)
	err := h.runUntilError()
	if !IsFatal(err) || !strings.Contains(err.Error(), "table public.items") || !strings.Contains(err.Error(), "no longer exists") {
		t.Fatalf("start with the table dropped: %v", err)
	}

	h.exec(itemsTable)
	newOID := h.oid("items")
	h.start()
	h.waitStreaming()
	if call := h.waitBackfill(calls); call != (backfillCall{"public.items", newOID, ReasonRecreated}) {
		t.Fatalf("Backfill called with %+v", call)
	}
	firstNew := h.xid(`INSERT INTO items VALUES (10, 10, 'new')`)
	h.waitXid(firstNew)
	txns, rels := h.txns()
	var ops []string
	for _, txn := range txns {
		for _, c := range txn.Changes {
			ops = append(ops, fmt.Sprintf("%c:%d", c.Op, c.Relation.OID))
			if rels[c.Relation].Table != "public.items" {
				t.Errorf("change %+v captured as %q", c, rels[c.Relation].Table)
			}
		}
		if txn.Xid == lastOld && len(ops) != 2 || txn.Xid == firstNew && len(ops) != 4 {
			t.Errorf("transaction %d comes after %v", txn.Xid, ops)
		}
	}
	want := []string{fmt.Sprintf("%c:%d", store.OpInsert, oldOID), fmt.Sprintf("%c:%d", store.OpInsert, oldOID),
		fmt.Sprintf("%c:%d", store.OpTruncate, oldOID), fmt.Sprintf("%c:%d", store.OpInsert, newOID)}
	if !slices.Equal(ops, want) {
		t.Fatalf("queued %v, want %v", ops, want)
	}
}

// TestSchemaChangeWithoutRowsIsRecorded adds a column with a default and
// changes no row after: a new schema version is recorded all the same,
// positioned after the DDL, and the next change refers to it.
func TestSchemaChangeWithoutRowsIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(itemsTable)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items VALUES (1, 1, 'a')`))

	var before string
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, h.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `ALTER TABLE items ADD COLUMN d int DEFAULT 7`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before)
	}); err != nil {
		t.Fatal(err)
	}
	ddl, err := pglogrepl.ParseLSN(before)
	if err != nil {
		t.Fatal(err)
	}
	var version *store.Relation
	h.waitFor("a schema version with column d", func(r *store.Reader) bool {
		rels, err := r.Relations()
		for _, rel := range rels {
			if err == nil && len(rel.Columns) == 4 && rel.Columns[3].Name == "d" {
				version = rel
				return true
			}
		}
		return false
	})
	if version.Key.LSN <= store.LSN(ddl) {
		t.Fatalf("the version with column d is at %s, not after the DDL (%s)", version.Key.LSN, before)
	}
	if version.Table != "public.items" || version.Columns[3].TypeOID != 23 {
		t.Fatalf("version %+v", version)
	}
	x := h.xid(`INSERT INTO items (id, v) VALUES (2, 2)`)
	h.waitXid(x)
	txns, rels := h.txns()
	last := txns[len(txns)-1]
	if last.Xid != x || last.Changes[0].Relation != version.Key || last.Changes[0].New[3].Int != 7 {
		t.Fatalf("the insert after the DDL refers to %+v with %+v; want version %+v", last.Changes[0].Relation, last.Changes[0].New, version.Key)
	}
	if len(rels) != 2 {
		t.Fatalf("%d schema versions, want 2", len(rels))
	}
}
