package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/internal/s3test"
)

// compactTargetSize and compactMinFiles are the compaction settings of the
// accelerated runs: delta.target_file_size and delta.compact_min_files.
const (
	compactTargetSize = 1 << 20
	compactMinFiles   = 8
)

// versionRows reads every row of a table version, each printed, sorted.
func versionRows(t *testing.T, tbl *delta.Table, v int64) []string {
	t.Helper()
	ctx := context.Background()
	snap, err := tbl.SnapshotAt(ctx, v)
	if err != nil {
		t.Fatalf("%s version %d: %v", tbl.Path(), v, err)
	}
	rows, err := snap.ReadRows(ctx)
	if err != nil {
		t.Fatalf("%s version %d does not read: %v", tbl.Path(), v, err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r)
	}
	slices.Sort(out)
	return out
}

// checkOptimizeVersions checks every OPTIMIZE version of tbl: its adds and
// removes have dataChange false, it has no cdc action, and it reads the
// rows of the version before it (the files it adds hold the rows of those
// it removes, in the same partitions). It returns those versions.
func checkOptimizeVersions(t *testing.T, tbl *delta.Table) []int64 {
	t.Helper()
	return deltatest.OptimizeVersions(t, tbl, func(v int64, acts []delta.Action) { checkSameFileRows(t, tbl, v, acts) })
}

// smallFileBound is the bound of docs/compaction.md on the small files a
// changelog partition holds after a compaction pass: fewer than
// compact_min_files that bins could take, and the files no bin takes,
// each more than twice the next smaller one.
func smallFileBound(smallest int64) int {
	return compactMinFiles - 1 + int(math.Floor(math.Log2(float64(compactTargetSize)/2/float64(max(smallest, 1))))) + 1
}

// checkSmallFiles checks the bound on the small files of a table's latest
// version: the bins a plan makes take fewer than compact_min_files files,
// and each changelog partition holds at most smallFileBound of them. It returns the files and the small ones.
func checkSmallFiles(t *testing.T, tbl *delta.Table, targetRows int64) (files, small int) {
	t.Helper()
	snap, err := tbl.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	opts := delta.OptimizeOptions{TargetFileSize: compactTargetSize}
	mirror := !strings.HasSuffix(tbl.Path(), "_changes")
	if mirror {
		opts.MaxFileRows = targetRows
	}
	plan, err := snap.PlanOptimize(opts)
	if err != nil {
		t.Fatal(err)
	}
	if plan.BinFiles() >= compactMinFiles {
		t.Errorf("%s: %d small files could still be merged after a compaction pass, want fewer than %d", tbl.Path(), plan.BinFiles(), compactMinFiles)
	}
	groups := map[string][]int64{}
	for _, f := range snap.Files() {
		if !mirror && opts.IsSmall(f) {
			k := fmt.Sprint(f.PartitionValues)
			groups[k] = append(groups[k], f.Size)
		}
	}
	for k, sizes := range groups {
		if bound := smallFileBound(slices.Min(sizes)); len(sizes) > bound {
			t.Errorf("%s: %d small files in %s, over the bound of %d", tbl.Path(), len(sizes), k, bound)
		}
	}
	return plan.Files, plan.SmallFiles
}

