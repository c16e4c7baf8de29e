package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
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
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/fleet"
	"github.com/lakeside/lakeside/uploader/s3"
)

// TestFleetLayout runs three agents, each on a database of its own, with
// replica.layout fleet against one S3 server: they commit into one fleet
// mirror and one fleet changelog per table, at once, under a workload of
// inserts, updates and deletes; one site adds a column the others never
// get, another widens a column from integer to bigint (values past 2^32
// follow) that the others keep narrow, and one agent is SIGKILLed and
// started again mid-run. Afterwards
// each site's partition of the fleet mirror equals its database row for
// row, each site's partition of the fleet changelog holds exactly its
// local changelog's changes, a site without the column reads null in it,
// and the fleet's column is bigint with the type widening feature.
func TestFleetLayout(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	const sites = 3
	es := make([]*e2e, sites)
	ds := make([]*daemon, sites)
	for i := range sites {
		section := replicaSectionAt(srv, "s3://"+bucket+"/fleet", fmt.Sprintf("site-%d", i), "  layout: fleet\n  fleet_interval: 300ms\n  poll_interval: 200ms\n")
		es[i] = newE2EWith(t, []string{"public.items"}, section)
		es[i].exec(`CREATE TABLE items (id int8 PRIMARY KEY, v text, n int4)`,
			fmt.Sprintf(`INSERT INTO items SELECT g, 'site %d row ' || g, g %% 7 FROM generate_series(1, 300) g`, i))
	}
	for i, e := range es {
		ds[i] = e.start()
	}
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for round := range 30 {
				id := 1 + rng.IntN(400)
				switch {
				case i == 1 && round == 10:
					e.exec(`ALTER TABLE items ADD COLUMN extra text`, `UPDATE items SET extra = 'x' || id WHERE id % 3 = 0`)
				case i == 0 && round == 15:
					e.exec(`ALTER TABLE items ALTER COLUMN n TYPE int8`, `UPDATE items SET n = n + 5000000000 WHERE id % 5 = 0`)
				case round%4 == 3:
					e.exec(fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id))
				default:
					e.exec(fmt.Sprintf(`INSERT INTO items (id, v, n) VALUES (%d, 'new', 1) ON CONFLICT (id) DO UPDATE SET n = items.n + 1, v = 'changed'`, id))
				}
				time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	es[2].sigkill(ds[2], 1)
	ds[2] = es[2].start()
	wg.Wait()
	for i, e := range es {
		e.waitApplied(ds[i])
		e.waitRemote(ds[i], "the workload")
	}
	dir := t.TempDir()
	if err := srv.Download(context.Background(), bucket, "fleet/", dir); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"public.items", "public.items_changes"} {
		if err := deltatest.Check(context.Background(), filepath.Join(dir, tb)); err != nil {
			t.Errorf("fleet table %s: %v", tb, err)
		}
	}
	mirror, err := delta.Open(context.Background(), filepath.Join(dir, "public.items"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := mirror.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("the fleet mirror does not read: %v", err)
	}
	if f, _ := snap.Schema().Field("n"); f == nil || f.Type != delta.TypeLong || !delta.SupportsTypeWidening(snap.Protocol()) {
		t.Errorf("fleet column n after one site widened it: %v, protocol %+v", f, snap.Protocol())
	}
	for i, e := range es {
		site := fmt.Sprintf("site-%d", i)
		cols := []string{"id", "v", "n"}
		query := `SELECT id, v, n FROM items`
		if i == 1 {
			cols, query = append(cols, "extra"), `SELECT id, v, n, extra FROM items`
		}
		if err := fleetDiff(e, filepath.Join(dir, "public.items"), site, query, cols, nil); err != nil {
			t.Errorf("fleet mirror, %s: %v", site, err)
		}
		if i != 1 {
			if err := fleetDiff(e, filepath.Join(dir, "public.items"), site, `SELECT NULL::text FROM items`, []string{"extra"}, nil); err != nil {
				t.Errorf("fleet mirror, %s, the column it lacks: %v", site, err)
			}
		}
		local := localChangesHeld(t, e, filepath.Join(dir, "public.items_changes"), site, "public.items_changes")
		if err := fleetDiff(e, filepath.Join(dir, "public.items_changes"), site, "", nil, local); err != nil {
			t.Errorf("fleet changelog, %s: %v", site, err)
		}
		var n int
		if err := e.conn.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d rows and %d changes compared", site, n, len(local))
	}
}

