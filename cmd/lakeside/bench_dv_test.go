//go:build bench

package main

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/lakeside/lakeside/delta"
)

// TestBenchDeletionVectors measures what random updates cost a branch's
// disk and uplink under both mirror layouts, copy-on-write
// (delta.deletion_vectors: false) and deletion vectors: rounds of single-row
// updates of random rows, a transaction and a flush per round, on tables
// of narrow (about 100 B) and wide (about 5 kB) rows. A 1M-row table of
// wide rows (5 GB, rewritten by every copy-on-write round) is left out.
// It prints the bytes written to the local tables (mirror and changelog:
// data, deletion vector, log and checkpoint files) and uploaded to a
// file:// replica per changed row, and their ratio to the changed rows'
// own size (pg_column_size), then DuckDB's time to read the mirror, its
// deleted rows left out, before and after a compaction.
func TestBenchDeletionVectors(t *testing.T) {
	const rounds = 60
	cases := []dvBenchCase{
		{"10k rows of 100 B", 10_000, 100, 20},
		{"1M rows of 100 B", 1_000_000, 100, 20},
		{"1M rows of 100 B, 200 a flush", 1_000_000, 100, 200},
		{"10k rows of 5 kB", 10_000, 5000, 20},
		{"100k rows of 5 kB", 100_000, 5000, 20},
	}
	fmt.Println()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { benchDeletionVectors(t, c, rounds) })
	}
	fmt.Printf("  %d rounds of random single-row updates, a transaction each; load %s\n", rounds, loadAvg())
}

// dvBenchCase is a table of TestBenchDeletionVectors: rows rows of about
// width bytes, perRound of them updated a round.
type dvBenchCase struct {
	name     string
	rows     int64
	width    int
	perRound int
}

// benchDeletionVectors runs the workload of TestBenchDeletionVectors on
// the table of c under both layouts.
func benchDeletionVectors(t *testing.T, c dvBenchCase, rounds int) {
	perRound := c.perRound
	var written [2]float64
	for i, dv := range []bool{false, true} {
		replicaDir := t.TempDir()
		cfg := fmt.Sprintf("delta:\n  flush_interval: 200ms\n  compaction: false\n  deletion_vectors: %v\n"+
			"replica:\n  url: file://%s\n  site: bench\n  poll_interval: 200ms\n", dv, replicaDir)
		e := newE2EWith(t, []string{"public.wide"}, cfg)
		// The pad is random hex: Parquet cannot compress it below
		// half its size, as it would a repeated string.
		e.exec(`CREATE TABLE wide (id int8 PRIMARY KEY, n int4, pad text)`,
			`ALTER TABLE wide ALTER pad SET STORAGE EXTERNAL`,
			fmt.Sprintf(`INSERT INTO wide SELECT g, 0, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, %d) i)
				FROM generate_series(1, %d) g`, max(1, (c.width-30)/32), c.rows))
		d := e.start()
		waitState(t, e, d, "streaming")
		e.waitApplied(d)
		e.waitRemote(d, "initial upload")
		diskBefore, uploadedBefore := tablesBytes(t, e), e.bytesUploaded()

		rng := rand.New(rand.NewPCG(5, 6))
		var rowBytes int64
		n := rounds
		if !dv && c.rows*int64(c.width) > 50e6 {
			// Each copy-on-write round rewrites the table: a few tell
			// its cost without filling the disk.
			n = 5
		}
		for range n {
			v := e.latestVersion("public.wide")
			ids := make([]int64, perRound)
			for j := range ids {
				ids[j] = rng.Int64N(c.rows) + 1
			}
			tx, err := e.conn.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				var size int64
				if err := tx.QueryRow(context.Background(), `UPDATE wide SET n = n + 1 WHERE id = $1 RETURNING pg_column_size(wide.*)`, id).Scan(&size); err != nil {
					t.Fatal(err)
				}
				rowBytes += size
			}
			if err := tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(5 * time.Minute); e.latestVersion("public.wide") == v; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the mirror did not commit in 5 minutes; log:\n%s", d.stderr)
				}
			}
		}
		e.waitApplied(d)
		e.waitRemote(d, "workload upload")
		changed := float64(n * perRound)
		diskAfter := tablesBytes(t, e)
		disk := float64(diskAfter[""] - diskBefore[""])
		uploaded := float64(e.bytesUploaded() - uploadedBefore)
		rowSize := float64(rowBytes) / changed
		written[i] = disk / changed
		e.stop(d)
		readBefore := duckDBReadMirror(t, filepath.Join(e.stateDir, "tables", "public.wide"), c.rows)
		if _, stderr, code := e.lakeside("compact", "--config", e.configPath); code != 0 {
			t.Fatalf("lakeside compact: exit %d\n%s", code, stderr)
		}
		readAfter := duckDBReadMirror(t, filepath.Join(e.stateDir, "tables", "public.wide"), c.rows)
		layout := map[bool]string{false: "copy-on-write", true: "deletion vectors"}[dv]
		fmt.Printf("BENCH random updates, %s, %-16s: %.0f bytes written and %.0f uploaded per changed row of %.0f B (%.1fx and %.1fx its size); DuckDB reads the mirror in %s, %s after compaction\n",
			c.name, layout, written[i], uploaded/changed, rowSize, written[i]/rowSize, uploaded/changed/rowSize,
			readBefore.Round(time.Millisecond), readAfter.Round(time.Millisecond))
		var parts []string
		for _, k := range fileKinds {
			if b := diskAfter[k] - diskBefore[k]; b != 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, float64(b)/float64(n)))
			}
		}
		fmt.Printf("  bytes written a flush, by kind: %s\n", strings.Join(parts, ", "))
	}
	fmt.Printf("  %s: written per changed row, deletion vectors / copy-on-write: %.3f\n", c.name, written[1]/written[0])
}