// TestCompactionBoundsSmallFiles runs the real agent, with compaction and
// the change data feed on, through some hundreds of flushes of a few
// changes each (a 50 ms flush interval in place of 1 s) and a compaction
// schedule of a second, replicating to a real S3 server: once the last
// pass ran, the small files are within the bound of docs/compaction.md,
// every OPTIMIZE version reads the rows of the version before it and
// writes no change data, the mirror equals PostgreSQL row by row, and the
// replica reads completely at its latest versions in the middle of the run
// and at every version sampled at the end (each OPTIMIZE one and the one
// before it among them), and equals PostgreSQL too.
func TestCompactionBoundsSmallFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3 := s3test.Start(t)
	bucket := s3.NewBucket()
	const targetRows = 400
	e := newE2EWith(t, []string{"public.stock"}, fmt.Sprintf(`delta:
  flush_interval: 50ms
  change_data_feed: true
  target_file_rows: %d
  compaction: true
  target_file_size: %d
  compact_interval: 1s
  compact_min_files: %d
  compact_bytes_per_second: 0
`, targetRows, compactTargetSize, compactMinFiles)+replicaSection(s3, bucket, "  poll_interval: 200ms\n  max_backoff: 1s\n"))
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL, note text)`,
		`INSERT INTO stock SELECT g, 0, repeat('n', 50) FROM generate_series(1, 1000) g`)
	d := e.start()
	e.waitApplied(d)
	rounds := 200
	if testing.Short() {
		rounds = 80
	}
	next := int64(1000)
	for i := range rounds {
		next++
		e.exec(fmt.Sprintf(`BEGIN; INSERT INTO stock VALUES (%d, %d, 'new'); UPDATE stock SET qty = qty + 1 WHERE id = %d; COMMIT`,
			next, i, 1+rand.Int64N(next)))
		if i%9 == 0 {
			e.exec(fmt.Sprintf(`DELETE FROM stock WHERE id = %d`, 1+rand.Int64N(next)))
		}
		if i == rounds/2 {
			// While the agent flushes and compacts, the replica's
			// latest versions read completely.
			checkRemoteReads(t, s3, bucket)
		}
		time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	}
	e.waitApplied(d)
	time.Sleep(2500 * time.Millisecond) // a pass of the schedule after the last flush
	e.waitRemote(d, "upload")
	e.stop(d)

	var optimizes int
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		tbl := e.localTable(name)
		latest, err := tbl.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		files, small := checkSmallFiles(t, tbl, targetRows)
		vs := checkOptimizeVersions(t, tbl)
		optimizes += len(vs)
		t.Logf("%s: %d versions, %d OPTIMIZE; %d files, %d small", name, latest+1, len(vs), files, small)
		if len(vs) == 0 {
			t.Errorf("%s: no compaction in %d versions", name, latest+1)
		}
	}
	e.compareMirror(t, "public.stock", `SELECT id, qty, note FROM stock`, "id", "qty", "note")

	// The replica: every OPTIMIZE version, the one before it and every
	// tenth version read completely, and the same rows as locally.
	remote := &e2e{t: t, conn: e.conn, stateDir: t.TempDir()}
	if err := s3.Download(ctx, bucket, "lake/branch1/", filepath.Join(remote.stateDir, "tables")); err != nil {
		t.Fatal(err)
	}
	remote.compareMirror(t, "public.stock", `SELECT id, qty, note FROM stock`, "id", "qty", "note")
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		local, rtbl := e.localTable(name), remote.localTable(name)
		latest, err := local.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		vs := checkOptimizeVersions(t, rtbl)
		sample := map[int64]bool{latest: true}
		for _, v := range vs {
			sample[v], sample[v-1] = true, true
		}
		for v := int64(0); v <= latest; v += 10 {
			sample[v] = true
		}
		for v := range sample {
			if got, want := versionRows(t, rtbl, v), versionRows(t, local, v); !slices.Equal(got, want) {
				t.Errorf("replica %s version %d reads %d rows, locally %d, or other rows", name, v, len(got), len(want))
			}
		}
	}
	if optimizes == 0 {
		t.Fatal("no compaction ran")
	}
}

// TestKillDuringCompaction kills the real agent with SIGKILL again and
// again while it compacts slowly (a low delta.compact_bytes_per_second)
// under the crash workload, then lets it drain: the changelogs hold every
// committed change once, the mirrors equal PostgreSQL, every OPTIMIZE
// version reads the rows of the version before it, and the files of the
// compactions killed before their commit are orphans no version names,
// which vacuum deletes once past the retention.
func TestKillDuringCompaction(t *testing.T) {
	t.Parallel()
	e := newE2EWith(t, []string{"public.counter", "public.events", "public.balances"}, fmt.Sprintf(`delta:
  flush_interval: 100ms
  target_file_rows: 20000
  compaction: true
  target_file_size: %d
  compact_interval: 300ms
  compact_min_files: 4
  compact_bytes_per_second: 256KiB
