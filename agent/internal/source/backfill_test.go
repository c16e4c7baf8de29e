package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/internal/pgtest"
	"github.com/lakeside/lakeside/store"
)

// waitBackfilled waits until the source reports the copy of table done.
func (h *harness) waitBackfilled(table string) BackfillStatus {
	h.t.Helper()
	var got BackfillStatus
	h.waitFor("backfill of "+table, func(*store.Reader) bool {
		for _, b := range h.src.Backfills() {
			if b.Table == table && b.Done {
				got = b
				return true
			}
		}
		return false
	})
	return got
}

// rowsOf returns a table's rows as "id|v|note" strings, sorted.
func (h *harness) rowsOf(table string) []string {
	h.t.Helper()
	rows, err := h.conn.Query(context.Background(), `SELECT id, v, coalesce(note, '') FROM `+pgx.Identifier{table}.Sanitize())
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	var id, v int64
	var note string
	if _, err := pgx.ForEachRow(rows, []any{&id, &v, &note}, func() error {
		out = append(out, fmt.Sprintf("%d|%d|%s", id, v, note))
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// replayedRows returns the rows of a table of (id, v, note) that the queue
// replays to, as rowsOf gives them.
func replayedRows(rep replica, table string) []string {
	var out []string
	for _, r := range rep[table] {
		out = append(out, fmt.Sprintf("%d|%d|%s", r[0].Int, r[1].Int, r[2].Bytes))
	}
	slices.Sort(out)
	return out
}

// checkReplayed fails the test unless the queue replays public.b to the
// rows PostgreSQL has (lenient: see replayWith).
func (h *harness) checkReplayed(txns []*store.Txn, rels map[store.RelationKey]*store.Relation, lenient bool) {
	h.t.Helper()
	rep, err := replayWith(txns, rels, lenient)
	if err != nil {
		h.t.Fatal(err)
	}
	sameRows(h.t, "public.b replayed", replayedRows(rep, "public.b"), h.rowsOf("b"))
}

// sameRows fails the test when two sorted row lists differ.
func sameRows(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	var diff []string
	for _, r := range want {
		if _, ok := slices.BinarySearch(got, r); !ok && len(diff) < 5 {
			diff = append(diff, "missing "+r)
		}
	}
	for _, r := range got {
		if _, ok := slices.BinarySearch(want, r); !ok && len(diff) < 10 {
			diff = append(diff, "extra "+r)
		}
	}
	t.Fatalf("%s: %d rows, PostgreSQL has %d: %s", what, len(got), len(want), strings.Join(diff, "; "))
}

// addTableB captures table a (id, v, note) from a first start, then
// creates table b of the same columns with rows ids 1 to rows (v = id,
// note 'seed') and adds it to the configured tables, to be copied by a
// backfill at the next start.
func (h *harness) addTableB(rows int) {
	h.t.Helper()
	h.captureA()
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1, %d) g`, rows))
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "b"})
}

// captureA creates table a (id, v, note), runs sqls, and captures it from
// a first start: a table configured after that is copied by a backfill.
func (h *harness) captureA(sqls ...string) {
	h.t.Helper()
	h.exec(append([]string{`CREATE TABLE a (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`}, sqls...)...)
	h.cfg.Tables = []Table{{"public", "a"}}
	h.start()
	h.waitStreaming()
	h.stop()
}

// copyWhileWriting starts the source and, on a connection of its own,
// runs txn in one transaction after another until table is copied; then
// it waits until the stream has caught up, stops the source, and returns
// what it queued, the copy's status and how many of txn committed.
func (h *harness) copyWhileWriting(table string, txn func(ctx context.Context, tx pgx.Tx) error) ([]*store.Txn, map[store.RelationKey]*store.Relation, BackfillStatus, int) {
	h.t.Helper()
	conn := pgtest.Conn(h.t, h.dsn)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var committed int
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return txn(ctx, tx) }); err != nil {
				return
			}
			committed++
		}
	}()
	h.start()
	h.waitStreaming()
	done := h.waitBackfilled(table)
	close(stop)
	wg.Wait()
	if err != nil {
		h.t.Fatalf("writer: %v", err)
	}
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	return txns, rels, done, committed
}

// copyAndStop starts the source, waits until table is copied and the
// stream has caught up, stops it, and returns what it queued.
func (h *harness) copyAndStop(table string) ([]*store.Txn, map[store.RelationKey]*store.Relation) {
	h.t.Helper()
	txns, rels, _ := h.copyAndStopStatus(table)
	return txns, rels
}

// copyAndStopStatus is copyAndStop, which also returns the copy's status.
func (h *harness) copyAndStopStatus(table string) ([]*store.Txn, map[store.RelationKey]*store.Relation, BackfillStatus) {
	h.t.Helper()
	h.start()
	h.waitStreaming()
	done := h.waitBackfilled(table)
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	return txns, rels, done
}

// TestBackfillOfATableAddedLater adds a table with rows to the configured
// tables after the first start, while a writer keeps inserting, updating
// and deleting its rows and updating another table's: the copy is queued
// as snapshot rows in chunks, the other table's changes are queued between
// the chunks, and the queue replays to both tables as PostgreSQL has them.
func TestBackfillOfATableAddedLater(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		fresh, separate bool
	}{{"tricks on", false, false}, {"fresh chunk memory", true, false}, {"separate chunk query", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testBackfillOfATableAddedLater(t, c.fresh, c.separate)
		})
	}
}

// testBackfillOfATableAddedLater is TestBackfillOfATableAddedLater with
// the chunk memory trick on or off (Config.Off.ChunkMemory), and the
// chunk query trick (Config.Off.ChunkQuery). A note is NULL in some
// rows, so that a chunk decoded into the memory of one before it reads
// NULLs where that chunk held values.
func testBackfillOfATableAddedLater(t *testing.T, fresh, separate bool) {
	h := newHarness(t)
	h.captureA(`INSERT INTO a SELECT g, 0, 'a' FROM generate_series(1, 100) g`)
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		`INSERT INTO b SELECT g, g, CASE WHEN g % 7 = 0 THEN NULL ELSE 'seed' END FROM generate_series(1, 30000) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "b"})
	h.cfg.BackfillChunkRows = 1000
	h.cfg.Off.ChunkMemory = fresh
	h.cfg.Off.ChunkQuery = separate
	next := int64(30001)
	txns, rels, done, committed := h.copyWhileWriting("public.b", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE a SET v = v + 1 WHERE id = $1`, 1+rand.Int64N(100)); err != nil {
			return err
		}
		for range 1 + rand.IntN(5) {
			var err error
			switch r := rand.IntN(10); {
			case r < 3:
				_, err = tx.Exec(ctx, `INSERT INTO b VALUES ($1, $1, 'new')`, next)
				next++
			case r < 8:
				_, err = tx.Exec(ctx, `UPDATE b SET v = v + 1, note = 'changed' WHERE id = $1`, 1+rand.Int64N(next))
			default:
				_, err = tx.Exec(ctx, `DELETE FROM b WHERE id = $1`, 1+rand.Int64N(next))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})

	rep, err := replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "public.b replayed", replayedRows(rep, "public.b"), h.rowsOf("b"))
	sameRows(t, "public.a replayed", replayedRows(rep, "public.a"), h.rowsOf("a"))

	// The copy came in chunks with other transactions between them.
	var first, last store.LSN
	var copied, chunks int
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if c.Op == store.OpSnapshot && rels[c.Relation].Name == "b" {
				if first == 0 {
					first = txn.EndLSN
				}
				last = txn.EndLSN
				copied++
			}
		}
		if last == txn.EndLSN {
			chunks++
		}
	}
	between := 0
	for _, txn := range txns {
		if txn.EndLSN > first && txn.EndLSN < last && slices.ContainsFunc(txn.Changes, func(c store.Change) bool { return rels[c.Relation].Name == "a" }) {
			between++
		}
	}
	if chunks < 30 || between == 0 {
		t.Fatalf("the copy is %d rows in %d transactions with %d transactions of table a between the first and last; want 30 chunks or more, and a's changes between them",
			copied, chunks, between)
	}
	if done.Rows != int64(copied) || done.Reason != ReasonAdded {
		t.Errorf("status says %d rows copied (reason %q), the queue holds %d", done.Rows, done.Reason, copied)
	}
	t.Logf("%d rows copied in %d chunks, %d writer transactions, %d of table a between the first and last chunk", copied, chunks, committed, between)
}

// TestBackfillChunkLeavesRowsChangedInItsWindow updates one row and deletes
// another after a chunk's copy was read, before its high watermark: the
// chunk leaves both out, and the rows end as the stream has them.
func TestBackfillChunkLeavesRowsChangedInItsWindow(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	h.addTableB(10)
	conn := pgtest.Conn(t, h.dsn)
	var once sync.Once
	h.failpoint = func(point string) error {
		if point == "backfill-copied" {
			once.Do(func() {
				for _, sql := range []string{`UPDATE b SET v = -3, note = 'stream' WHERE id = 3`, `DELETE FROM b WHERE id = 5`} {
					if _, err := conn.Exec(context.Background(), sql); err != nil {
						t.Error(err)
					}
				}
			})
		}
		return nil
	}
	txns, rels := h.copyAndStop("public.b")
	var copied []int64
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if c.Op == store.OpSnapshot {
				copied = append(copied, c.New[0].Int)
			}
		}
	}
	slices.Sort(copied)
	if want := []int64{1, 2, 4, 6, 7, 8, 9, 10}; !slices.Equal(copied, want) {
		t.Fatalf("the chunk holds ids %v, want %v: rows changed in its window are the stream's", copied, want)
	}
	h.checkReplayed(txns, rels, true)
}

// TestResyncTruncatesAndCopiesAgain resyncs a captured table: the queue
// holds a truncate of it (or more, see below), then its rows copied, and
// replays to the table.
func TestResyncTruncatesAndCopiesAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1, 5000) g`)
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.BackfillChunkRows = 700
	h.start()
	h.waitStreaming()
	h.exec(`UPDATE b SET note = 'before' WHERE id % 10 = 0`)
	h.waitCaughtUp()
	txns, _ := h.txns()
	before := len(txns)
	if err := h.src.Resync(context.Background(), "public.a", ReasonResync); err == nil {
		t.Fatal("a resync of a table not configured succeeded")
	}
	if err := h.src.Resync(context.Background(), "public.b", ReasonResync); err != nil {
		t.Fatal(err)
	}
	h.exec(`UPDATE b SET note = 'during' WHERE id % 7 = 0`, `DELETE FROM b WHERE id % 11 = 0`)
	done := h.waitBackfilled("public.b")
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	truncates, copied := 0, 0
	for _, txn := range txns[before:] {
		for _, c := range txn.Changes {
			switch c.Op {
			case store.OpTruncate:
				if copied > 0 {
					t.Fatal("the truncate comes after copied rows")
				}
				truncates++
			case store.OpSnapshot:
				copied++
			}
		}
	}
	if truncates != 1 || copied == 0 || int64(copied) != done.Rows || done.Reason != ReasonResync {
		t.Fatalf("after the resync the queue holds %d truncates and %d copied rows; status %+v", truncates, copied, done)
	}
	h.checkReplayed(txns, rels, true)
}

// TestBackfillWithoutKeyStartsOverWhenTheTableChanges copies a table
// without a primary key or replica identity index by ctid ranges; an
// insert while it is copied makes the copy start over, after a truncate,
// so that no row is counted twice.
func TestBackfillWithoutKeyStartsOverWhenTheTableChanges(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	h.captureA()

	h.exec(`CREATE TABLE bag (id int8, v int8, note text)`, `ALTER TABLE bag REPLICA IDENTITY FULL`,
		`INSERT INTO bag SELECT g % 500, g % 500, 'dup' FROM generate_series(1, 3000) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "bag"})
	h.cfg.BackfillChunkRows = 600 // 2 pages a chunk
	conn := pgtest.Conn(t, h.dsn)
	calls := 0
	h.failpoint = func(point string) error {
		if point == "backfill-copied" {
			if calls++; calls == 2 {
				if _, err := conn.Exec(context.Background(), `INSERT INTO bag VALUES (1, 1, 'dup')`); err != nil {
					t.Error(err)
				}
			}
		}
		return nil
	}
	h.start()
	h.waitStreaming()
	h.waitBackfilled("public.bag")
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	got, truncates := replayMultiset(t, txns, rels, "bag")
	if truncates < 2 {
		t.Fatalf("the copy started %d times, want it to start over after the insert", truncates)
	}
	sameRows(t, "public.bag replayed", got, h.rowsOf("bag"))
}

// TestBackfillWithoutKeyThatKeepsChangingSaysSo changes a table without a
// key while each of its first copies runs: the copy starts over each time,
// counts it in Backfills, and says at ERROR, once, that it cannot finish
// while the table keeps changing and how it could. Once the writes stop it
// finishes, and the queue replays to PostgreSQL's rows: each new start
// truncates again, so that no row inserted meanwhile is both queued and
// copied.
func TestBackfillWithoutKeyThatKeepsChangingSaysSo(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	h.captureA()
	log := &messageCounter{counts: map[string]int{}}
	h.cfg.Logger = slog.New(log)

	h.exec(`CREATE TABLE bag (id int8, v int8, note text)`, `ALTER TABLE bag REPLICA IDENTITY FULL`,
		`INSERT INTO bag SELECT g % 50, g % 50, 'dup' FROM generate_series(1, 300) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "bag"})
	conn := pgtest.Conn(t, h.dsn)
	const changed = backfill.RestartsToReport + 1
	calls := 0
	h.failpoint = func(point string) error {
		if point == "backfill-copied" {
			if calls++; calls <= changed {
				if _, err := conn.Exec(context.Background(), `INSERT INTO bag VALUES (1, 1, 'dup')`); err != nil {
					t.Error(err)
				}
			}
		}
		return nil
	}
	h.start()
	h.waitStreaming()
	st := h.waitBackfilled("public.bag")
	if st.Restarts != changed {
		t.Errorf("the copy started over %d times by its status, want %d", st.Restarts, changed)
	}
	if n := log.count("backfill starts over"); n != changed {
		t.Errorf("the log says %d times that the copy starts over, want %d", n, changed)
	}
	if n := log.count("a table without a key cannot be copied while transactions keep changing it"); n != 1 {
		t.Errorf("the log says %d times that the copy cannot finish, want once", n)
	}
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	got, _ := replayMultiset(t, txns, rels, "bag")
	sameRows(t, "public.bag replayed", got, h.rowsOf("bag"))
}

