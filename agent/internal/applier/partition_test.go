package applier

import (
	"slices"
	"testing"
)

// TestPartitionedTable captures a partitioned table: its rows, copied by
// the snapshot and changed in every partition (a row moved across
// partitions too), land in one pair of Delta tables named after the root,
// and a partition attached later is captured through it. A partition
// detached is captured no more (the applier alone keeps its rows in the
// mirror: PostgreSQL publishes no row change for a detach, and the
// source's catalog watcher, not run here, has the table copied again), and
// a TRUNCATE of the table empties the mirror.
func TestPartitionedTable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, `
		CREATE TABLE meas (id int, at date, v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
		CREATE TABLE meas_p1 PARTITION OF meas FOR VALUES FROM ('2026-01-01') TO ('2026-07-01');
		CREATE TABLE meas_p2 PARTITION OF meas FOR VALUES FROM ('2026-07-01') TO ('2027-01-01');
		INSERT INTO meas SELECT g, DATE '2026-01-01' + g, g FROM generate_series(1, 300) g;`, "meas")
	a := h.applier()
	h.apply(a)
	h.checkMirror("meas")
	var viaRoot bool
	if err := h.conn.QueryRow(t.Context(), `SELECT pubviaroot FROM pg_publication WHERE pubname = 'lakeside_test'`).Scan(&viaRoot); err != nil || !viaRoot {
		t.Fatalf("publication created with publish_via_partition_root %v (%v)", viaRoot, err)
	}
	h.exec(`UPDATE meas SET v = v * 10 WHERE id % 5 = 0`,
		`DELETE FROM meas WHERE id % 7 = 0`,
		`UPDATE meas SET at = DATE '2026-12-01' WHERE id = 1`, // from meas_p1 to meas_p2
		`CREATE TABLE meas_p3 (LIKE meas INCLUDING ALL)`,
		`ALTER TABLE meas ATTACH PARTITION meas_p3 FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')`,
		`INSERT INTO meas SELECT 1000 + g, DATE '2027-01-01' + g, g FROM generate_series(1, 50) g`)
	h.apply(a)
	h.checkMirror("meas")
	h.checkChangelog("meas", nil)
	if n := h.src.Status().IgnoredChanges; n != 0 {
		t.Errorf("%d changes of the partitioned table were passed over", n)
	}

	if dirs, want := h.tableDirs(), []string{"public.meas", "public.meas_changes"}; !slices.Equal(dirs, want) {
		t.Errorf("tables directory holds %v, want %v", dirs, want)
	}

	h.exec(`CREATE TABLE detached AS SELECT * FROM meas_p3`,
		`ALTER TABLE meas DETACH PARTITION meas_p3`,
		`INSERT INTO meas_p3 VALUES (5000, '2027-06-01', 1)`,
		`INSERT INTO meas VALUES (6000, '2026-08-01', 2)`,
		`CREATE VIEW meas_expected AS SELECT * FROM meas UNION ALL SELECT * FROM detached`)
	h.apply(a)
	h.compare("mirror of meas after a detach", h.pgRows("meas_expected"), h.deltaRows(h.snapshot("public.meas"), "meas_expected"))
	h.exec(`TRUNCATE meas`)
	h.apply(a)
	h.checkMirror("meas")
}
