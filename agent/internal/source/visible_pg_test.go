package source

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// addFillRename adds column c5 to items, fills it and renames it c4, in
// one transaction on conn, and returns the transaction's xid. hold, when
// set, runs inside the transaction after the fill.
func addFillRename(ctx context.Context, conn *pgx.Conn, fill string, hold func() error, settings ...string) (uint32, error) {
	var xid int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		stmts := append(settings, `ALTER TABLE items ADD COLUMN c5 int8`, fill)
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		if hold != nil {
			if err := hold(); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE items RENAME COLUMN c5 TO c4`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint % 4294967296").Scan(&xid)
	})
	return uint32(xid), err
}

// checkRenamedColumnKeptItsNumber checks that the schema version naming
// c5 and the one naming c4 (which the next change of items brings) give
// the column the same number, the catalog's.
func checkRenamedColumnKeptItsNumber(t *testing.T, h *harness) {
	t.Helper()
	h.waitXid(h.xid(`INSERT INTO items (id, v, c4) VALUES (-1, -1, -1)`))
	var want int
	if err := h.conn.QueryRow(context.Background(), `SELECT attnum FROM pg_attribute WHERE attrelid = 'items'::regclass AND attname = 'c4'`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	_, rels := h.txns()
	got := map[string]int{}
	for _, r := range rels {
		for _, c := range r.Columns {
			if c.Name == "c5" || c.Name == "c4" {
				got[c.Name] = c.AttNum
			}
		}
	}
	if got["c5"] != want || got["c4"] != want {
		t.Fatalf("column numbers in the schema versions = %v, want %d for both c5 and c4", got, want)
	}
}

// TestSchemaVersionWaitsForItsTransactionToBeVisible checks that a column
// added, filled and renamed in one transaction keeps its number in the
// version PostgreSQL describes it with inside the transaction, though the
// stream decodes the commit before other sessions see it. A synchronous
// standby that never answers holds the commit back until its wait is
// cancelled: within the source's wait, or after it, when the source
// reconnects and decodes the transaction again.
func TestSchemaVersionWaitsForItsTransactionToBeVisible(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		wait      time.Duration
		hold      time.Duration
		reconnect bool
	}{
		{"held back less than the wait", 0, 500 * time.Millisecond, false},
		{"held back longer than the wait", 200 * time.Millisecond, 1500 * time.Millisecond, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, map[string]string{"synchronous_standby_names": "nobody", "synchronous_commit": "local"})
			h.exec(itemsTable, `INSERT INTO items SELECT g, g, 'n' FROM generate_series(1, 10) g`)
			h.cfg.Tables = []Table{{"public", "items"}}
			h.visibleWait = c.wait
			h.start()
			h.waitStreaming()
			ctx := context.Background()
			walsender := func() (pid int) {
				h.waitSQL(`SELECT count(*) = 1 FROM pg_stat_replication`)
				if err := h.conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication`).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				return pid
			}
			before := walsender()
			ddl := pgtest.Conn(t, h.dsn)
			var pid int
			if err := ddl.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			type result struct {
				xid uint32
				err error
			}
			done := make(chan result, 1)
			go func() {
				xid, err := addFillRename(ctx, ddl, `UPDATE items SET c5 = id * 2`, nil, `SET LOCAL synchronous_commit = on`)
				done <- result{xid, err}
			}()

			// The commit is written, and waits for the standby.
			h.waitSQL(`SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = ` + fmt.Sprint(pid))
			var flushed string
			if err := h.conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&flushed); err != nil {
				t.Fatal(err)
			}
			// The walsender has sent it, and the source has had time to
			// decode it.
			h.waitSQL(`SELECT count(*) > 0 FROM pg_stat_replication WHERE sent_lsn >= '` + flushed + `'`)
			time.Sleep(c.hold)
			var invisible bool
			if err := h.conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'items'::regclass AND attname = 'c4')`).Scan(&invisible); err != nil || !invisible {
				t.Fatalf("the transaction is visible before its wait was cancelled (%v)", err)
			}
			h.exec(fmt.Sprintf(`SELECT pg_cancel_backend(%d)`, pid))
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			h.waitXid(r.xid)
			checkRenamedColumnKeptItsNumber(t, h)
			if after := walsender(); (after != before) != c.reconnect {
				t.Errorf("walsender %d before, %d after: reconnected = %v, want %v", before, after, after != before, c.reconnect)
			}
		})
	}
}

// TestStopEndsTheWaitForAVisibleCommit stops the source while it waits for
// a transaction a synchronous standby holds back to become visible: the
// wait ends with the stop, within seconds, not after its bound (a minute
// here), and the stop is clean.
func TestStopEndsTheWaitForAVisibleCommit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"synchronous_standby_names": "nobody", "synchronous_commit": "local"})
	h.exec(itemsTable, `INSERT INTO items SELECT g, g, 'n' FROM generate_series(1, 10) g`)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.visibleWait = time.Minute
	h.start()
	h.waitStreaming()
	ctx := context.Background()
	ddl := pgtest.Conn(t, h.dsn)
	var pid int
	if err := ddl.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := addFillRename(ctx, ddl, `UPDATE items SET c5 = id * 2`, nil, `SET LOCAL synchronous_commit = on`)
		done <- err
	}()
	t.Cleanup(func() {
		h.exec(fmt.Sprintf(`SELECT pg_cancel_backend(%d)`, pid))
		<-done
	})
	// The commit waits for the standby, and the source looks at the
	// snapshot for it to become visible.
	h.waitSQL(`SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = ` + fmt.Sprint(pid))
	h.waitSQL(`SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'SELECT pg_current_snapshot()%'`)
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := h.stop(); err != nil {
		t.Fatalf("stop while waiting for a visible commit: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("stop took %v while the source waited for a visible commit", took)
	}
}

// TestSchemaVersionOfAStreamedTransactionNumbersItsNewColumns checks the
// same of a transaction PostgreSQL streams while it runs: the catalog shows
// the column it added no one before it commits.
func TestSchemaVersionOfAStreamedTransactionNumbersItsNewColumns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]string{"logical_decoding_work_mem": "64kB"})
	h.exec(itemsTable, `INSERT INTO items SELECT g, g, 'n' FROM generate_series(1, 5000) g`,
		`ALTER TABLE items DROP COLUMN note`)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.LogicalDecodingWorkMem = 64 << 10
	h.start()
	h.waitStreaming()
	ctx := context.Background()
	conn := pgtest.Conn(t, h.dsn)
	xid, err := addFillRename(ctx, conn, `UPDATE items SET c5 = id * 2`, func() error {
		// The version naming c5 is recorded while the transaction runs.
		h.waitFor("a schema version naming c5", func(r *store.Reader) bool {
			rels, err := r.Relations()
			if err != nil {
				return false
			}
			for _, rel := range rels {
				for _, c := range rel.Columns {
					if c.Name == "c5" {
						return true
					}
				}
			}
			return false
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.waitXid(xid)
	checkRenamedColumnKeptItsNumber(t, h)
}

// waitSQL waits until query, which returns one boolean, returns true.
func (h *harness) waitSQL(query string) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		err := h.conn.QueryRow(context.Background(), query).Scan(&ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s (%v)", query, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