// replayMultiset replays the queued truncates, inserts and snapshot rows
// of a table of (id, v, note) without a key, name, as a multiset of rows
// as rowsOf gives them, and counts the truncates; any other change fails
// the test.
func replayMultiset(t *testing.T, txns []*store.Txn, rels map[store.RelationKey]*store.Relation, name string) (rows []string, truncates int) {
	t.Helper()
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if rels[c.Relation].Name != name {
				continue
			}
			switch c.Op {
			case store.OpTruncate:
				rows = nil
				truncates++
			case store.OpInsert, store.OpSnapshot:
				rows = append(rows, fmt.Sprintf("%d|%d|%s", c.New[0].Int, c.New[1].Int, c.New[2].Bytes))
			default:
				t.Fatalf("%s: unexpected %s", name, c.Op)
			}
		}
	}
	slices.Sort(rows)
	return rows, truncates
}

// TestBackfillResumesAfterTheLastChunkQueued stops the source when a chunk
// is copied and before it is handed over; the next start goes on after
// the last chunk queued, and every row is copied once.
func TestBackfillResumesAfterTheLastChunkQueued(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	h.addTableB(5000)
	h.cfg.BackfillChunkRows = 400
	stopped := make(chan struct{})
	calls := 0
	h.failpoint = func(point string) error {
		if point == "backfill-copied" {
			if calls++; calls >= 4 {
				// From the fourth chunk on, every copy fails
				// before it is handed over, until the stop.
				if calls == 4 {
					close(stopped)
				}
				return errors.New("simulated crash")
			}
		}
		return nil
	}
	h.start()
	h.waitStreaming()
	<-stopped
	// The two chunks before the stop are queued (durable a moment after
	// they were handed over), and the third too if the stream took its
	// high watermark before the fourth's copy failed: the watermark is
	// written with the fourth's copy, and a third not taken by then is
	// copied again after the restart.
	h.waitFor("2 or 3 chunks queued", func(r *store.Reader) bool {
		queued := 0
		txns, err := r.ReadTxns(0, 0)
		for _, txn := range txns {
			for _, c := range txn.Changes {
				if c.Op == store.OpSnapshot {
					queued++
				}
			}
		}
		return err == nil && (queued == 800 || queued == 1200)
	})
	h.stop()
	h.failpoint = nil
	txns, rels, done := h.copyAndStopStatus("public.b")
	perKey := map[int64]int{}
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if c.Op == store.OpSnapshot {
				perKey[c.New[0].Int]++
			}
		}
	}
	for id := int64(1); id <= 5000; id++ {
		if perKey[id] != 1 {
			t.Fatalf("row %d copied %d times", id, perKey[id])
		}
	}
	if done.Rows != 5000 || done.Chunks != 13 {
		t.Errorf("status %+v, want 5000 rows in 13 chunks", done)
	}
	h.checkReplayed(txns, rels, false)
}

