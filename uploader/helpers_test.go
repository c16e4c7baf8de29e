package uploader_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/s3"
)

const site = "branch-1"

var testSchema = delta.NewStructType(
	delta.NewField("id", delta.TypeLong, false),
	delta.NewField("payload", delta.TypeString, true),
)

// localTable is a Delta table written by the test, standing in for the
// applier's output.
type localTable struct {
	t       testing.TB
	name    string
	tbl     *delta.Table
	version int64
	nextID  int64
}

func newLocalTable(t testing.TB, root, name string) *localTable {
	t.Helper()
	tbl, err := delta.Create(t.Context(), filepath.Join(root, name), testSchema, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &localTable{t: t, name: name, tbl: tbl}
}

// commit adds one version with one data file of n rows, each with a payload
// of payloadBytes random characters.
func (l *localTable) commit(n, payloadBytes int) {
	l.t.Helper()
	rows := make([]delta.Row, n)
	for i := range rows {
		l.nextID++
		rows[i] = delta.Row{l.nextID, randomString(payloadBytes)}
	}
	add, err := delta.WriteDataFile(context.Background(), l.tbl.Path(), testSchema, nil, nil, rows, delta.WriteOptions{})
	if err != nil {
		l.t.Fatal(err)
	}
	v, err := l.tbl.Commit(context.Background(), l.version, []delta.Action{add})
	if err != nil {
		l.t.Fatal(err)
	}
	l.version = v
}

func randomString(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rand.N(len(letters))]
	}
	return string(b)
}

// backend is a replica under test.
type backend struct {
	name   string
	client uploader.ReplicaClient
	target string
	// download copies the remote table into a local directory and returns
	// it.
	download func(t testing.TB, table string) string
	// server is set for S3.
	server *s3test.Server
	bucket string
}

func fileBackend(t testing.TB) *backend {
	t.Helper()
	root := t.TempDir()
	c, err := file.New(filepath.Join(root, site))
	if err != nil {
		t.Fatal(err)
	}
	return &backend{
		name:   "file",
		client: c,
		target: "file://" + root + "/" + site,
		download: func(t testing.TB, table string) string {
			return filepath.Join(root, site, table)
		},
	}
}

func s3Backend(t testing.TB, srv *s3test.Server, mod ...func(*s3.Config)) *backend {
	t.Helper()
	bucket := srv.NewBucket()
	cfg := s3.Config{
		Endpoint:        srv.Endpoint(),
		Region:          s3test.Region,
		AccessKeyID:     s3test.AccessKey,
		SecretAccessKey: s3test.SecretKey,
		Bucket:          bucket,
		Prefix:          "lake/" + site,
		Retry:           s3.RetryPolicy{MaxRetries: 1, MinWait: 10e6, MaxWait: 50e6},
	}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := s3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &backend{
		name:   "s3",
		client: c,
		target: "s3://" + bucket + "/lake/" + site,
		server: srv,
		bucket: bucket,
		download: func(t testing.TB, table string) string {
			t.Helper()
			dir := t.TempDir()
			if err := srv.Download(context.Background(), bucket, "lake/"+site+"/"+table, dir); err != nil {
				t.Fatal(err)
			}
			return dir
		},
	}
}

func openDB(t testing.TB, dir string) *store.DB {
	t.Helper()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newUploader(t testing.TB, db *store.DB, b *backend, tablesRoot string, mod ...func(*uploader.Options)) *uploader.Uploader {
	t.Helper()
	opts := uploader.Options{
		Client:     b.client,
		DB:         db,
		Target:     b.target,
		Tables:     uploader.DirTables(tablesRoot),
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		MinBackoff: 20e6,
		MaxBackoff: 200e6,
	}
	for _, m := range mod {
		m(&opts)
	}
	u, err := uploader.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// rowsAt returns the rows of a table at a version, canonicalised and
// sorted.
func rowsAt(t testing.TB, path string, version int64) []string {
	t.Helper()
	tbl, err := delta.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tbl.SnapshotAt(context.Background(), version)
	if err != nil {
		t.Fatalf("snapshot %d of %s: %v", version, path, err)
	}
	rows, err := snap.ReadRows(context.Background())
	if err != nil {
		t.Fatalf("rows of %d of %s: %v", version, path, err)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r...)
	}
	slices.Sort(out)
	return out
}

// checkRemoteEqualsLocal downloads the remote table and checks that it has
// the local table's versions up to the remote's latest (at least
// minVersion), each with the same rows, and commit files identical to the
// local ones.
func checkRemoteEqualsLocal(t testing.TB, b *backend, local *localTable, minVersion int64) int64 {
	t.Helper()
	dir := b.download(t, local.name)
	rt, err := delta.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open remote %s: %v", local.name, err)
	}
	latest, err := rt.LatestVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if latest < minVersion || latest > local.version {
		t.Fatalf("remote %s is at version %d, want %d..%d", local.name, latest, minVersion, local.version)
	}
	for v := int64(0); v <= latest; v++ {
		name := filepath.Join(delta.LogDirName, delta.CommitFileName(v))
		lb, err1 := os.ReadFile(filepath.Join(local.tbl.Path(), name))
		rb, err2 := os.ReadFile(filepath.Join(dir, name))
		if err1 != nil || err2 != nil || string(lb) != string(rb) {
			t.Fatalf("commit %d of %s differs: %v %v", v, local.name, err1, err2)
		}
		if got, want := rowsAt(t, dir, v), rowsAt(t, local.tbl.Path(), v); !slices.Equal(got, want) {
			t.Fatalf("version %d of %s: remote has %d rows, local %d", v, local.name, len(got), len(want))
		}
	}
	return latest
}

