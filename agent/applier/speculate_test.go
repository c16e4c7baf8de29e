package applier

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/pgtest"
	"github.com/lakeside/lakeside/agent/source"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// TestApplyAhead checks that a large transaction is applied ahead while it
// is in progress, and that what was applied ahead joins its flush only when
// that is right, with the tables equal to PostgreSQL after each step:
//   - inserts in key order, applied ahead whole;
//   - inserts, an update, more inserts: the inserts before the update are
//     applied ahead, the rest at the commit;
//   - a transaction whose rows another one, committed and applied first,
//     no longer leaves above every key: dropped and read whole;
//   - a rolled back transaction: dropped, its files deleted;
//   - a subtransaction rolled back in the middle: applied ahead up to it.
//
// The changelog rows applied ahead carry the commit's values, in the
// directory of its date.
func TestApplyAhead(t *testing.T) {
	h := newHarnessWith(t, func(c *source.Config) { c.LogicalDecodingWorkMem = 64 << 10 },
		`CREATE TABLE big (id int8 PRIMARY KEY, v text)`, "big")
	a := h.applier(func(c *Config) { c.TargetFileRows = 1000 })
	ctx := context.Background()
	tx := pgtest.Conn(t, h.dsn)
	run := func(sqls ...string) {
		t.Helper()
		for _, sql := range sqls {
			if _, err := tx.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	insert := func(from, to int) string {
		return fmt.Sprintf(`INSERT INTO big SELECT g, 'row ' || g FROM generate_series(%d, %d) g`, from, to)
	}
	// ahead applies ahead until at least n changes are, or the applier
	// stopped applying ahead, and returns the count.
	ahead := func(n int64) int64 {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			a.speculate(ctx)
			if sp := a.spec; sp != nil && (sp.changes >= n || sp.stopped) {
				return sp.changes
			}
		}
		t.Fatalf("fewer than %d changes applied ahead", n)
		return 0
	}
	const dir = "public.big"
	check := func(what string, joined int64) {
		t.Helper()
		h.checkMirror("big")
		h.checkChangelog("big", nil)
		if a.joinedAhead != joined {
			t.Fatalf("%s: %d changes applied ahead joined, want %d", what, a.joinedAhead, joined)
		}
		for _, d := range []string{dir, dir + "_changes"} {
			if o := orphanFiles(t, filepath.Join(h.tablesDir, d)); len(o) > 0 {
				t.Fatalf("%s: data files no commit adds: %v", what, o)
			}
		}
	}

	// 1. Inserts in key order.
	run(`BEGIN`, insert(1, 5000))
	xid := txid(t, tx)
	n1 := ahead(4000)
	run(`COMMIT`)
	h.apply(a)
	check("inserts", n1)
	checkAheadRows(t, h, xid)

	// 2. Inserts, an update, inserts: applied ahead up to the update.
	run(`BEGIN`, insert(10001, 15000), `UPDATE big SET v = 'updated' WHERE id = 10003`, insert(15001, 20000))
	xid = txid(t, tx)
	n2 := ahead(1 << 30)
	if n2 == 0 || n2 > 5000 {
		t.Fatalf("%d changes applied ahead before the update, want up to 5000", n2)
	}
	run(`COMMIT`)
	h.apply(a)
	check("inserts, update, inserts", n1+n2)
	checkAheadRows(t, h, xid)

	// 3. A key above the transaction's is committed and applied first.
	run(`BEGIN`, insert(30001, 35000))
	if ahead(1000) == 0 {
		t.Fatal("nothing applied ahead")
	}
	h.exec(`INSERT INTO big VALUES (40000, 'above')`)
	waitQueued(t, a)
	if err := a.applyAll(ctx); err != nil {
		t.Fatal(err)
	}
	run(`COMMIT`)
	h.apply(a)
	check("overtaken", n1+n2)

	// 4. A rolled back transaction.
	run(`BEGIN`, insert(50001, 55000))
	if ahead(1000) == 0 {
		t.Fatal("nothing applied ahead")
	}
	run(`ROLLBACK`)
	for deadline := time.Now().Add(30 * time.Second); a.spec != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("what was applied ahead of a rolled back transaction stays")
		}
		a.speculate(ctx)
	}
	check("rolled back", n1+n2)

	// 5. A subtransaction rolled back in the middle.
	run(`BEGIN`, insert(60001, 65000), `SAVEPOINT s`, insert(70001, 75000), `ROLLBACK TO s`, insert(80001, 85000))
	n5 := ahead(1 << 30)
	if n5 == 0 || n5 > 5000 {
		t.Fatalf("%d changes applied ahead before the subtransaction, want up to 5000", n5)
	}
	run(`COMMIT`)
	h.apply(a)
	check("subtransaction", n1+n2+n5)
	t.Logf("applied ahead: %d, %d and %d changes", n1, n2, n5)
}

