package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
)

// pruneRetention is the test's delta.local_retention.
const pruneRetention = time.Second

// TestLocalPruningBoundsDiskAndTheReplicaKeepsEverything runs the real agent
// against a real S3 server with a short delta.local_retention through many
// versions: once the versions are uploaded and older than the retention,
// the local disk holds no more data files than the mirror's latest
// version (the changelog none), while the replica reads completely at every
// version; local time travel to a pruned version answers 410 Gone naming
// the file on the replica; and with S3 stopped, pruning deletes nothing that
// is not uploaded.
func TestLocalPruningBoundsDiskAndTheReplicaKeepsEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s3 := s3test.Start(t)
	bucket := s3.NewBucket()
	addr := freeAddr(t)
	e := newE2EWith(t, []string{"public.stock"}, fmt.Sprintf(`delta:
  flush_interval: 100ms
  local_retention: %s
http:
  listen: %s
`, pruneRetention, addr)+replicaSection(s3, bucket, "  poll_interval: 200ms\n  max_backoff: 1s\n"))
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL, note text)`,
		`INSERT INTO stock SELECT g, 0, repeat('n', 100) FROM generate_series(1, 500) g`)
	d := e.start()
	e.waitApplied(d) // the snapshot is taken: every update below is a change
	updates := 0
	round := func(n int) {
		for i := range n {
			e.exec(fmt.Sprintf(`UPDATE stock SET qty = qty + 1 WHERE id %% 10 = %d`, i%10))
			updates += 50
			e.waitApplied(d)
		}
	}
	round(30)
	e.waitRemote(d, "upload")
	time.Sleep(pruneRetention + 500*time.Millisecond) // every file is older than the retention
	e.vacuum()

	// The local disk holds the mirror's latest version and nothing else.
	mirror := e.localTable("public.stock")
	latest, err := mirror.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var bound int64
	want := map[string]bool{}
	for _, f := range latest.Files() {
		want[f.Path] = true
		bound += f.Size
	}
	local, localBytes := dataFiles(t, mirror.Path())
	for _, p := range local {
		if !want[p] {
			t.Errorf("mirror file %s kept locally; it is not part of the latest version %d", p, latest.Version())
		}
	}
	changes, changesBytes := dataFiles(t, filepath.Join(e.stateDir, "tables", "public.stock_changes"))
	if len(changes) != 0 {
		t.Errorf("changelog files kept locally past the local retention: %v", changes)
	}
	if localBytes+changesBytes > bound {
		t.Errorf("local data files take %d bytes, over the bound of %d (the mirror's latest version)", localBytes+changesBytes, bound)
	}

	// Time travel to a pruned version names the file on the replica. (Not
	// to the first versions: the live view read those while they were
	// the latest, when it loaded the table, and may still hold their rows
	// decoded.)
	pruned := latest.Version() / 2
	code, body := httpGet(t, addr, fmt.Sprintf("/api/v1/tables/public.stock/rows?version=%d", pruned))
	if code != http.StatusGone || !strings.Contains(body, "s3://"+bucket+"/lake/branch1/public.stock/part-") {
		t.Errorf("time travel to pruned version %d: %d %.300s; want 410 naming the file on the replica", pruned, code, body)
	}
	if code, body := httpGet(t, addr, fmt.Sprintf("/api/v1/tables/public.stock/rows?version=%d", latest.Version())); code != http.StatusOK {
		t.Errorf("time travel to the latest version: %d %s", code, body)
	}

	// The replica has every version, and the retention for other engines.
	remoteBytes := e.checkRemote(s3, bucket, 500+updates)
	t.Logf("%d versions; local data files %d bytes, bound %d, replica %d", latest.Version()+1, localBytes+changesBytes, bound, remoteBytes)

	// With S3 stopped, nothing that is not uploaded is pruned.
	s3.Stop()
	round(5)
	time.Sleep(pruneRetention + 500*time.Millisecond)
	e.vacuum()
	st := e.status()
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		var remoteVersion int64 = -1
		for _, tb := range st.Tables {
			if tb.Name == name && tb.RemoteVersion != nil {
				remoteVersion = *tb.RemoteVersion
			}
		}
		tbl := e.localTable(name)
		v, err := tbl.LatestVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v <= remoteVersion {
			t.Fatalf("%s: version %d is on the replica (%d) with S3 stopped", name, v, remoteVersion)
		}
		for ; v > remoteVersion; v-- {
			acts, err := tbl.ReadCommit(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range acts {
				if add, ok := a.(*delta.Add); ok {
					if _, err := os.Stat(filepath.Join(tbl.Path(), filepath.FromSlash(add.Path))); err != nil {
						t.Errorf("%s: file of version %d, not uploaded, is gone: %v", name, v, err)
					}
				}
			}
		}
	}

	s3.Restart()
	e.waitRemote(d, "catch-up")
	time.Sleep(pruneRetention + 500*time.Millisecond)
	e.vacuum()
	if changes, _ := dataFiles(t, filepath.Join(e.stateDir, "tables", "public.stock_changes")); len(changes) != 0 {
		t.Errorf("changelog files kept locally once uploaded: %v", changes)
	}
	e.checkRemote(s3, bucket, 500+updates)
	e.stop(d)
}

// vacuum runs `lakeside vacuum`, which the running agent does.
func (e *e2e) vacuum() {
	e.t.Helper()
	stdout, stderr, code := e.lakeside("vacuum", "--config", e.configPath, "--json")
	var rep agent.VacuumReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || !rep.Agent {
		e.t.Fatalf("lakeside vacuum: exit %d, %s %s", code, stdout, stderr)
	}
	for _, tv := range rep.Tables {
		if tv.Error != "" {
			e.t.Fatalf("vacuum of %s: %s", tv.Name, tv.Error)
		}
	}
}

// localTable opens a local Delta table.
func (e *e2e) localTable(name string) *delta.Table {
	e.t.Helper()
	tbl, err := delta.Open(context.Background(), filepath.Join(e.stateDir, "tables", name))
	if err != nil {
		e.t.Fatal(err)
	}
	return tbl
}

// checkRemote downloads the replica and checks that every version of
// public.stock and of its changelog reads completely, that the mirror
// equals PostgreSQL and the changelog holds changes rows, and that the
// tables carry the vacuum retention; it returns the bytes of the mirror's
// and changelog's data files there.
func (e *e2e) checkRemote(s3 *s3test.Server, bucket string, changes int) int64 {
	e.t.Helper()
	ctx := context.Background()
	remote := &e2e{t: e.t, conn: e.conn, stateDir: e.t.TempDir()}
	if err := s3.Download(ctx, bucket, "lake/branch1/", filepath.Join(remote.stateDir, "tables")); err != nil {
		e.t.Fatal(err)
	}
	remote.compareMirror(e.t, "public.stock", `SELECT id, qty, note FROM stock`, "id", "qty", "note")
	var total int64
	for _, name := range []string{"public.stock", "public.stock_changes"} {
		tbl := remote.localTable(name)
		latest, err := tbl.LatestVersion(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		for v := range latest + 1 {
			snap, err := tbl.SnapshotAt(ctx, v)
			if err != nil {
				e.t.Fatalf("replica %s version %d: %v", name, v, err)
			}
			rows, err := snap.ReadRows(ctx)
			if err != nil {
				e.t.Fatalf("replica %s version %d does not read: %v", name, v, err)
			}
			if v == latest {
				if name == "public.stock_changes" && len(rows) != changes {
					e.t.Errorf("replica changelog holds %d rows, want %d", len(rows), changes)
				}
				if got := snap.Metadata().Configuration["delta.deletedFileRetentionDuration"]; got != "interval 7 days" {
					e.t.Errorf("replica %s: delta.deletedFileRetentionDuration %q, want the vacuum retention", name, got)
				}
			}
		}
		_, n := dataFiles(e.t, tbl.Path())
		total += n
	}
	return total
}

// dataFiles returns the data files of a table directory (the log and
// hidden files aside), relative and slash-separated, and their total size.
func dataFiles(t *testing.T, root string) ([]string, int64) {
	t.Helper()
	var out []string
	var size int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root && (strings.HasPrefix(d.Name(), "_delta_log") || strings.HasPrefix(d.Name(), ".")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".parquet") {
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, size
}

// httpGet sends a GET to the live view and returns the status and body.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