// TestOlderStateCountsTheSnapshotsTablesAsCopied starts on a state file
// as versions before backfills wrote it (no backfill records, no mark that
// copies are recorded), with a table added since: the table the initial
// snapshot copied counts as copied, and only the added one is copied.
func TestOlderStateCountsTheSnapshotsTablesAsCopied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TABLE a (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		`INSERT INTO a SELECT g, g, 'a' FROM generate_series(1, 50) g`)
	h.cfg.Tables = []Table{{"public", "a"}}
	h.start()
	h.waitStreaming()
	h.stop()
	// What an older version leaves: no record of the copies.
	db, err := bolt.Open(filepath.Join(h.stateDir, store.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("backfill")); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Delete([]byte("copies_recorded"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		`INSERT INTO b SELECT g, g, 'b' FROM generate_series(1, 50) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "b"})
	h.start()
	h.waitStreaming()
	h.waitBackfilled("public.b")
	var recs map[uint32]*store.Backfill
	if err := h.db.View(func(r *store.Reader) (err error) { recs, err = r.Backfills(); return err }); err != nil {
		t.Fatal(err)
	}
	h.stop()
	var got []string
	for _, b := range recs {
		got = append(got, fmt.Sprintf("%s %s %v", b.Table, b.Reason, b.Done))
	}
	slices.Sort(got)
	if want := []string{"public.a initial snapshot true", "public.b added true"}; !slices.Equal(got, want) {
		t.Fatalf("backfills recorded %q, want %q", got, want)
	}
}

// TestRecreatedTableIsTruncatedAndCopied drops a captured table and
// creates it again with other rows, twice: once while the source runs,
// followed by a resync, which starts a new session to capture the table's
// new OID, and once while the source is stopped, which the next start
// finds by itself. Each time the queue replays to the new table's rows.
func TestRecreatedTableIsTruncatedAndCopied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	create := func(from int) {
		h.exec(`DROP TABLE IF EXISTS b`, `CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
			fmt.Sprintf(`INSERT INTO b SELECT g, g, 'gen %d' FROM generate_series(%d, %d) g`, from, from, from+999))
	}
	create(1)
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.BackfillChunkRows = 300
	h.start()
	h.waitStreaming()
	create(5000)
	if err := h.src.Resync(context.Background(), "public.b", ReasonRecreated); err != nil {
		t.Fatal(err)
	}
	h.exec(`UPDATE b SET note = 'after' WHERE id % 3 = 0`)
	if st := h.waitBackfilled("public.b"); st.Reason != ReasonRecreated {
		t.Fatalf("status %+v", st)
	}
	h.waitCaughtUp()
	txns, rels := h.txns()
	rep, err := replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "public.b replayed after a resync", replayedRows(rep, "public.b"), h.rowsOf("b"))
	h.stop()

	create(9000)
	h.start()
	h.waitStreaming()
	if st := h.waitBackfilled("public.b"); st.Reason != ReasonRecreated {
		t.Fatalf("status after a restart %+v", st)
	}
	h.waitCaughtUp()
	txns, rels = h.txns()
	h.stop()
	rep, err = replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "public.b replayed after a restart", replayedRows(rep, "public.b"), h.rowsOf("b"))
}

