package fleet_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// dirStore returns a fleet store in a fresh directory.
func dirStore(t *testing.T) fleet.Store {
	t.Helper()
	c, err := file.New(filepath.Join(t.TempDir(), "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	return uploader.FleetStore(c)
}

// TestConflictRules puts a foreign commit at the version site a is about to
// take, and checks what a's commit then does: follows it at the next
// version, or stops with ErrConflict, by the rules of docs/fleet.md.
func TestConflictRules(t *testing.T) {
	proto, md := fleetSchema(t)
	siteVal := func(s string) map[string]*string {
		st, _ := md.Schema()
		return map[string]*string{st.Fields[0].PhysicalName(): &s}
	}
	dropped := func() *delta.Metadata {
		st, _ := md.Schema()
		next, err := md.WithSchema(delta.NewStructType(st.Fields[0], st.Fields[1]))
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	retyped := func() *delta.Metadata {
		st, _ := md.Schema()
		f := *st.Fields[1]
		f.Type = delta.TypeString
		next, err := md.WithSchema(delta.NewStructType(st.Fields[0], &f, st.Fields[2]))
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	other := func(acts ...delta.Action) []delta.Action {
		return append(acts, &delta.CommitInfo{Operation: "WRITE", Extra: map[string]any{"lakeside": map[string]any{"site": "b", "run": "run-b"}}})
	}
	cases := []struct {
		name     string
		winner   func() []delta.Action
		conflict bool
	}{
		{"another site's add", func() []delta.Action {
			return other(&delta.Add{Path: "site=b/x.parquet", PartitionValues: siteVal("b"), DataChange: true})
		}, false},
		{"another site's remove", func() []delta.Action {
			return other(&delta.Remove{Path: "site=b/y.parquet", PartitionValues: siteVal("b"), DataChange: true})
		}, false},
		{"another site's appId", func() []delta.Action {
			return other(&delta.Txn{AppID: "lakeside-fleet/b/public.items/mirror/x", Version: 3})
		}, false},
		{"a column added", func() []delta.Action {
			next, _, err := addColumn("n")(md, proto)
			if err != nil {
				t.Fatal(err)
			}
			return other(proto, next)
		}, false},
		{"an add in its partition", func() []delta.Action {
			return other(&delta.Add{Path: "site=a/x.parquet", PartitionValues: siteVal("a"), DataChange: true})
		}, true},
		{"a remove of its file, by path", func() []delta.Action {
			return other(&delta.Remove{Path: "site=a/f0.parquet", DataChange: true})
		}, true},
		{"its appId from another run", func() []delta.Action {
			return other(&delta.Txn{AppID: "lakeside-fleet/a/public.items/mirror/local-a", Version: 9})
		}, true},
		{"an appId of its site for another local table", func() []delta.Action {
			return other(&delta.Txn{AppID: "lakeside-fleet/a/public.items/mirror/older", Version: 9})
		}, true},
		{"a column dropped", func() []delta.Action { return other(dropped()) }, true},
		{"a column retyped", func() []delta.Action { return other(retyped()) }, true},
		{"the table replaced", func() []delta.Action {
			_, fresh := fleetSchema(t)
			return other(fresh)
		}, true},
		{"a writer feature it does not know", func() []delta.Action {
			return other(&delta.Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
				ReaderFeatures: []string{delta.ColumnMappingFeature}, WriterFeatures: []string{delta.ColumnMappingFeature, "rowTracking"}})
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			store := dirStore(t)
			a, err := fleet.Create(ctx, store, "public.items", proto, md, fleet.Options{Site: "a", RunID: "run-a"})
			if err != nil {
				t.Fatal(err)
			}
			appID := a.AppID("mirror", "local-a")
			if _, err := a.Commit(ctx, fleet.Range{AppID: appID, Version: 1, Operation: "WRITE",
				Actions: []delta.Action{&delta.Add{Path: a.SiteDir() + "f0.parquet", PartitionValues: a.SitePartition(), DataChange: true}}}); err != nil {
				t.Fatal(err)
			}
			data, err := delta.EncodeCommit(c.winner(), time0)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.PutIfAbsent(ctx, "public.items/_delta_log/"+delta.CommitFileName(a.Version()+1), data); err != nil {
				t.Fatal(err)
			}
			v, err := a.Commit(ctx, fleet.Range{AppID: appID, Version: 2, Operation: "WRITE",
				Actions: []delta.Action{&delta.Add{Path: a.SiteDir() + "f1.parquet", PartitionValues: a.SitePartition(), DataChange: true}}})
			switch {
			case c.conflict && !errors.Is(err, fleet.ErrConflict):
				t.Fatalf("commit after it: version %d, %v; want ErrConflict", v, err)
			case !c.conflict && err != nil:
				t.Fatalf("commit after it: %v", err)
			case !c.conflict && v != 3:
				t.Fatalf("commit after it at version %d, want 3", v)
			}
			if c.conflict {
				t.Log(err)
			}
		})
	}
}

// TestLostPutsSettle commits through puts whose outcome is lost: a range
// whose put landed is found as the site's own and not committed again; an
// earlier range found landed is reported (ErrLanded) with the progress
// the caller resumes from; a range the fleet holds returns its version.
func TestLostPutsSettle(t *testing.T) {
	ctx := context.Background()
	proto, md := fleetSchema(t)
	store := dirStore(t)
	lossy := &faultyStore{Store: store, after: func(n int) bool { return n == 2 || n == 3 }}
	a, err := fleet.Create(ctx, lossy, "public.items", proto, md, fleet.Options{Site: "a", RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	appID := a.AppID("changelog", "local")
	add := func(name string) []delta.Action {
		return []delta.Action{&delta.Add{Path: a.SiteDir() + name, PartitionValues: a.SitePartition(), DataChange: true}}
	}
	// Put 2 lands unheard: the commit reads version 1 back and is done.
	v, err := a.Commit(ctx, fleet.Range{AppID: appID, Version: 5, Actions: add("a.parquet"), Operation: "WRITE"})
	if err != nil || v != 1 {
		t.Fatalf("commit through a lost put: %d, %v", v, err)
	}
	if v, err := a.Commit(ctx, fleet.Range{AppID: appID, Version: 5, Actions: add("a.parquet"), Operation: "WRITE"}); err != nil || v != 1 {
		t.Fatalf("the same range again: %d, %v; want version 1", v, err)
	}
	// A new run of the site that did not hear of range 8 landing.
	b, err := fleet.Open(ctx, store, "public.items", fleet.Options{Site: "a", RunID: "run-2", PastRuns: []string{"run-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, fleet.Range{AppID: appID, Version: 8, Actions: add("b.parquet"), Operation: "WRITE"}); err != nil {
		t.Fatal(err)
	}
	_, err = b.Commit(ctx, fleet.Range{AppID: appID, Version: 9, Actions: add("c.parquet"), Operation: "WRITE"})
	if !errors.Is(err, fleet.ErrLanded) {
		t.Fatalf("commit over a range landed unheard: %v, want ErrLanded", err)
	}
	if local, fleetV, ok := b.Progress(appID); !ok || local != 8 || fleetV != 2 {
		t.Fatalf("progress after ErrLanded: %d at %d (%v), want 8 at 2", local, fleetV, ok)
	}
	// A clone of the site's state (a run it does not know) stops it.
	if _, err := fleet.Open(ctx, store, "public.items", fleet.Options{Site: "a", RunID: "run-x"}); !errors.Is(err, fleet.ErrConflict) {
		t.Fatalf("open by a run that is not the site's: %v, want ErrConflict", err)
	}
}
