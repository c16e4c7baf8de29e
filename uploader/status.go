package uploader

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// Backlog is what is committed locally and not yet on the remote.
type Backlog struct {
	// Versions and Bytes are the totals over all tables.
	Versions int64
	Bytes    int64
	Tables   map[string]TableBacklog
}

// TableBacklog is the backlog of one table.
type TableBacklog struct {
	Versions int64
	Bytes    int64
}

// Status is a snapshot of the uploader's state, for `lakeside status` and
// metrics.
type Status struct {
	Online bool
	// OfflineSince is when the remote became unreachable (zero when
	// online).
	OfflineSince time.Time
	LastError    string
	// Requests counts requests sent to the remote and Failures those that
	// failed (unreachable, refused, broken off); Versions counts commits
	// uploaded; BytesUploaded counts bytes of files and commits uploaded.
	// Requests/Versions is the request cost per committed version.
	Requests int64
	Failures int64
	// Stalls counts the failures that were stalls: requests cancelled
	// because nothing of them moved for a while (ErrStalled).
	Stalls        int64
	Versions      int64
	BytesUploaded int64
	Tables        []TableStatus
}

// TableStatus is the replication state of one table.
type TableStatus struct {
	Name            string
	LocalVersion    int64
	RemoteVersion   int64
	BacklogVersions int64
	BacklogBytes    int64
	LastSuccess     time.Time
	LastError       string
	// Stopped says why replication of the table stopped, if it did.
	Stopped string
}

// Backlog returns the current backlog. It is updated on every pass and on
// Notify while offline.
func (u *Uploader) Backlog() Backlog {
	u.mu.Lock()
	defer u.mu.Unlock()
	b := Backlog{Tables: map[string]TableBacklog{}}
	for name, ts := range u.tables {
		tb := TableBacklog{Versions: int64(len(ts.pending))}
		for _, n := range ts.pending {
			tb.Bytes += n
		}
		b.Tables[name] = tb
		b.Versions += tb.Versions
		b.Bytes += tb.Bytes
	}
	return b
}

func (u *Uploader) backlogLocked() (versions, bytes int64) {
	for _, ts := range u.tables {
		versions += int64(len(ts.pending))
		for _, n := range ts.pending {
			bytes += n
		}
	}
	return versions, bytes
}

// Status returns the uploader's state.
func (u *Uploader) Status() Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := Status{
		Online:        u.online,
		OfflineSince:  u.offlineSince,
		LastError:     u.lastError,
		Requests:      u.requests.Load(),
		Failures:      u.failures.Load(),
		Stalls:        u.stalls.Load(),
		Versions:      u.versions.Load(),
		BytesUploaded: u.bytes.Load(),
	}
	for _, ts := range u.tables {
		t := TableStatus{
			Name:            ts.name,
			LocalVersion:    ts.localVersion,
			RemoteVersion:   ts.remoteVersion,
			BacklogVersions: int64(len(ts.pending)),
			LastSuccess:     ts.lastSuccess,
			LastError:       ts.lastError,
			Stopped:         ts.stopped,
		}
		for _, n := range ts.pending {
			t.BacklogBytes += n
		}
		s.Tables = append(s.Tables, t)
	}
	slices.SortFunc(s.Tables, func(a, b TableStatus) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// updateBacklog records a table's local and remote versions and the sizes
// of the versions in between, reading only commits not seen before. A
// remote copy that starts from a local checkpoint (see startFromCheckpoint)
// has the checkpoint and the data files of its snapshot as its first
// version, and nothing before it.
func (u *Uploader) updateBacklog(ctx context.Context, t Table, l *localLog, st store.UploadState) {
	first := st.RemoteVersion + 1
	start, restart := l.startCheckpoint(first)
	if restart && start >= 0 {
		first = start
	}
	u.mu.Lock()
	ts := u.tableLocked(t.Name)
	ts.localVersion, ts.remoteVersion = l.latest, st.RemoteVersion
	ts.lastSuccess, ts.stopped = st.LastSuccess, st.Stopped
	for v := range ts.pending {
		if v < first {
			delete(ts.pending, v)
		}
	}
	var missing []int64
	for v := first; v <= l.latest; v++ {
		if _, ok := ts.pending[v]; !ok {
			missing = append(missing, v)
		}
	}
	u.mu.Unlock()
	if len(missing) == 0 {
		return
	}
	tbl := delta.New(t.Path)
	sizes := make(map[int64]int64, len(missing))
	for _, v := range missing {
		if restart && v == start {
			n, err := snapshotBytes(ctx, tbl, v)
			if err != nil {
				break
			}
			sizes[v] = n + l.checkpoints[v]
			continue
		}
		_, n, err := versionFiles(ctx, tbl, t.Path, v)
		if err != nil {
			break
		}
		sizes[v] = n + l.commits[v] + l.checkpoints[v]
	}
	u.mu.Lock()
	for v, n := range sizes {
		if v > ts.remoteVersion {
			ts.pending[v] = n
		}
	}
	u.mu.Unlock()
}

// snapshotBytes returns the size of the data files of a table's snapshot
// at version.
func snapshotBytes(ctx context.Context, tbl *delta.Table, version int64) (int64, error) {
	snap, err := tbl.SnapshotAt(ctx, version)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, add := range snap.Files() {
		n += add.Size
	}
	return n, nil
}

// setRemote records a table's progress in memory.
func (u *Uploader) setRemote(table string, st store.UploadState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ts := u.tableLocked(table)
	ts.remoteVersion, ts.lastSuccess, ts.stopped = st.RemoteVersion, st.LastSuccess, st.Stopped
	for v := range ts.pending {
		if v <= st.RemoteVersion {
			delete(ts.pending, v)
		}
	}
}

// commitVersion parses "_delta_log/<20 digits>.json".
func commitVersion(rel string) (int64, bool) {
	name, ok := strings.CutPrefix(rel, delta.LogDirName+"/")
	if !ok || len(name) != 25 || !strings.HasSuffix(name, ".json") {
		return 0, false
	}
	v, err := strconv.ParseInt(name[:20], 10, 64)
	return v, err == nil
}
