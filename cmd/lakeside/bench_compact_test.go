//go:build bench

package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
)

// TestBenchQuietInserts measures what a quiet insert-only table costs: one
// row inserted per flush, into a mirror of 10,000 rows, for 150 flushes
// (a 200 ms flush interval stands for 1 s), with delta.compaction off (the
// mirror rewrites its last file, which holds less than half of
// target_file_rows, on every flush) and on (each flush writes a new small
// file and compaction merges them, its bytes counted too): the bytes the
// commits of the mirror and the changelog add, and the bytes uploaded to a
// file:// replica, per inserted row.
func TestBenchQuietInserts(t *testing.T) {
	const rows, inserts = 10_000, 150
	fmt.Println()
	var perRow [2]float64
	for i, compaction := range []bool{false, true} {
		replicaDir := t.TempDir()
		cfg := fmt.Sprintf("delta:\n  flush_interval: 200ms\n  compaction: %v\n  compact_interval: 2s\n  compact_min_files: 16\n"+
			"replica:\n  url: file://%s\n  site: bench\n  poll_interval: 200ms\n", compaction, replicaDir)
		e := newE2EAlone(t, []string{"public.orders"}, cfg)
		d, uploadedBefore := e.startOrdersUploaded(rows)
		from := map[string]int64{"public.orders": e.latestVersion("public.orders"), "public.orders_changes": e.latestVersion("public.orders_changes")}
		for n := int64(rows + 1); n <= rows+inserts; n++ {
			v := e.latestVersion("public.orders")
			e.exec(fmt.Sprintf(`INSERT INTO orders SELECT g, md5(g::text), (g %% 1000000) / 100.0,
		timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', g %% 3 = 0, (g %% 1000)::int4 FROM generate_series(%d, %d) g`, n, n))
			for deadline := time.Now().Add(time.Minute); e.latestVersion("public.orders") == v; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the mirror did not commit in a minute; log:\n%s", d.stderr)
				}
			}
		}
		e.waitApplied(d)
		if compaction {
			time.Sleep(3 * time.Second) // the last pass of the schedule
		}
		e.waitRemote(d, "workload upload")
		var written int64
		var files int
		for name, v := range from {
			written += e.addedBytes(name, v)
			snap, err := e.localTable(name).Snapshot(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			files += snap.NumFiles()
		}
		uploaded := e.bytesUploaded() - uploadedBefore
		e.stop(d)
		perRow[i] = float64(written) / inserts
		fmt.Printf("BENCH quiet inserts, compaction %-3v: %.0f bytes written per inserted row (mirror and changelog), %.0f bytes uploaded per inserted row; %d files at the end\n",
			map[bool]string{false: "off", true: "on"}[compaction], perRow[i], float64(uploaded)/inserts, files)
	}
	fmt.Printf("  written per row, compaction on / off: %.3f\n", perRow[1]/perRow[0])
	fmt.Printf("  load %s\n", loadAvg())
}

// addedBytes returns the bytes of the files the commits of a table after
// version from add, compactions' too.
func (e *e2e) addedBytes(table string, from int64) int64 {
	e.t.Helper()
	ctx := e.t.Context()
	tbl := e.localTable(table)
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	for v := from + 1; v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, a := range acts {
			switch a := a.(type) {
			case *delta.Add:
				n += a.Size
			case *delta.AddCDC:
				n += a.Size
			}
		}
	}
	return n
}
