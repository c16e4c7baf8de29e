package source

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/store"
)

// TestBackfillOfAPartitionedTable adds a partitioned table to the
// configured tables while a writer inserts, updates and deletes its rows
// and moves rows from one partition to another: the copy pages the root by
// its key across the partitions, and the queue replays to the rows
// PostgreSQL has, under the root's name.
func TestBackfillOfAPartitionedTable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.captureA()

	h.exec(`CREATE TABLE pb (id int8 PRIMARY KEY, v int8 NOT NULL, note text) PARTITION BY RANGE (id)`,
		`CREATE TABLE pb_low PARTITION OF pb FOR VALUES FROM (MINVALUE) TO (3000)`,
		`CREATE TABLE pb_mid PARTITION OF pb FOR VALUES FROM (3000) TO (6000)`,
		`CREATE TABLE pb_high PARTITION OF pb FOR VALUES FROM (6000) TO (MAXVALUE)`,
		`INSERT INTO pb SELECT g, g, 'seed' FROM generate_series(1, 9000) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "pb"})
	h.cfg.BackfillChunkRows = 500
	next := int64(9001)
	txns, rels, done, _ := h.copyWhileWriting("public.pb", func(ctx context.Context, tx pgx.Tx) error {
		var err error
		switch r := rand.IntN(10); {
		case r < 3:
			_, err = tx.Exec(ctx, `INSERT INTO pb VALUES ($1, $1, 'new')`, next)
			next++
		case r < 6:
			_, err = tx.Exec(ctx, `UPDATE pb SET v = v + 1, note = 'changed' WHERE id = $1`, 1+rand.Int64N(next))
		case r < 8:
			// From one partition to another: a delete and an
			// insert in the stream.
			_, err = tx.Exec(ctx, `UPDATE pb SET id = $2, note = 'moved' WHERE id = $1`, 1+rand.Int64N(6000), next)
			next++
		default:
			_, err = tx.Exec(ctx, `DELETE FROM pb WHERE id = $1`, 1+rand.Int64N(next))
		}
		return err
	})
	rep, err := replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "public.pb replayed", replayedRows(rep, "public.pb"), h.rowsOf("pb"))
	for _, rel := range rels {
		if rel.Name != "a" && rel.Name != "pb" {
			t.Errorf("the queue holds a schema version of %s.%s: a partition is captured as its own table", rel.Schema, rel.Name)
		}
	}
	if done.Chunks < 18 {
		t.Errorf("the copy took %d chunks of 500 rows, want 18 or more for 9000 rows", done.Chunks)
	}
	t.Logf("%d rows copied in %d chunks", done.Rows, done.Chunks)
}

// TestBackfillOfAPartitionedTableWithoutKey copies a partitioned table
// with no key by ctid ranges, which select rows in every partition at
// once: partitions of unlike sizes, one empty, are each copied whole and
// once.
func TestBackfillOfAPartitionedTableWithoutKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.captureA()

	h.exec(`CREATE TABLE pbag (id int8, v int8, note text) PARTITION BY LIST ((id % 4))`,
		`CREATE TABLE pbag_0 PARTITION OF pbag FOR VALUES IN (0)`,
		`CREATE TABLE pbag_1 PARTITION OF pbag FOR VALUES IN (1)`,
		`CREATE TABLE pbag_2 PARTITION OF pbag FOR VALUES IN (2)`,
		`CREATE TABLE pbag_3 PARTITION OF pbag FOR VALUES IN (3)`)
	for _, p := range []string{"pbag", "pbag_0", "pbag_1", "pbag_2", "pbag_3"} {
		h.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, p))
	}
	// Partition 0 many pages, 1 a few rows, 2 none, 3 some pages; rows
	// repeat.
	h.exec(`INSERT INTO pbag SELECT (g % 700) * 4, g, 'dup' FROM generate_series(1, 6000) g`,
		`INSERT INTO pbag SELECT g * 4 + 1, g, 'few' FROM generate_series(1, 5) g`,
		`INSERT INTO pbag SELECT g * 4 + 3, g % 10, repeat('x', 200) FROM generate_series(1, 1500) g`)
	h.cfg.Tables = append(h.cfg.Tables, Table{"public", "pbag"})
	h.cfg.BackfillChunkRows = 1000
	txns, rels, done := h.copyAndStopStatus("public.pbag")
	got, _ := replayMultiset(t, txns, rels, "pbag")
	sameRows(t, "public.pbag replayed", got, h.rowsOf("pbag"))
	if done.Chunks < 2 {
		t.Errorf("the copy took %d chunk, want several", done.Chunks)
	}
	t.Logf("%d rows copied in %d chunks", done.Rows, done.Chunks)
}

// waitCopied waits until the source reports a copy of table for reason
// that began after since and is done.
func (h *harness) waitCopied(table, reason string, since time.Time) BackfillStatus {
	h.t.Helper()
	var got BackfillStatus
	h.waitFor(reason+" copy of "+table, func(*store.Reader) bool {
		for _, b := range h.src.Backfills() {
			if b.Table == table && b.Reason == reason && b.Done && b.Since.After(since) {
				got = b
				return true
			}
		}
		return false
	})
	return got
}

// TestPartitionChangesCopyTheTableAgain changes the partitions of a
// captured partitioned table, for which PostgreSQL sends no row change: a
// partition attached empty is left to the stream; one attached with rows
// has the table copied again over what is queued; one detached, and one
// dropped, have it truncated and copied again; and so do the same changes
// made while capture is stopped, at the next start. After each step the
// queue replays to the rows PostgreSQL's table has.
func TestPartitionChangesCopyTheTableAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text) PARTITION BY RANGE (id)`,
		`CREATE TABLE b_low PARTITION OF b FOR VALUES FROM (MINVALUE) TO (1000)`,
		`CREATE TABLE b_mid PARTITION OF b FOR VALUES FROM (1000) TO (2000)`,
		`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1, 1999) g`)
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	h.start()
	h.waitStreaming()
	check := func(step string) {
		t.Helper()
		h.waitCaughtUp()
		txns, rels := h.txns()
		rep, err := replayWith(txns, rels, true)
		if err != nil {
			t.Fatal(err)
		}
		sameRows(t, "public.b replayed "+step, replayedRows(rep, "public.b"), h.rowsOf("b"))
	}

	// Empty, then filled through the stream: no copy.
	h.exec(`CREATE TABLE b_empty PARTITION OF b FOR VALUES FROM (2000) TO (3000)`)
	h.waitFor("the empty partition noticed", func(*store.Reader) bool {
		return slices.ContainsFunc(h.src.Tables(), func(s TableStatus) bool { return s.Event == "partition attached empty" })
	})
	h.exec(`INSERT INTO b SELECT g, g, 'streamed' FROM generate_series(2000, 2099) g`)
	check("after an empty partition was attached and filled")
	for _, b := range h.src.Backfills() {
		if b.Reason == ReasonPartitionAttached {
			t.Fatalf("an empty partition attached had the table copied: %+v", b)
		}
	}

	since := time.Now()
	h.exec(`CREATE TABLE b_high (LIKE b INCLUDING ALL)`,
		`INSERT INTO b_high SELECT g, g, 'attached' FROM generate_series(3000, 3499) g`,
		`ALTER TABLE b ATTACH PARTITION b_high FOR VALUES FROM (3000) TO (MAXVALUE)`)
	h.waitCopied("public.b", ReasonPartitionAttached, since)
	check("after a partition with rows was attached")

	since = time.Now()
	h.exec(`ALTER TABLE b DETACH PARTITION b_mid`)
	h.waitCopied("public.b", ReasonPartitionDetached, since)
	check("after a partition was detached")

	since = time.Now()
	h.exec(`DROP TABLE b_low`)
	h.waitCopied("public.b", ReasonPartitionDetached, since)
	check("after a partition was dropped")

	// While capture is stopped: the state file's partitions tell.
	h.stop()
	whileStopped := func(step, reason string, sqls ...string) {
		t.Helper()
		h.exec(sqls...)
		since := time.Now()
		h.start()
		h.waitStreaming()
		h.waitCopied("public.b", reason, since)
		check(step + " while capture was stopped")
		h.stop()
	}
	whileStopped("after a partition was attached", ReasonPartitionAttached,
		`CREATE TABLE b_more (LIKE b INCLUDING ALL)`,
		`INSERT INTO b_more SELECT g, g, 'while stopped' FROM generate_series(1, 99) g`,
		`ALTER TABLE b ATTACH PARTITION b_more FOR VALUES FROM (MINVALUE) TO (100)`)
	whileStopped("after a partition was detached", ReasonPartitionDetached, `ALTER TABLE b DETACH PARTITION b_empty`)

	// Dropped and created again with other partitions: the state file
	// records the new table's partitions, and the dropped table's go.
	h.exec(`DROP TABLE b`,
		`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text) PARTITION BY RANGE (id)`,
		`CREATE TABLE b_all PARTITION OF b FOR VALUES FROM (MINVALUE) TO (MAXVALUE)`,
		`INSERT INTO b SELECT g, g, 'new table' FROM generate_series(1, 500) g`)
	since = time.Now()
	h.start()
	h.waitStreaming()
	h.waitCopied("public.b", ReasonRecreated, since)
	check("after the table was created again while capture was stopped")
	want := map[uint32][]uint32{h.oid("b"): {h.oid("b_all")}}
	h.waitFor(fmt.Sprintf("the partitions recorded to be %v", want), func(r *store.Reader) bool {
		got, err := r.Partitions()
		return err == nil && maps.EqualFunc(got, want, slices.Equal)
	})
	h.stop()
}