// TestBackfillReadsTheColumnsChangedWhileItCopies adds, drops or renames
// a column of a table while it is copied: the ALTER TABLE waits for the
// second chunk's transaction (it is waiting before that one commits) and
// is done before the third chunk's COPY, so the chunks from the fourth on
// copy the new columns (a chunk whose COPY names a column no longer there
// fails, and is copied again), and the queue replays to the table as
// PostgreSQL has it. Both ways of sending a chunk's query
// (Config.Off.ChunkQuery).
func TestBackfillReadsTheColumnsChangedWhileItCopies(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	for _, c := range []struct {
		name, alter string
		// copied says whether a row copied after the change has the
		// new columns.
		copied func(rel *store.Relation, vals []store.Value) bool
	}{
		{"add", `ALTER TABLE b ADD COLUMN extra int8 NOT NULL DEFAULT 7`, func(rel *store.Relation, vals []store.Value) bool {
			return len(rel.Columns) == 4 && vals[3].Int == 7
		}},
		{"drop", `ALTER TABLE b DROP COLUMN note`, func(rel *store.Relation, _ []store.Value) bool {
			return len(rel.Columns) == 2
		}},
		{"rename", `ALTER TABLE b RENAME COLUMN note TO remark`, func(rel *store.Relation, _ []store.Value) bool {
			return len(rel.Columns) == 3 && rel.Columns[2].Name == "remark"
		}},
	} {
		for _, separate := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/separate chunk query=%v", c.name, separate), func(t *testing.T) {
				t.Parallel()
				testBackfillReadsTheColumnsChangedWhileItCopies(t, c.alter, c.copied, separate)
			})
		}
	}
}