`, compactTargetSize))
	e.exec(crashSchema)
	stop := make(chan struct{})
	// The workload pauses while the agent is down, and between its
	// transactions: capture that falls behind PostgreSQL by more than a
	// megabyte holds its flushes back (up to a minute), and so the
	// compactions, and on a loaded machine every run would grow the
	// backlog of the next.
	var gate sync.RWMutex
	wait := gatedCrashWorkload(t, e.dsn, 1, 20*time.Millisecond, stop, &gate)
	kills, during := 0, 0
	var lastLog string
	// Six kills, and up to two more until one came during a compaction.
	for kills < 6 || during == 0 && kills < 8 {
		d := e.start()
		if kills > 0 {
			gate.Unlock()
		}
		// Run for 1 to 3 s, then kill soon after a compaction is seen
		// under way, or after 20 s (90 s for the last two, longer than
		// flushes are held back).
		time.Sleep(time.Second + time.Duration(rand.IntN(2000))*time.Millisecond)
		wait := 20 * time.Second
		if kills >= 6 {
			wait = 90 * time.Second
		}
		for deadline := time.Now().Add(wait); time.Now().Before(deadline) && !compacting(d.log()); {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
		gate.Lock()
		e.sigkill(d, kills)
		kills++
		log := d.log()
		lastLog = log
		if compacting(log) {
			during++
		}
	}
	d := e.start()
	gate.Unlock()
	time.Sleep(time.Second)
	close(stop)
	if err := wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	e.waitApplied(d)
	e.stop(d)
	if during == 0 {
		t.Fatalf("none of %d kills came during a compaction; the last run's log:\n%s", kills, lastLog)
	}
	e.checkCrashTables(t, kills)
	var optimizes, orphans int
	for _, name := range e.tableDirs() {
		tbl := e.localTable(name)
		optimizes += len(checkOptimizeVersions(t, tbl))
		orphans += len(unreferencedFiles(t, tbl))
	}
	t.Logf("%d kills, %d during a compaction; %d OPTIMIZE versions; %d orphan data files left for vacuum", kills, during, optimizes, orphans)
}

// compacting reports whether an agent's log shows a compaction under way:
// a pass that began and has not ended.
func compacting(log string) bool {
	i := strings.LastIndex(log, "msg=compacting")
	return i >= 0 && !strings.Contains(log[i:], "msg=compaction ")
}

// checkRemoteReads downloads the replica as it is and reads the latest
// version of each table there completely.
func checkRemoteReads(t *testing.T, s3 *s3test.Server, bucket string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	if err := s3.Download(ctx, bucket, "lake/branch1/", dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		tbl, err := delta.Open(ctx, filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("replica %s: %v", name, err)
		}
		latest, err := tbl.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		versionRows(t, tbl, latest)
	}
}

// unreferencedFiles returns the data files of a table that no version
// names: what a commit that never happened left.
func unreferencedFiles(t *testing.T, tbl *delta.Table) []string {
	t.Helper()
	ctx := context.Background()
	latest, err := tbl.LatestVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for v := int64(0); v <= latest; v++ {
		acts, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range acts {
			switch a := a.(type) {
			case *delta.Add:
				named[a.Path] = true
			case *delta.AddCDC:
				named[a.Path] = true
			}
		}
	}
	files, _ := dataFiles(t, tbl.Path())
	var out []string
	for _, f := range files {
		if !named[f] {
			out = append(out, f)
		}
	}
	return out
}

// checkSameFileRows checks that the files an OPTIMIZE version v adds hold
// exactly the rows of the files it removes, in the same partitions, so
// that v reads the rows of v-1.
func checkSameFileRows(t *testing.T, tbl *delta.Table, v int64, acts []delta.Action) {
	t.Helper()
	ctx := context.Background()
	prev, err := tbl.SnapshotAt(ctx, v-1)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*delta.Add{}
	for _, f := range prev.Files() {
		files[f.Path] = f
	}
	read := func(add *delta.Add) []string {
		rows, err := delta.ReadDataFile(ctx, tbl.Path(), add, prev.Schema())
		if err != nil {
			t.Fatalf("%s version %d: %v", tbl.Path(), v, err)
		}
		var part []string
		for k, p := range add.PartitionValues {
			if p == nil {
				part = append(part, k+"=null")
			} else {
				part = append(part, k+"="+*p)
			}
		}
		slices.Sort(part)
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = fmt.Sprint(part, r)
		}
		return out
	}
	var removed, added []string
	for _, a := range acts {
		switch a := a.(type) {
		case *delta.Remove:
			f := files[a.Path]
			if f == nil {
				t.Errorf("%s version %d removes %s, not part of version %d", tbl.Path(), v, a.Path, v-1)
				continue
			}
			removed = append(removed, read(f)...)
		case *delta.Add:
			added = append(added, read(a)...)
		}
	}
	slices.Sort(removed)
	slices.Sort(added)
	if !slices.Equal(removed, added) {
		t.Errorf("%s: OPTIMIZE version %d adds %d rows, removes %d, or other rows", tbl.Path(), v, len(added), len(removed))
	}
}

// compactJSON runs `lakeside compact --json` with args and returns its
// report; it fails the test unless the command succeeds.
func (e *e2e) compactJSON(args ...string) agent.CompactReport {
	e.t.Helper()
	stdout, stderr, code := e.lakeside(append([]string{"compact", "--config", e.configPath, "--json"}, args...)...)
	var rep agent.CompactReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil {
		e.t.Fatalf("lakeside compact %v: exit %d, %s %s", args, code, stdout, stderr)
	}
	return rep
}

// TestCompactCommand runs `lakeside compact` by hand with background
// compaction held off (a threshold and a schedule never reached): through the running agent a dry run plans without
// committing, a table that is not one is refused, --table compacts only
// that table, and a bad query on the control socket is refused before
// anything is written; with the agent stopped the command compacts the
// other table itself. The mirror equals PostgreSQL after each.
func TestCompactCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newE2EWith(t, []string{"public.stock"}, `delta:
  flush_interval: 50ms
  compaction: true
  compact_interval: 1h
  compact_min_files: 1000