// localChangesHeld returns the changes (changeKey) of e's local changelog
// table at the version of it the fleet table at dir holds for site: the
// agent may have gone on after the fleet's last commit (a copy of a table
// a migration rewrote, say), and the fleet must equal the local table at
// the version it names.
func localChangesHeld(t *testing.T, e *e2e, dir, site, table string) []string {
	t.Helper()
	ctx := context.Background()
	fleetTbl, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := fleetTbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := int64(-1)
	for _, x := range snap.Transactions() {
		if strings.HasPrefix(x.AppID, "lakeside-fleet/"+site+"/"+table+"/") {
			held = x.Version
		}
	}
	if held < 0 {
		t.Fatalf("the fleet holds nothing of %s at %s", table, site)
	}
	local, err := delta.Open(ctx, filepath.Join(e.stateDir, "tables", table))
	if err != nil {
		t.Fatal(err)
	}
	at, err := local.SnapshotAt(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := at.Schema().FieldNames()
	err = at.ScanFiles(ctx, func(_ *delta.Add, rows []delta.Row) error {
		for _, r := range rows {
			m := make(map[string]any, len(names))
			for j, n := range names {
				m[n] = r[j]
			}
			out = append(out, changeKey(m))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// changeKey is what identifies a change of the changelog in the fleet
// test: its position, its kind and its row.
func changeKey(r map[string]any) string {
	return fmt.Sprint(r["_lsn"], r["_seq"], r["_op"], r["id"], r["v"], r["n"])
}

// fleetDiff compares the partition of site in the fleet table at dir with
// the rows of query on e's database (cols of the fleet's rows, skipping
// soft-deleted ones), or, when query is empty, with the changes want
// (changeKey), as multisets.
func fleetDiff(e *e2e, dir, site, query string, cols []string, want []string) error {
	ctx := context.Background()
	count := map[string]int{}
	if query != "" {
		rows, err := e.conn.Query(ctx, query)
		if err != nil {
			return err
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return err
			}
			count[fmt.Sprint(vals...)]++
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	for _, k := range want {
		count[k]++
	}
	tbl, err := delta.Open(ctx, dir)
	if err != nil {
		return err
	}
	snap, err := tbl.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("the fleet table does not read: %w", err)
	}
	names := snap.Schema().FieldNames()
	err = snap.ScanFiles(ctx, func(_ *delta.Add, rows []delta.Row) error {
		for _, r := range rows {
			m := make(map[string]any, len(names))
			for j, n := range names {
				m[n] = r[j]
			}
			if m["_site"] != site || m["_deleted"] == true {
				continue
			}
			if query == "" {
				count[changeKey(m)]--
				continue
			}
			vals := make([]any, len(cols))
			for i, c := range cols {
				vals[i] = m[c]
			}
			count[fmt.Sprint(vals...)]--
		}
		return nil
	})
	if err != nil {
		return err
	}
	var missing, extra []string
	for k, n := range count {
		for range n {
			missing = append(missing, k)
		}
		for range -n {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		return fmt.Errorf("%d missing (first %v), %d extra (first %v)", len(missing), missing[:min(5, len(missing))], len(extra), extra[:min(5, len(extra))])
	}
	return nil
}

// TestFleetOfTwentySites runs twenty agents, each on a database of its
// own in one PostgreSQL, against one S3 server in the fleet layout, with
// different workloads (inserts, updates, deletes, one large transaction),
// one site migrating (ADD COLUMN, then integer to bigint) that the others
// don't, SIGKILLs of random agents, and the S3 server down for a while in
// the middle. A reader polls each fleet table's log throughout and checks
// that every version it sees reads as a valid table and that versions
// never go back. Afterwards every site's partition of the fleet mirror
// equals its database, and of the fleet changelog its local changelog.
func TestFleetOfTwentySites(t *testing.T) {
	// Twenty agents take the machine: not beside the parallel tests.
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	const sites = 20
	es := make([]*e2e, sites)
	ds := make([]*daemon, sites)
	for i := range sites {
		section := replicaSectionAt(srv, "s3://"+bucket+"/fleet", fmt.Sprintf("site-%02d", i), "  layout: fleet\n  fleet_interval: 500ms\n  poll_interval: 300ms\n  max_backoff: 1s\n")
		es[i] = newE2EWith(t, []string{"public.items"}, section)
		es[i].exec(`CREATE TABLE items (id int8 PRIMARY KEY, v text, n int4)`,
			fmt.Sprintf(`INSERT INTO items SELECT g, 'site %d row ' || g, g %% 7 FROM generate_series(1, %d) g`, i, 50+10*i))
	}
	for i, e := range es {
		ds[i] = e.start()
	}

	poll := startFleetPoller(t, srv, bucket, "public.items")
	pollChanges := startFleetPoller(t, srv, bucket, "public.items_changes")
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 13))
			for round := range 24 {
				id := 1 + rng.IntN(300)
				switch {
				case i == 7 && round == 6:
					e.exec(`ALTER TABLE items ADD COLUMN note text DEFAULT 'none'`, `UPDATE items SET note = 'n' || id WHERE id % 4 = 0`)
				case i == 7 && round == 14:
					e.exec(`ALTER TABLE items ALTER COLUMN n TYPE int8`, `UPDATE items SET n = n + 9000000000 WHERE id % 6 = 0`)
				case i == 3 && round == 10:
					// One large transaction.
					e.exec(`INSERT INTO items SELECT g, 'bulk', 0 FROM generate_series(100000, 120000) g`)
				case i%3 == 0:
					e.exec(fmt.Sprintf(`INSERT INTO items (id, v, n) VALUES (%d, 'new', 1) ON CONFLICT (id) DO UPDATE SET n = items.n + 1`, 1000+round*20+rng.IntN(20)))
				case i%3 == 1 && round%3 == 0:
					e.exec(fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id))
				default:
					e.exec(fmt.Sprintf(`UPDATE items SET v = 'changed %d', n = n + 1 WHERE id %% 17 = %d`, round, id%17))
				}
				time.Sleep(time.Duration(50+rng.IntN(150)) * time.Millisecond)
			}
		}()
	}
	// Kill random agents while the workload runs, and take S3 away.
	rng := rand.New(rand.NewPCG(99, 1))
	for k := range 6 {
		time.Sleep(400 * time.Millisecond)
		i := rng.IntN(sites)
		es[i].sigkill(ds[i], k)
		ds[i] = es[i].start()
		if k == 2 {
			srv.Stop()
			time.Sleep(2 * time.Second)
			srv.Restart()
		}
	}
	wg.Wait()
	for i, e := range es {
		e.waitApplied(ds[i])
		e.waitRemote(ds[i], "the workload")
	}
	seen, seenChanges := poll(), pollChanges()
	if seen < sites || seenChanges < sites {
		t.Errorf("the readers saw %d fleet mirror and %d fleet changelog versions, fewer than the sites", seen, seenChanges)
	}

	dir := t.TempDir()
	if err := srv.Download(context.Background(), bucket, "fleet/", dir); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{"public.items", "public.items_changes"} {
		if err := deltatest.Check(context.Background(), filepath.Join(dir, tb)); err != nil {
			t.Errorf("fleet table %s: %v", tb, err)
		}
	}
	changes := 0
	for i, e := range es {
		site := fmt.Sprintf("site-%02d", i)
		cols, query := []string{"id", "v", "n"}, `SELECT id, v, n FROM items`
		if i == 7 {
			cols, query = append(cols, "note"), `SELECT id, v, n, note FROM items`
		}
		if err := fleetDiff(e, filepath.Join(dir, "public.items"), site, query, cols, nil); err != nil {
			t.Errorf("fleet mirror, %s: %v", site, err)
		}
		local := localChangesHeld(t, e, filepath.Join(dir, "public.items_changes"), site, "public.items_changes")
		if err := fleetDiff(e, filepath.Join(dir, "public.items_changes"), site, "", nil, local); err != nil {
			t.Errorf("fleet changelog, %s: %v", site, err)
		}
		changes += len(local)
	}
	t.Logf("%d sites, %d changes; the readers saw %d fleet mirror and %d fleet changelog versions, each valid", sites, changes, seen, seenChanges)
}

// startFleetPoller reads the log of the fleet table until the returned
// function is called, and fails the test if a version it sees does not
// read as a valid table or the newest version goes back; that function
// returns how many versions it saw. While S3 is down it waits.
func startFleetPoller(t *testing.T, srv *s3test.Server, bucket, table string) func() int {
	client, err := s3.New(s3.Config{Endpoint: srv.Endpoint(), Region: s3test.Region, AccessKeyID: s3test.AccessKey,
		SecretAccessKey: s3test.SecretKey, Bucket: bucket, Prefix: "fleet", Retry: s3.RetryPolicy{MaxRetries: 1, MinWait: 10e6, MaxWait: 50e6}})
	if err != nil {
		t.Fatal(err)
	}
	log := fleet.NewLog(uploader.FleetStore(client), table)
	local := filepath.Join(t.TempDir(), table)
	if err := os.MkdirAll(filepath.Join(local, delta.LogDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var failure error
	known := int64(-1)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			head, err := log.Latest(context.Background(), known)
			if err != nil {
				continue // S3 is down
			}
			if head < known {
				failure = fmt.Errorf("the newest version went back from %d to %d", known, head)
				return
			}
			for v := known + 1; v <= head; v++ {
				acts, err := log.Read(context.Background(), v)
				if err != nil {
					break
				}
				data, err := delta.EncodeCommit(acts, time.Now())
				if err == nil {
					err = os.WriteFile(filepath.Join(local, delta.LogDirName, delta.CommitFileName(v)), data, 0o644)
				}
				if err != nil {
					failure = err
					return
				}
				tbl, err := delta.Open(context.Background(), local)
				if err == nil {
					_, err = tbl.SnapshotAt(context.Background(), v)
				}
				if err != nil {
					failure = fmt.Errorf("version %d does not read: %w", v, err)
					return
				}
				known = v
			}
		}
	}()
	return func() int {
		close(stop)
		<-done
		if failure != nil {
			t.Fatalf("fleet reader: %v", failure)
		}
		return int(known + 1)
	}
}

// TestFleetStatus runs two agents with replica.layout fleet against one S3
// server, stops the first once both are replicated, and lets the second
// go on. lakeside fleet status, given the second site's configuration,
// then lists both sites for the mirror and the changelog, the stopped one
// first and behind the other, each with the source position and local
// version its agent reported for that table; with --replica and the
// endpoint and credentials in the environment it shows the same, and a
// table no site created as such, not as an error.
func TestFleetStatus(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	es := make([]*e2e, 2)
	ds := make([]*daemon, 2)
	for i := range es {
		section := replicaSectionAt(srv, "s3://"+bucket+"/fleet", fmt.Sprintf("site-%d", i), "  layout: fleet\n  fleet_interval: 200ms\n  poll_interval: 200ms\n")
		es[i] = newE2EWith(t, []string{"public.items"}, section)
		es[i].exec(`CREATE TABLE items (id int8 PRIMARY KEY, v text)`,
			fmt.Sprintf(`INSERT INTO items SELECT g, 'site %d row ' || g FROM generate_series(1, 50) g`, i))
		ds[i] = es[i].start()
	}
	// applied returns what site i's agent reports per table: its version
	// and the LSN it applied.
	applied := func(i int) map[string]agent.TableStatus {
		es[i].waitApplied(ds[i])
		es[i].waitRemote(ds[i], "the workload")
		out := map[string]agent.TableStatus{}
		for _, tb := range es[i].status().Tables {
			out[tb.Name] = tb
		}
		return out
	}
	for i, e := range es {
		e.exec(fmt.Sprintf(`UPDATE items SET v = 'changed at site %d' WHERE id <= 10`, i))
	}
	want := []map[string]agent.TableStatus{applied(0), nil}
	es[0].stop(ds[0])
	before := applied(1)
	time.Sleep(1100 * time.Millisecond) // site 1's next commit is a second later than site 0's last
	es[1].exec(`INSERT INTO items SELECT g, 'later' FROM generate_series(51, 80) g`, `DELETE FROM items WHERE id = 3`)
	want[1] = applied(1)
	for name, tb := range want[1] {
		if mustLSN(t, tb.AppliedLSN) <= mustLSN(t, before[name].AppliedLSN) {
			t.Fatalf("site 1, %s: applied %s after the last changes, %s before", name, tb.AppliedLSN, before[name].AppliedLSN)
		}
	}

	check := func(how string, rep fleetReport, tables ...string) {
		t.Helper()
		if len(rep.Tables) != len(tables) {
			t.Fatalf("%s: %d tables, want %v", how, len(rep.Tables), tables)
		}
		for k, tr := range rep.Tables {
			if tr.Table != tables[k] || !tr.Exists || tr.Error != "" || len(tr.Sites) != 2 {
				t.Fatalf("%s: table %d is %+v, want %s with two sites", how, k, tr, tables[k])
			}
			for j, s := range tr.Sites { // the stopped site first
				tb := want[j][tr.Table]
				kind := "mirror"
				if strings.HasSuffix(tr.Table, "_changes") {
					kind = "changelog"
				}
				switch {
				case s.Site != fmt.Sprintf("site-%d", j) || s.Kind != kind:
					t.Errorf("%s: %s row %d is %s %s, want site-%d %s", how, tr.Table, j, s.Site, s.Kind, j, kind)
				case s.LSN == nil || *s.LSN != tb.AppliedLSN || s.LocalVersion != tb.Version:
					t.Errorf("%s: %s, %s: LSN %v at local version %d, its agent applied %s at %d", how, tr.Table, s.Site, s.LSN, s.LocalVersion, tb.AppliedLSN, tb.Version)
				case s.LastCommit == nil || (j == 0) != (s.BehindSeconds >= 1):
					t.Errorf("%s: %s, %s: last commit %v, %.3f s behind", how, tr.Table, s.Site, s.LastCommit, s.BehindSeconds)
				}
			}
		}
	}
	stdout, stderr, code := es[1].lakeside("fleet", "status", "--config", es[1].configPath, "--json")
	if code != 0 {
		t.Fatalf("fleet status --config: exit %d: %s", code, stderr)
	}
	var rep fleetReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("fleet status --json: %v:\n%s", err, stdout)
	}
	check("--config", rep, "public.items", "public.items_changes")
	if rep.Replica != fmt.Sprintf("s3://%s/fleet", bucket) {
		t.Errorf("--config: replica %q", rep.Replica)
	}

	env := []string{"AWS_ENDPOINT_URL_S3=" + srv.Endpoint(), "AWS_REGION=" + s3test.Region,
		"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command(os.Args[0], append([]string{"fleet", "status", "--replica", fmt.Sprintf("s3://%s/fleet", bucket)}, args...)...)
		cmd.Env = append(append(os.Environ(), "LAKESIDE_TEST_MAIN=1"), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out.String(), errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), 0
	}
	stdout, stderr, code = run("--table", "public.items", "--json")
	if code != 0 {
		t.Fatalf("fleet status --replica: exit %d: %s", code, stderr)
	}
	rep = fleetReport{}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("fleet status --replica --json: %v:\n%s", err, stdout)
	}
	check("--replica", rep, "public.items", "public.items_changes")

	stdout, stderr, code = run("--table", "public.items", "--table", "public.none")
	if code != 0 {
		t.Fatalf("fleet status --replica, a table no site created: exit %d: %s", code, stderr)
	}
	mirror := stdout[strings.Index(stdout, "\npublic.items:"):strings.Index(stdout, "\npublic.items_changes:")]
	at0, at1 := strings.Index(mirror, "\nsite-0 "), strings.Index(mirror, "\nsite-1 ")
	if at0 < 0 || at1 < at0 || !strings.Contains(mirror, want[0]["public.items"].AppliedLSN) || !strings.Contains(mirror, want[1]["public.items"].AppliedLSN) ||
		!strings.Contains(stdout, "public.none: no fleet table") || !strings.Contains(stdout, "public.none_changes: no fleet table") {
		t.Errorf("fleet status --replica, for people:\n%s", stdout)
	}
	t.Logf("fleet status:\n%s", stdout)

	if _, stderr, code := run(); code != 2 || !strings.Contains(stderr, "--table") {
		t.Errorf("fleet status --replica without --table: exit %d: %s", code, stderr)
	}
}

// mustLSN parses an LSN the agent reported.
func mustLSN(t *testing.T, s string) store.LSN {
	t.Helper()
	l, err := store.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
