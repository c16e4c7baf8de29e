package uploader_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// TestFleetTablePosition publishes a local table whose commits record
// their source position as the applier's do (commitInfo lakeside.lastLSN),
// with compactions and a commit that record none, and reads the fleet
// table's status after each Sync: the position is the newest one the
// published versions record, also when the snapshot's last version is a
// compaction, and a range without one leaves it as it was. The agent
// restarts midway under a new run: its positions in the log are its own.
func TestFleetTablePosition(t *testing.T) {
	ctx := context.Background()
	client, err := file.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := newSiteTable(t, 0)
	tmp := filepath.Join(t.TempDir(), "fleet")
	opts := fleet.Options{Site: "site-0", RunID: "run-1"}
	ft := uploader.NewFleetTable(client, l.root, "mirror", tmp, opts)
	sync := func(step string, wantVersion, wantLSN int64) {
		t.Helper()
		held, err := ft.Sync(ctx)
		if err != nil || held != wantVersion {
			t.Fatalf("%s: sync to %d, %v; want %d", step, held, err, wantVersion)
		}
		st, err := fleet.ReadStatus(ctx, uploader.FleetStore(client), "public.items")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if len(st.Sites) != 1 || st.Sites[0].LocalVersion != wantVersion || st.Sites[0].LSN != wantLSN {
			t.Fatalf("%s: status %+v; want local version %d at LSN %X", step, st.Sites, wantVersion, wantLSN)
		}
	}

	l.commitRows(t, "0/100")
	l.commitRows(t, "0/200")
	l.compact(t)
	sync("a snapshot ending in a compaction", 3, 0x200)

	l.commitRows(t, "0/300")
	l.compact(t)
	sync("a range, then a compaction in a range of its own", 5, 0x300)

	opts.RunID, opts.PastRuns = "run-2", []string{opts.RunID}
	ft = uploader.NewFleetTable(client, l.root, "mirror", tmp, opts)
	l.commitRows(t, "1/0")
	l.commitRows(t, "")
	sync("after a restart, a range whose last commit has no position", 7, 1<<32)
}

// commitRows commits one row to the local table, with lastLSN in its
// commitInfo as the applier records it, or none when lastLSN is empty.
func (l *siteTable) commitRows(t *testing.T, lastLSN string) {
	t.Helper()
	ctx := context.Background()
	snap, err := l.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add, err := snap.WriteFile(ctx, nil, []delta.Row{{l.next, "v"}}, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.next++
	ci := &delta.CommitInfo{Operation: "WRITE"}
	if lastLSN != "" {
		ci.Extra = map[string]any{"lakeside": map[string]any{"firstLSN": lastLSN, "lastLSN": lastLSN}}
	}
	if _, err := l.tbl.Commit(ctx, snap.Version(), []delta.Action{add, ci}); err != nil {
		t.Fatal(err)
	}
}

// compact merges the local table's first two files into one, changing no
// data, as the agent's compaction does: its commit records no position.
func (l *siteTable) compact(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	snap, err := l.tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files := snap.Files()
	if len(files) < 2 {
		t.Fatalf("%d files to compact", len(files))
	}
	var rows []delta.Row
	var acts []delta.Action
	for _, f := range files[:2] {
		rs, err := delta.ReadDataFile(ctx, l.root, f, snap.Schema())
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, rs...)
		acts = append(acts, delta.RemoveOf(f, time.Now().UnixMilli(), false))
	}
	add, err := snap.WriteFile(ctx, nil, rows, delta.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	add.DataChange = false
	if _, err := l.tbl.Commit(ctx, snap.Version(), append(acts, add, &delta.CommitInfo{Operation: "OPTIMIZE"})); err != nil {
		t.Fatal(err)
	}
}