func testBackfillReadsTheColumnsChangedWhileItCopies(t *testing.T, alter string, copied func(*store.Relation, []store.Value) bool, separate bool) {
	h := newHarness(t)
	h.addTableB(5000)
	h.cfg.BackfillChunkRows = 1000
	h.cfg.Off.ChunkQuery = separate
	conn, probe := pgtest.Conn(t, h.dsn), pgtest.Conn(t, h.dsn)
	calls := 0
	altered := make(chan struct{})
	h.failpoint = func(point string) error {
		if point == "backfill-copied" {
			switch calls++; calls {
			case 2:
				go func() {
					defer close(altered)
					if _, err := conn.Exec(context.Background(), alter); err != nil {
						t.Error(err)
					}
				}()
				// Queued for the table's lock ahead of the next
				// chunk's COPY.
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					var waiting int
					if err := probe.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
						WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'ALTER TABLE b %'`).Scan(&waiting); err != nil {
						t.Error(err)
						break
					}
					if waiting > 0 || time.Now().After(deadline) {
						break
					}
				}
			case 4:
				<-altered
			}
		}
		return nil
	}
	txns, rels := h.copyAndStop("public.b")
	for _, txn := range txns {
		for _, c := range txn.Changes {
			if c.Op != store.OpSnapshot || rels[c.Relation].Name != "b" {
				continue
			}
			rel, id := rels[c.Relation], c.New[0].Int
			switch {
			case id > 3000 && !copied(rel, c.New):
				t.Fatalf("row %d was copied after the change with columns %v (%v)", id, rel.Columns, c.New)
			case id <= 2000 && len(rel.Columns) != 3:
				t.Fatalf("row %d was copied before the change with %d columns", id, len(rel.Columns))
			}
		}
	}
	// The columns every version has, id and v.
	rep, err := replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rep["public.b"] {
		got = append(got, fmt.Sprintf("%d|%d", r[0].Int, r[1].Int))
	}
	rows, err := h.conn.Query(context.Background(), `SELECT id || '|' || v FROM b`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	sameRows(t, "public.b replayed (id, v)", got, want)
}

// TestResyncTruncatesOnceWhenItsFirstChunkIsCopiedAgain makes the first
// chunk of a resync be copied again (a transaction of more keys than the
// stream tracks commits inside its window): the truncate queued at its
// first low watermark stands for the copy, and none is queued again.
func TestResyncTruncatesOnceWhenItsFirstChunkIsCopiedAgain(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	rows := maxTrackedKeys + 4000
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text)`,
		fmt.Sprintf(`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1, %d) g`, rows))
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.BackfillChunkRows = 8000
	h.start()
	h.waitStreaming()
	h.waitCaughtUp()
	txns, _ := h.txns()
	before := len(txns)
	h.stop()

	conn := pgtest.Conn(t, h.dsn)
	copies := 0
	h.failpoint = func(point string) error {
		if point != "backfill-copied" {
			return nil
		}
		if copies++; copies == 1 {
			if _, err := conn.Exec(context.Background(), `UPDATE b SET v = v + 1`); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	h.start()
	h.waitStreaming()
	if err := h.src.Resync(context.Background(), "public.b", ReasonResync); err != nil {
		t.Fatal(err)
	}
	done := h.waitBackfilled("public.b")
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	if int64(copies) <= done.Chunks {
		t.Fatalf("%d chunks copied for %d queued: the first chunk was not copied again", copies, done.Chunks)
	}
	truncates := 0
	for _, txn := range txns[before:] {
		for _, c := range txn.Changes {
			if c.Op == store.OpTruncate {
				truncates++
			}
		}
	}
	if truncates != 1 {
		t.Fatalf("the resync queued %d truncates, want 1", truncates)
	}
	h.checkReplayed(txns, rels, true)
}

// TestBackfillStartsOverWhenTheKeyChanges stops a resync after its first
// chunks and replaces the table's primary key meanwhile: the last key
// recorded is a value of the old key, so the copy starts over by the new
// one, after a truncate, rather than page the new key from it (the new
// key's order is the old one's reversed: every row would be passed over).
func TestBackfillStartsOverWhenTheKeyChanges(t *testing.T) {
	t.Parallel()
	requireFailpoints(t)
	h := newHarness(t)
	const rows = 20000
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO b SELECT g, g, lpad((100000 - g)::text, 6, '0') FROM generate_series(1, %d) g`, rows))
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.BackfillChunkRows = 2000
	h.start()
	h.waitStreaming()
	h.waitCaughtUp()
	h.stop()

	copies := 0
	held := make(chan struct{})
	h.failpoint = func(point string) error {
		if point != "backfill-copied" {
			return nil
		}
		if copies++; copies == 3 {
			close(held)
		}
		if copies >= 3 {
			return errors.New("held for the test")
		}
		return nil
	}
	h.start()
	h.waitStreaming()
	if err := h.src.Resync(context.Background(), "public.b", ReasonResync); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("the resync did not copy three chunks in a minute")
	}
	// Held from the third chunk on: what the first ones queued is
	// recorded (the stream writes it after the backfiller moved on).
	var rec *store.Backfill
	h.waitFor("the first chunks recorded", func(r *store.Reader) bool {
		recs, err := r.Backfills()
		for _, b := range recs {
			if b.Table == "public.b" {
				rec = b
			}
		}
		return err == nil && rec != nil && rec.After != nil
	})
	h.stop()
	if rec.Done || !slices.Equal(rec.Key, []string{"id"}) {
		t.Fatalf("the resync's record after its first chunks: %+v", rec)
	}

	h.exec(`ALTER TABLE b DROP CONSTRAINT b_pkey, ADD PRIMARY KEY (note)`, `UPDATE b SET v = v + 1 WHERE id % 100 = 0`)
	h.failpoint = nil
	txns, rels, done := h.copyAndStopStatus("public.b")
	if done.Rows != rows {
		t.Fatalf("the copy queued %d rows, the table holds %d", done.Rows, rows)
	}
	h.checkReplayed(txns, rels, true)
}