// tablesBytes returns the bytes of every file under the agent's tables
// directory but its spill files, by kind (fileKind).
func tablesBytes(t *testing.T, e *e2e) map[string]int64 {
	t.Helper()
	n := map[string]int64{}
	root := filepath.Join(e.stateDir, "tables")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".spill" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			n[fileKind(rel)] += info.Size()
			n[""] += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fileKinds are the kinds fileKind tells apart, in the order the bench
// prints them.
var fileKinds = []string{"mirror data", "changelog data", "deletion vectors", "commits", "checkpoints", "other"}

// fileKind says what the file at rel, relative to the tables directory,
// is: a data file of a mirror or a changelog, a deletion vector file, a
// commit or a checkpoint.
func fileKind(rel string) string {
	table, name := strings.SplitN(filepath.ToSlash(rel), "/", 2)[0], filepath.Base(rel)
	switch {
	case strings.HasSuffix(name, ".json") && strings.Contains(rel, "_delta_log"):
		return "commits"
	case strings.Contains(name, ".checkpoint."):
		return "checkpoints"
	case strings.HasPrefix(name, "deletion_vector_"):
		return "deletion vectors"
	case strings.HasSuffix(name, ".parquet") && strings.HasSuffix(table, "_changes"):
		return "changelog data"
	case strings.HasSuffix(name, ".parquet"):
		return "mirror data"
	}
	return "other"
}

// duckDBReadMirror reads the latest version of the mirror at path with
// DuckDB, as a reader of deletion vectors does: read_parquet over its data
// files, less the rows (file_row_number) their deletion vectors delete,
// summing the length of every pad (by its physical name), and returns how
// long the query took. It fails unless it counts rows rows.
func duckDBReadMirror(t *testing.T, path string, rows int64) time.Duration {
	t.Helper()
	ctx := context.Background()
	tbl, err := delta.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE deleted (filename VARCHAR, row BIGINT)`); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, add := range snap.Files() {
		p, err := delta.ResolvePath(path, add.Path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, "'"+strings.ReplaceAll(p, "'", "''")+"'")
		if add.DeletionVector == nil {
			continue
		}
		dv, err := delta.ReadDeletionVector(path, add.DeletionVector)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dv.Rows() {
			if _, err := db.Exec(`INSERT INTO deleted VALUES (?, ?)`, p, int64(r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	started := time.Now()
	pad, _ := snap.Schema().Field("pad")
	if pad == nil {
		t.Fatal("the mirror has no column pad")
	}
	var n, sum int64
	q := fmt.Sprintf(`SELECT count(*), sum(length(p."%s")) FROM read_parquet([%s], filename = true, file_row_number = true) p
		ANTI JOIN deleted d ON p.filename = d.filename AND p.file_row_number = d.row`, pad.PhysicalName(), strings.Join(files, ", "))
	if err := db.QueryRow(q).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	took := time.Since(started)
	if n != rows {
		t.Fatalf("DuckDB counts %d rows in the mirror, want %d", n, rows)
	}
	return took
}
