package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent"
	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/internal/s3test"
)

// replicaSection returns the agent's replica section for bucket on the S3
// server s3 (site branch1), followed by extra, its further keys.
func replicaSection(s3 *s3test.Server, bucket, extra string) string {
	return replicaSectionAt(s3, "s3://"+bucket+"/lake", "branch1", extra)
}

// replicaSectionAt returns the agent's replica section for the URL url on
// the S3 server s3 and the site, followed by extra, its further keys.
func replicaSectionAt(s3 *s3test.Server, url, site, extra string) string {
	return fmt.Sprintf("replica:\n  url: %s\n  site: %s\n  endpoint: %s\n  region: %s\n  access_key_id: %s\n  secret_access_key: %s\n%s",
		url, site, s3.Endpoint(), s3test.Region, s3test.AccessKey, s3test.SecretKey, extra)
}

// TestReplicaOutageBackpressureAndCatchUp runs the real agent against a
// real S3 server on loopback: the server goes away under load, the local
// backlog reaches its budget and capture pauses (PostgreSQL keeps the WAL),
// the agent is SIGKILLed and restarted while offline, then the server comes
// back and the remote catches up to the local tables, every row once.
func TestReplicaOutageBackpressureAndCatchUp(t *testing.T) {
	t.Parallel()
	s3 := s3test.Start(t)
	bucket := s3.NewBucket()
	// The slot's lag, against the server's WAL end, would grow with the
	// WAL other tests write: on a PostgreSQL of its own.
	e := newE2EAlone(t, []string{"public.stock"}, replicaSection(s3, bucket, "  max_backlog: 256KiB\n  poll_interval: 200ms\n  max_backoff: 1s\n"))
	e.exec(`CREATE TABLE stock (id int8 PRIMARY KEY, qty int NOT NULL, note text)`,
		`INSERT INTO stock SELECT g, g, 'seed' FROM generate_series(1, 1000) g`)
	d := e.start()
	e.waitRemote(d, "first upload")

	s3.Stop()
	var lagBefore int64
	next := int64(1001)
	paused := false
	deadline := time.Now().Add(90 * time.Second)
	for !paused {
		if time.Now().After(deadline) {
			t.Fatalf("capture never paused with S3 down; log:\n%s", d.stderr)
		}
		e.exec(fmt.Sprintf(`INSERT INTO stock SELECT g, g, repeat('x', 200) FROM generate_series(%d, %d) g`, next, next+1999))
		next += 2000
		time.Sleep(300 * time.Millisecond)
		if st := e.status(); st.Running && st.State == "paused" {
			paused = true
		}
	}
	// While paused, PostgreSQL keeps the WAL: the slot confirms nothing
	// more, its lag grows, and the agent's status shows it.
	time.Sleep(time.Second)
	confirmed := e.slotConfirmed()
	e.exec(`UPDATE stock SET qty = qty + 1 WHERE id <= 500`)
	time.Sleep(2 * time.Second)
	var lag int64
	if err := e.conn.QueryRow(context.Background(), `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&lag); err != nil {
		t.Fatal(err)
	}
	st := e.status()
	if st.Upload == nil || st.Upload.Online || st.Upload.Errors == 0 {
		t.Fatalf("status while S3 is down: upload %+v, want offline with failed requests counted", st.Upload)
	}
	if st.State != "paused" || e.slotConfirmed() != confirmed || st.LagBytes < lag/2 {
		t.Fatalf("after more writes: state %q, slot confirmed %s (was %s), status lag %d bytes, PostgreSQL lag %d bytes",
			st.State, e.slotConfirmed(), confirmed, st.LagBytes, lag)
	}
	lagBefore = lag

	// A crash while offline loses nothing.
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
	d = e.start()
	time.Sleep(2 * time.Second)
	e.exec(`DELETE FROM stock WHERE id <= 10`)

	s3.Restart()
	e.waitApplied(d)
	e.waitRemote(d, "catch-up")
	e.stop(d)

	// The remote table, downloaded, equals PostgreSQL.
	remote := &e2e{t: t, conn: e.conn, stateDir: t.TempDir()}
	if err := s3.Download(context.Background(), bucket, "lake/branch1/", filepath.Join(remote.stateDir, "tables")); err != nil {
		t.Fatal(err)
	}
	remote.compareMirror(t, "public.stock", `SELECT id, qty, note FROM stock`, "id", "qty", "note")
	for _, tb := range []string{"public.stock", "public.stock_changes"} {
		if err := deltatest.Check(context.Background(), filepath.Join(remote.stateDir, "tables", tb)); err != nil {
			t.Errorf("replica of %s: %v", tb, err)
		}
	}
	local, _ := delta.Open(context.Background(), filepath.Join(e.stateDir, "tables", "public.stock"))
	lv, _ := local.LatestVersion(context.Background())
	rt, err := delta.Open(context.Background(), filepath.Join(remote.stateDir, "tables", "public.stock"))
	if err != nil {
		t.Fatal(err)
	}
	if rv, _ := rt.LatestVersion(context.Background()); rv != lv {
		t.Fatalf("remote at version %d, local at %d", rv, lv)
	}
	t.Logf("paused with %d bytes of slot lag; the remote caught up to version %d", lagBefore, lv)
}

// TestStalledBucketIsAnOfflineReplica runs the agent against a bucket that
// takes requests and stops answering, while two tables change: their
// uploads are cancelled and retried, status counts the stalls and names
// them, and once the bucket answers again every table is uploaded.
func TestStalledBucketIsAnOfflineReplica(t *testing.T) {
	s3 := s3test.Start(t)
	px := s3test.NewStallingProxy(t, s3)
	bucket := s3.NewBucket()
	section := fmt.Sprintf("replica:\n  url: s3://%s/lake\n  site: branch1\n  endpoint: %s\n  region: %s\n  access_key_id: %s\n  secret_access_key: %s\n"+
		"  poll_interval: 200ms\n  max_backoff: 1s\n  stall_timeout: 1s\n", bucket, px.Endpoint(), s3test.Region, s3test.AccessKey, s3test.SecretKey)
	e := newE2EWith(t, []string{"public.a", "public.b"}, section)
	e.exec(`CREATE TABLE a (id int PRIMARY KEY)`, `CREATE TABLE b (id int PRIMARY KEY)`,
		`INSERT INTO a VALUES (1)`, `INSERT INTO b VALUES (1)`)
	d := e.start()
	e.waitRemote(d, "first upload")

	px.Stall(true)
	e.exec(`INSERT INTO a SELECT g FROM generate_series(2, 100) g`, `INSERT INTO b SELECT g FROM generate_series(2, 100) g`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := e.status()
		if u := st.Upload; u != nil && !u.Online && u.Stalls > 0 && strings.Contains(u.LastError, "stalled") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stall reported: %+v; log:\n%s", st.Upload, d.log())
		}
	}
	out, _, _ := e.lakeside("status", "--config", e.configPath)
	if !strings.Contains(out, "replica stalls:") {
		t.Fatalf("status does not name the stalls:\n%s", out)
	}

	px.Stall(false)
	e.waitApplied(d)
	e.waitRemote(d, "catch-up after the bucket answers again")
	e.stop(d)
	remote := &e2e{t: t, conn: e.conn, stateDir: t.TempDir()}
	if err := s3.Download(context.Background(), bucket, "lake/branch1/", filepath.Join(remote.stateDir, "tables")); err != nil {
		t.Fatal(err)
	}
	remote.compareMirror(t, "public.a", `SELECT id FROM a`, "id")
	remote.compareMirror(t, "public.b", `SELECT id FROM b`, "id")
}

// waitRemote waits until every local table's version is on the remote.
func (e *e2e) waitRemote(d *daemon, what string) {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		cfg, _ := config.Load(e.configPath)
		st, err := agent.ReadStatus(context.Background(), cfg)
		if err == nil && st.Running && len(st.Tables) > 0 && st.Upload != nil && st.Upload.BacklogVersions == 0 {
			synced := true
			for _, tb := range st.Tables {
				if tb.RemoteVersion == nil || *tb.RemoteVersion != tb.Version {
					synced = false
				}
			}
			if synced {
				return
			}
		}
		select {
		case <-d.exited:
			e.t.Fatalf("agent exited during %s; log:\n%s", what, d.stderr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	e.t.Fatalf("the remote did not catch up (%s); log:\n%s", what, d.stderr)
}

// TestTwoAgentsOnOneSite points a second agent, with a database of its own,
// at the replica prefix of a first: the second stops replicating the table
// and its status says why, while the first's remote table stays intact.
func TestTwoAgentsOnOneSite(t *testing.T) {
	t.Parallel()
	replicaDir := t.TempDir()
	section := "replica:\n  url: file://" + replicaDir + "\n  site: branch1\n  poll_interval: 200ms\n"
	first := newE2EWith(t, []string{"public.stock"}, section)
	second := newE2EWith(t, []string{"public.stock"}, section)
	for _, e := range []*e2e{first, second} {
		e.exec(`CREATE TABLE stock (id int PRIMARY KEY, qty int NOT NULL)`)
	}
	first.exec(`INSERT INTO stock SELECT g, g FROM generate_series(1, 100) g`)
	d1 := first.start()
	first.waitApplied(d1)
	first.waitRemote(d1, "first upload")
	first.stop(d1)

	second.exec(`INSERT INTO stock SELECT g, -g FROM generate_series(1, 50) g`)
	d2 := second.start()
	second.waitApplied(d2)
	var st *agent.Status
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if st = second.status(); len(st.Tables) > 0 && st.Tables[0].RemoteError != "" {
			break
		}
	}
	if len(st.Tables) == 0 || !strings.Contains(st.Tables[0].RemoteError, "another agent") {
		t.Fatalf("the second agent's status does not say it stopped: %+v", st.Tables)
	}
	out, _, _ := second.lakeside("status", "--config", second.configPath)
	if !strings.Contains(out, "replica of public.stock") {
		t.Fatalf("status (text) does not show the replica error:\n%s", out)
	}
	second.stop(d2)

	// The remote table, read where the helpers read local ones
	// (<state_dir>/tables), still equals the first database.
	if err := os.Rename(filepath.Join(replicaDir, "branch1"), filepath.Join(replicaDir, "tables")); err != nil {
		t.Fatal(err)
	}
	remote := &e2e{t: t, conn: first.conn, stateDir: replicaDir}
	remote.compareMirror(t, "public.stock", `SELECT id, qty FROM stock`, "id", "qty")
}
