package uploader_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// TestUploadersKeepToTheirLayout points a site-layout uploader and a
// fleet-layout uploader at one replica URL: the first to write claims its
// layout, and the other replicates nothing there, with ErrLayoutMismatch
// saying what to change.
func TestUploadersKeepToTheirLayout(t *testing.T) {
	ctx := context.Background()
	url := t.TempDir()
	root, err := file.New(url)
	if err != nil {
		t.Fatal(err)
	}
	siteClient, err := file.New(filepath.Join(url, "branch1"))
	if err != nil {
		t.Fatal(err)
	}
	tables := t.TempDir()
	local := newLocalTable(t, tables, "public.items")
	local.commit(10, 20)

	site := newUploader(t, openDB(t, t.TempDir()), &backend{client: siteClient, target: "file://" + url + "/branch1"}, tables,
		func(o *uploader.Options) { o.Root, o.Layout = root, uploader.LayoutSite })
	if err := site.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := uploader.ReadLayout(ctx, root); err != nil || got != uploader.LayoutSite {
		t.Fatalf("layout after the site uploader's pass: %q, %v", got, err)
	}

	fleetUp := newUploader(t, openDB(t, t.TempDir()), &backend{client: root, target: "fleet:file://" + url + "#branch2"}, tables,
		func(o *uploader.Options) {
			o.Root, o.Layout = root, uploader.LayoutFleet
			o.Fleet = &uploader.FleetOptions{Site: "branch2", RunID: "run", ScratchDir: t.TempDir()}
		})
	err = fleetUp.SyncOnce(ctx)
	if !errors.Is(err, uploader.ErrLayoutMismatch) {
		t.Fatalf("fleet uploader on a site replica: %v, want ErrLayoutMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(url, "public.items")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fleet uploader wrote a fleet table where site tables are: %v", err)
	}
	if _, err := fleet.Open(ctx, uploader.FleetStore(root), "public.items", fleet.Options{Site: "x", RunID: "y"}); !errors.Is(err, fleet.ErrNotExist) {
		t.Errorf("a fleet table exists: %v", err)
	}
}
