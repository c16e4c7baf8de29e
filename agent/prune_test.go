package agent

import (
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
)

// TestPruneDeletesOnlyWhatIsUploaded vacuums with a local retention, with
// S3 stopped and then running: a data file goes locally only once it is on
// S3, never from S3; the mirror keeps its latest version, the changelog
// keeps nothing written before the local retention.
func TestPruneDeletesOnlyWhatIsUploaded(t *testing.T) {
	ctx := t.Context()
	srv := s3test.Start(t)
	bucket := srv.NewBucket()
	stateDir := t.TempDir()
	cfg := &config.Config{StateDir: stateDir,
		Delta: config.Delta{TablesDir: filepath.Join(stateDir, "tables"), VacuumRetention: config.DefaultVacuumRetention,
			LocalRetention: time.Hour},
		Replica: uploader.Config{URL: "s3://" + bucket + "/lake", Site: "branch-1", Endpoint: srv.Endpoint(),
			Region: s3test.Region, AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	now := time.Now()
	mirror := newVacuumTable(t, filepath.Join(cfg.Delta.TablesDir, "public.items"), now.Add(-6*time.Hour))
	changes := newVacuumTable(t, filepath.Join(cfg.Delta.TablesDir, "public.items_changes"), now.Add(-6*time.Hour))
	for h := 5; h >= 3; h-- {
		mirror.rewrite(now.Add(-time.Duration(h) * time.Hour))
		changes.rewrite(now.Add(-time.Duration(h) * time.Hour))
	}
	pruned := func(rep *VacuumReport) map[string]int {
		out := map[string]int{}
		for _, tv := range rep.Tables {
			if tv.Error != "" {
				t.Fatalf("%s: %s", tv.Name, tv.Error)
			}
			if tv.Files != 0 {
				t.Fatalf("%s: vacuum deleted %d files inside its retention", tv.Name, tv.Files)
			}
			out[tv.Name] = tv.Pruned
		}
		return out
	}

	srv.Stop()
	rep, err := RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := pruned(rep); got["public.items"] != 0 || got["public.items_changes"] != 0 {
		t.Fatalf("pruned with nothing uploaded and S3 down: %v", got)
	}
	for v := 1; v <= 3; v++ {
		if !mirror.exists(v) || !changes.exists(v) {
			t.Fatalf("file of version %d deleted before it was uploaded", v)
		}
	}

	srv.Restart()
	if err := syncOnce(t, cfg); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	mirror.rewrite(now.Add(-2 * time.Hour)) // version 4, not uploaded
	changes.rewrite(now.Add(-2 * time.Hour))
	rep, err = RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := pruned(rep); got["public.items"] != 3 || got["public.items_changes"] != 3 {
		t.Fatalf("pruned %v once versions 1..3 are uploaded, want 3 files of each", got)
	}
	for v := 1; v <= 3; v++ {
		if mirror.exists(v) || changes.exists(v) {
			t.Errorf("uploaded file of version %d kept", v)
		}
	}
	if !mirror.exists(4) || !changes.exists(4) {
		t.Fatal("the file of version 4 was pruned while S3 is down and it is not uploaded")
	}

	srv.Restart()
	if err := syncOnce(t, cfg); err != nil {
		t.Fatal(err)
	}
	rep, err = RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := pruned(rep); got["public.items"] != 0 || got["public.items_changes"] != 1 {
		t.Fatalf("pruned %v once version 4 is uploaded, want only the changelog's", got)
	}
	if !mirror.exists(4) {
		t.Error("the mirror's latest file was pruned: the applier merges into it")
	}
	for _, vt := range []*vacuumTable{mirror, changes} {
		name := filepath.Base(vt.tbl.Path())
		for v := 1; v <= 4; v++ {
			_, err := srv.Client().StatObject(ctx, bucket, "lake/branch-1/"+name+"/"+vt.files[v], minio.StatObjectOptions{})
			if err != nil {
				t.Errorf("%s: file of version %d not on S3 after pruning: %v", name, v, err)
			}
		}
	}
	if i := slices.IndexFunc(rep.Tables, func(tv TableVacuum) bool { return tv.Name == "public.items_changes" }); rep.Tables[i].PrunedPaths[0] != changes.files[4] {
		t.Errorf("pruned paths %v, want %s", rep.Tables[i].PrunedPaths, changes.files[4])
	}

	// Once the vacuum retention no longer covers versions 1..3, the
	// replica deletes their files, pruned locally long before, as it
	// would have had they stayed.
	cfg.Delta.VacuumRetention = time.Millisecond
	rep, err = RunVacuum(ctx, cfg, false, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range rep.Tables {
		if tv.RemoteOnly != 3 || tv.Files != 0 {
			t.Errorf("%s: vacuum of pruned files: %d for the replica only, %d locally; want 3 and 0", tv.Name, tv.RemoteOnly, tv.Files)
		}
	}
	if rep.RemoteDeleted != 6 {
		t.Errorf("replica deleted %d files, want 6 (%s)", rep.RemoteDeleted, rep.RemoteError)
	}
	for _, vt := range []*vacuumTable{mirror, changes} {
		name := filepath.Base(vt.tbl.Path())
		for v := 1; v <= 4; v++ {
			_, err := srv.Client().StatObject(ctx, bucket, "lake/branch-1/"+name+"/"+vt.files[v], minio.StatObjectOptions{})
			if v < 4 && err == nil {
				t.Errorf("%s: file of version %d still on S3 past the vacuum retention", name, v)
			}
			if v == 4 && err != nil {
				t.Errorf("%s: the current file was deleted from S3: %v", name, err)
			}
		}
	}
}