// TestPartitionAttachedDuringACopyStartsItOver attaches a partition with
// rows below the keys a running copy of the table has passed: the copy
// starts over from a truncate, and the queue replays to PostgreSQL's rows.
func TestPartitionAttachedDuringACopyStartsItOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TABLE b (id int8 PRIMARY KEY, v int8 NOT NULL, note text) PARTITION BY RANGE (id)`,
		`CREATE TABLE b_rest PARTITION OF b FOR VALUES FROM (1000) TO (MAXVALUE)`,
		`INSERT INTO b SELECT g, g, 'seed' FROM generate_series(1000, 5999) g`)
	h.cfg.Tables = []Table{{"public", "b"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	h.cfg.BackfillChunkRows = 100
	h.cfg.BackfillRowsPerSecond = 1000
	h.start()
	h.waitStreaming()
	since := time.Now()
	if err := h.src.Resync(context.Background(), "public.b", ReasonResync); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the resync under way", func(*store.Reader) bool {
		return slices.ContainsFunc(h.src.Backfills(), func(b BackfillStatus) bool { return b.Reason == ReasonResync && b.Rows > 0 })
	})
	h.exec(`CREATE TABLE b_low (LIKE b INCLUDING ALL)`,
		`INSERT INTO b_low SELECT g, g, 'attached' FROM generate_series(1, 999) g`,
		`ALTER TABLE b ATTACH PARTITION b_low FOR VALUES FROM (MINVALUE) TO (1000)`)
	h.waitCopied("public.b", ReasonPartitionAttached, since)
	h.waitCaughtUp()
	txns, rels := h.txns()
	h.stop()
	rep, err := replayWith(txns, rels, true)
	if err != nil {
		t.Fatal(err)
	}
	sameRows(t, "public.b replayed", replayedRows(rep, "public.b"), h.rowsOf("b"))
}
