package agent

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/deltatest"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
)

// vacuumTable is a local table whose every version replaces the data file,
// committed days ago so that vacuum has expired tombstones.
type vacuumTable struct {
	t     *testing.T
	tbl   *delta.Table
	files []string // files[v] was added by version v (v >= 1)
}

var vacuumSchema = delta.NewStructType(delta.NewField("id", delta.TypeLong, false))

func newVacuumTable(t *testing.T, path string, created time.Time) *vacuumTable {
	t.Helper()
	tbl, err := delta.Create(t.Context(), path, vacuumSchema, nil, nil,
		&delta.CommitInfo{Operation: "CREATE TABLE", Timestamp: created.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	return &vacuumTable{t: t, tbl: tbl, files: []string{""}}
}

func (v *vacuumTable) rewrite(at time.Time) {
	v.t.Helper()
	v.files = append(v.files, deltatest.Rewrite(v.t, v.tbl, at, delta.Row{int64(len(v.files))}))
}

func (v *vacuumTable) local(rel string) string {
	return filepath.Join(v.tbl.Path(), filepath.FromSlash(rel))
}

func (v *vacuumTable) exists(version int) bool {
	_, err := os.Stat(v.local(v.files[version]))
	return err == nil
}

// syncOnce runs one upload pass on the state file, as the agent would.
func syncOnce(t *testing.T, cfg *config.Config) error {
	t.Helper()
	db, err := store.Open(cfg.StateDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	up, err := openUploader(cfg, db, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return up.SyncOnce(t.Context())
}

// TestVacuumNeverDeletesWhatIsNotUploaded vacuums, with S3 stopped, a table
// whose every version is long past the retention: a file is deleted locally
// only once the versions that need it are on S3, and S3 deletes the vacuumed
// files once it has the version that no longer needs them.
func TestVacuumNeverDeletesWhatIsNotUploaded(t *testing.T) {
	ctx := t.Context()
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	stateDir := t.TempDir()
	cfg := &config.Config{StateDir: stateDir,
		Delta: config.Delta{TablesDir: filepath.Join(stateDir, "tables"), VacuumRetention: config.DefaultVacuumRetention},
		Replica: uploader.Config{URL: "s3://" + bucket + "/lake", Site: "branch-1", Endpoint: srv.Endpoint(),
			Region: s3test.Region, AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	now := time.Now()
	vt := newVacuumTable(t, filepath.Join(cfg.Delta.TablesDir, "public.items"), now.AddDate(0, 0, -40))
	for d := range 3 {
		vt.rewrite(now.AddDate(0, 0, -30+d))
	}

	srv.Stop()
	rep, err := RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Agent || len(rep.Tables) != 1 || rep.Tables[0].Files != 0 {
		t.Fatalf("vacuum with nothing uploaded and S3 down: %+v", rep)
	}
	for v := 1; v <= 3; v++ {
		if !vt.exists(v) {
			t.Fatalf("file of version %d deleted before it was uploaded", v)
		}
	}

	srv.Restart()
	if err := syncOnce(t, cfg); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	vt.rewrite(now.AddDate(0, 0, -27)) // version 4, not uploaded
	rep, err = RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Tables[0]; got.Files != 3 || got.KeptFrom != 4 {
		t.Fatalf("vacuum after versions 1..3 were uploaded: %+v", got)
	}
	if !vt.exists(4) {
		t.Fatal("the file of version 4 was deleted while S3 is down and it is not uploaded")
	}
	remote := func(v int) bool {
		_, err := srv.Client().StatObject(ctx, bucket, "lake/branch-1/public.items/"+vt.files[v], minio.StatObjectOptions{})
		return err == nil
	}
	srv.Restart()
	if !remote(1) || !remote(3) {
		t.Fatal("S3 deleted files before it had version 4")
	}
	if err := syncOnce(t, cfg); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 3; v++ {
		if remote(v) {
			t.Errorf("file of version %d still on S3 after it reached version 4", v)
		}
	}
	if !remote(4) {
		t.Error("the current file was deleted from S3")
	}
}

// TestVacuumThroughRunningAgent checks that `lakeside vacuum` asks the agent
// that holds the state file, through the control socket.
// TestVacuumTotalsCountFailures: a failed vacuum counts as a run and a
// failure, adds what it deleted before failing, and is not a success.
func TestVacuumTotalsCountFailures(t *testing.T) {
	var v vacuumTotals
	ok := time.Unix(1000, 0)
	v.add(&VacuumReport{Tables: []TableVacuum{{Files: 2, LogFiles: 1, Bytes: 300}}}, nil, ok)
	v.add(&VacuumReport{Tables: []TableVacuum{{Files: 1, Bytes: 50}, {Error: "read log"}}}, errors.New("table b: read log"), ok.Add(time.Hour))
	v.add(nil, errors.New("list tables"), ok.Add(2*time.Hour))
	got := v.counts()
	if got.runs != 3 || got.failures != 2 || got.files != 3 || got.logFiles != 1 || got.bytes != 350 || !got.lastSuccess.Equal(ok) {
		t.Fatalf("totals: %+v", got)
	}
}

func TestVacuumThroughRunningAgent(t *testing.T) {
	stateDir := t.TempDir()
	cfg := &config.Config{StateDir: stateDir,
		Delta: config.Delta{TablesDir: filepath.Join(stateDir, "tables"), VacuumRetention: config.DefaultVacuumRetention}}
	now := time.Now()
	vt := newVacuumTable(t, filepath.Join(cfg.Delta.TablesDir, "public.items"), now.AddDate(0, 0, -40))
	vt.rewrite(now.AddDate(0, 0, -30))
	vt.rewrite(now.AddDate(0, 0, -29))

	db, err := store.Open(stateDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a := &Agent{cfg: cfg, log: slog.New(slog.NewTextHandler(t.Output(), nil)), db: db}
	ln, err := net.Listen("unix", filepath.Join(stateDir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: a.controlHandler()}
	go srv.Serve(ln)
	defer srv.Close()

	rep, err := RunVacuum(t.Context(), cfg, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Agent || !rep.DryRun || rep.Tables[0].Files != 1 || !vt.exists(1) {
		t.Fatalf("dry run through the agent: %+v", rep)
	}
	if v := a.vacuumed.counts(); v.runs != 0 {
		t.Fatalf("a dry run counted in the vacuum metrics: %+v", v)
	}
	rep, err = RunVacuum(t.Context(), cfg, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Agent || rep.Tables[0].Files != 1 || vt.exists(1) || !vt.exists(2) {
		t.Fatalf("vacuum through the agent: %+v", rep)
	}
	if v := a.vacuumed.counts(); v.runs != 1 || v.failures != 0 || v.files != 1 || v.bytes != rep.Tables[0].Bytes || v.bytes <= 0 || v.lastSuccess.IsZero() {
		t.Fatalf("vacuum metrics after one vacuum: %+v", v)
	}

	srv.Close()
	if _, err := RunVacuum(t.Context(), cfg, false, nil); err == nil {
		t.Fatal("vacuum succeeded while an agent holds the state file without answering")
	}
}

// TestParseVacuumQuery checks that the control socket's vacuum takes only
// dry_run=true, dry_run=false or no query, and refuses anything else.
func TestParseVacuumQuery(t *testing.T) {
	for raw, want := range map[string]bool{"": false, "dry_run=false": false, "dry_run=true": true} {
		if got, err := parseVacuumQuery(raw); err != nil || got != want {
			t.Errorf("parseVacuumQuery(%q) = %v, %v; want %v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"dry_run=maybe", "dry_run=", "dry_run", "dry_run=1", "dry_run=True", "dry_run=true&dry_run=true",
		"dryrun=true", "dry_run=true&force=1", "dry_run=%zz", "dry_run=false;dry_run=true"} {
		if got, err := parseVacuumQuery(raw); err == nil {
			t.Errorf("parseVacuumQuery(%q) = %v, want an error", raw, got)
		}
	}
}