// orderChecker is a hook that checks invariant 4 (docs/architecture.md) on
// every successful request: every data file and checkpoint of version N goes
// up before _delta_log/N.json, commits go up in order, and _last_checkpoint
// only after the commit of the checkpoint it names.
type orderChecker struct {
	t      testing.TB
	root   string // local tables root
	mu     sync.Mutex
	keys   map[string]bool
	commit map[string]int64 // table -> last commit uploaded
}

func newOrderChecker(t testing.TB, root string) *orderChecker {
	return &orderChecker{t: t, root: root, keys: map[string]bool{}, commit: map[string]int64{}}
}

func (o *orderChecker) hook(ctx context.Context, r request) error {
	if !r.After || (r.Op != "put" && r.Op != "complete-multipart") {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	table, rel, _ := strings.Cut(r.Key, "/")
	o.keys[r.Key] = true
	if v, ok := parseCommit(rel); ok {
		last, seen := o.commit[table]
		if !seen {
			last = -1
		}
		if v != last+1 && v > last {
			o.t.Errorf("commit %d of %s uploaded after %d", v, table, last)
		}
		o.commit[table] = max(last, v)
		tbl := delta.New(filepath.Join(o.root, table))
		actions, err := tbl.ReadCommit(ctx, v)
		if err != nil {
			o.t.Errorf("read local commit: %v", err)
			return nil
		}
		for _, a := range actions {
			add, ok := a.(*delta.Add)
			if !ok {
				continue
			}
			if !o.keys[table+"/"+add.Path] {
				o.t.Errorf("commit %d of %s uploaded before its file %s", v, table, add.Path)
			}
			if d := add.DeletionVector; d != nil && d.StorageType == delta.DeletionVectorStorageRelative {
				p, err := d.FilePath("")
				if err != nil || !o.keys[table+"/"+filepath.ToSlash(p)] {
					o.t.Errorf("commit %d of %s uploaded before its deletion vector file %s (%v)", v, table, p, err)
				}
			}
		}
		if _, err := os.Stat(filepath.Join(o.root, table, delta.LogDirName, delta.CheckpointFileName(v))); err == nil &&
			!o.keys[table+"/"+delta.LogDirName+"/"+delta.CheckpointFileName(v)] {
			// Allowed only when the checkpoint appeared after the commit
			// was read; in these tests commits and checkpoints are
			// written before the uploader runs, so it is an error.
			o.t.Errorf("commit %d of %s uploaded before its checkpoint", v, table)
		}
	}
	if rel == delta.LogDirName+"/"+delta.LastCheckpointName {
		if _, seen := o.commit[table]; !seen {
			o.t.Errorf("_last_checkpoint of %s uploaded before any commit", table)
		}
	}
	return nil
}

func parseCommit(rel string) (int64, bool) {
	name, ok := strings.CutPrefix(rel, delta.LogDirName+"/")
	if !ok || len(name) != 25 || !strings.HasSuffix(name, ".json") {
		return 0, false
	}
	var v int64
	_, err := fmt.Sscanf(name[:20], "%d", &v)
	return v, err == nil
}

// listRemote lists the keys of a remote table (S3 only).
func listRemote(t testing.TB, b *backend, prefix string) []string {
	t.Helper()
	var keys []string
	for obj := range b.server.Client().ListObjects(context.Background(), b.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys
}

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func testSHA256(data []byte) []byte {
	s := sha256.Sum256(data)
	return s[:]
}