`)
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL)`, `INSERT INTO stock VALUES (1, 0)`)
	d := e.start()
	e.waitApplied(d)
	for i := range 12 {
		e.exec(fmt.Sprintf(`INSERT INTO stock VALUES (%d, %d)`, i+2, i))
		e.waitApplied(d)
	}
	version := func(name string) int64 {
		v, err := e.localTable(name).LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := map[string]int64{"public.stock": version("public.stock"), "public.stock_changes": version("public.stock_changes")}

	rep := e.compactJSON("--dry-run")
	if !rep.Agent || !rep.DryRun || len(rep.Tables) != 2 {
		t.Fatalf("dry run: %+v", rep)
	}
	for _, tc := range rep.Tables {
		if tc.Bins == 0 || tc.FilesAfter >= tc.FilesBefore || version(tc.Name) != before[tc.Name] {
			t.Errorf("dry run of %s: %+v; version %d, was %d", tc.Name, tc, version(tc.Name), before[tc.Name])
		}
	}
	if _, stderr, code := e.lakeside("compact", "--config", e.configPath, "--table", "public.nosuch"); code == 0 || !strings.Contains(stderr, `no table "public.nosuch"`) {
		t.Errorf("compact --table public.nosuch: exit %d, %s", code, stderr)
	}
	client := controlHTTPClient(filepath.Join(e.stateDir, agent.SocketName))
	for _, query := range []string{"dry_run=maybe", "dry_run=true&dry_run=false", "table=../x", "tables=public.stock", "table=public.stock&force=1"} {
		resp, err := client.Post("http://lakeside/compact?"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("POST /compact?%s: %d, want 400", query, resp.StatusCode)
		}
	}
	for name, v := range before {
		if version(name) != v {
			t.Fatalf("%s: version %d after a dry run and refused requests, was %d", name, version(name), v)
		}
	}

	rep = e.compactJSON("--table", "public.stock_changes")
	if !rep.Agent || len(rep.Tables) != 1 || rep.Tables[0].Name != "public.stock_changes" || rep.Tables[0].Bins == 0 {
		t.Fatalf("compact --table public.stock_changes: %+v", rep)
	}
	if version("public.stock") != before["public.stock"] {
		t.Error("compact --table public.stock_changes committed to the mirror")
	}
	e.exec(`UPDATE stock SET qty = qty + 100 WHERE id % 2 = 0`)
	e.waitApplied(d)
	e.stop(d)

	rep = e.compactJSON()
	if rep.Agent {
		t.Fatal("the stopped agent answered")
	}
	for _, tc := range rep.Tables {
		if tc.Name == "public.stock" && (tc.Bins == 0 || tc.FilesAfter >= tc.FilesBefore) {
			t.Errorf("compaction of the mirror with the agent stopped: %+v", tc)
		}
	}
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		if len(checkOptimizeVersions(t, e.localTable(name))) == 0 {
			t.Errorf("%s: no OPTIMIZE version", name)
		}
	}
	d = e.start()
	e.exec(`INSERT INTO stock VALUES (1000, 1)`)
	e.waitApplied(d)
	e.stop(d)
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
}

// controlHTTPClient returns an HTTP client of the agent's control socket.
func controlHTTPClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// TestCompactionWaitsForACopy resyncs a table at a paced rate while the
// agent flushes every 50 ms: no background pass compacts its two tables
// while it is copied, and one merges the copy's files after it.
func TestCompactionWaitsForACopy(t *testing.T) {
	t.Parallel()
	e := newE2EWith(t, []string{"public.stock"}, `delta:
  flush_interval: 50ms
  compaction: true
  compact_interval: 1s
  compact_min_files: 4
  compact_bytes_per_second: 0
`)
	d := e.startPacedStock(6000, 200, 2000)
	if out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.stock"); code != 0 {
		t.Fatalf("resync exited %d: %s%s", code, out, errOut)
	}
	e.waitApplied(d)
	time.Sleep(2500 * time.Millisecond) // a pass of the schedule after the copy
	e.stop(d)

	copying, during, after := false, 0, 0
	for _, line := range strings.Split(d.log(), "\n") {
		switch {
		case strings.Contains(line, `msg="backfill started"`) && strings.Contains(line, "reason=resync"):
			copying = true
		case strings.Contains(line, `msg="backfill done"`) && strings.Contains(line, "reason=resync"):
			copying = false
		case strings.Contains(line, "msg=compacting") && strings.Contains(line, "table=public.stock"):
			if copying {
				during++
			} else {
				after++
			}
		}
	}
	if during > 0 || after == 0 {
		t.Fatalf("%d compaction passes while the table was copied (want none), %d after it (want some); log:\n%s", during, after, d.log())
	}
	e.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
}