// txid returns the id of the transaction in progress on conn.
func txid(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	var x int64
	if err := conn.QueryRow(context.Background(), `SELECT txid_current() % 4294967296`).Scan(&x); err != nil {
		t.Fatal(err)
	}
	return x
}

// waitQueued waits until the queue holds a transaction the applier has not
// applied.
func waitQueued(t *testing.T, a *Applier) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if upTo, _, _, err := a.nextBatch(); err != nil || upTo != 0 {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("nothing queued")
}

// checkAheadRows checks that every changelog row of transaction xid has the
// transaction's end LSN, commit time and _seq, 1 to its size, once each,
// and is in the directory of its commit date.
func checkAheadRows(t *testing.T, h *harness, xid int64) {
	t.Helper()
	s := h.snapshot("public.big_changes")
	rows, err := s.ReadRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := s.Schema()
	_, lsnIdx := st.Field(colLSN)
	_, xidIdx := st.Field(colXid)
	_, tsIdx := st.Field(colCommitTS)
	_, seqIdx := st.Field(colSeq)
	_, dateIdx := st.Field(colCommitDate)
	var lsn int64
	var ts time.Time
	seqs := map[int64]bool{}
	for _, r := range rows {
		if r[xidIdx] != xid {
			continue
		}
		if lsn == 0 {
			lsn, ts = r[lsnIdx].(int64), r[tsIdx].(time.Time)
		}
		if r[lsnIdx] != lsn || !r[tsIdx].(time.Time).Equal(ts) {
			t.Fatalf("rows of transaction %d with _lsn %v and %v, _commit_ts %v and %v", xid, lsn, r[lsnIdx], ts, r[tsIdx])
		}
		if want := delta.DateFromDays(delta.DaysSinceEpoch(ts.UTC())); r[dateIdx] != want {
			t.Fatalf("row of transaction %d in partition %v, committed %v", xid, r[dateIdx], ts)
		}
		seqs[r[seqIdx].(int64)] = true
	}
	for i := int64(1); i <= int64(len(seqs)); i++ {
		if !seqs[i] {
			t.Fatalf("transaction %d: %d rows, no _seq %d", xid, len(seqs), i)
		}
	}
	var h1 store.TxnHeader
	h.db.View(func(r *store.Reader) error {
		return r.Txns(store.LSN(lsn-1), func(h *store.TxnHeader, _ *store.TxnCursor) error {
			h1 = *h
			return store.ErrStopScan
		})
	})
	if h1.EndLSN != 0 && (int64(h1.EndLSN) != lsn || !h1.CommitTime.Equal(ts)) {
		t.Fatalf("transaction %d: _lsn %d, _commit_ts %v; the queue says %s, %v", xid, lsn, ts, h1.EndLSN, h1.CommitTime)
	}
	if len(seqs) == 0 {
		t.Fatalf("no changelog rows of transaction %d", xid)
	}
	for _, f := range s.Files() {
		if date := f.PartitionValues[colCommitDate]; date == nil || !strings.HasPrefix(f.Path, colCommitDate+"="+*date+"/") {
			t.Fatalf("changelog file %s outside its partition's directory", f.Path)
		}
	}
}
