package uploader

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lakeside/lakeside/delta"
)

// Table is a local Delta table to replicate.
type Table struct {
	// Name is the table's directory name on the remote, such as
	// "public.items".
	Name string
	// Path is the local table root.
	Path string
}

// DirTables returns a table lister for Options.Tables that lists the
// subdirectories of root holding a _delta_log directory, named after the
// subdirectory (the applier's <state_dir>/tables/<name>/ layout).
func DirTables(root string) func(ctx context.Context) ([]Table, error) {
	return func(ctx context.Context) ([]Table, error) {
		names, err := delta.TableDirs(root)
		if err != nil {
			return nil, err
		}
		var tables []Table
		for _, name := range names {
			tables = append(tables, Table{Name: name, Path: filepath.Join(root, name)})
		}
		return tables, nil
	}
}

// localLog is what the local _delta_log holds.
type localLog struct {
	commits     map[int64]int64 // version -> size of N.json
	checkpoints map[int64]int64 // version -> size of N.checkpoint.parquet
	latest      int64           // newest commit, -1 when none
	// tail is the oldest version from which every commit up to latest is
	// local (latest+1 when there is none).
	tail int64
}

// readLocalLog lists the local _delta_log of a table.
func readLocalLog(root string) (*localLog, error) {
	entries, err := os.ReadDir(filepath.Join(root, delta.LogDirName))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	l := &localLog{commits: map[int64]int64{}, checkpoints: map[int64]int64{}, latest: -1}
	for _, e := range entries {
		name := e.Name()
		if len(name) < 20 {
			continue
		}
		v, err := strconv.ParseInt(name[:20], 10, 64)
		if err != nil {
			continue
		}
		suffix := name[20:]
		if suffix != ".json" && suffix != ".checkpoint.parquet" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		if suffix == ".json" {
			l.commits[v] = fi.Size()
			l.latest = max(l.latest, v)
		} else {
			l.checkpoints[v] = fi.Size()
		}
	}
	for l.tail = l.latest + 1; l.tail > 0; l.tail-- {
		if _, ok := l.commits[l.tail-1]; !ok {
			break
		}
	}
	return l, nil
}

// lastCheckpoint reads the version the local _last_checkpoint names, and its
// bytes; ok is false when there is none.
func readLastCheckpoint(root string) (version int64, data []byte, ok bool, err error) {
	data, err = os.ReadFile(filepath.Join(root, delta.LogDirName, delta.LastCheckpointName))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	var lc struct {
		Version *int64 `json:"version"`
	}
	if err := json.Unmarshal(data, &lc); err != nil || lc.Version == nil {
		return 0, nil, false, nil // being rewritten or foreign: try again later
	}
	return *lc.Version, data, true, nil
}

// fileJob is one data or checkpoint file to upload for a version.
type fileJob struct {
	version int64
	rel     string // slash-separated path relative to the table root
	local   string
}

// versionFiles returns the files a version's actions name (relative
// paths): the data files of its add and cdc actions, and the deletion
// vector files of its adds and removes (see dvFileJobs), each once, and
// the total size the log records for the data files.
func versionFiles(ctx context.Context, tbl *delta.Table, root string, version int64) ([]fileJob, int64, error) {
	actions, err := tbl.ReadCommit(ctx, version)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: read commit %d: %w", ErrLocal, version, err)
	}
	var jobs []fileJob
	var size int64
	var dvs []*delta.DeletionVectorDescriptor
	for _, a := range actions {
		var path string
		var n int64
		switch a := a.(type) {
		case *delta.Add:
			path, n = a.Path, a.Size
			dvs = append(dvs, a.DeletionVector)
		case *delta.AddCDC:
			// Change data files go up with the version that names them.
			path, n = a.Path, a.Size
		case *delta.Remove:
			// A tombstone's vector went up with the version that added
			// it: named again, it is found uploaded and skipped.
			dvs = append(dvs, a.DeletionVector)
			continue
		default:
			continue
		}
		j, err := dataFileJob(root, version, path)
		if err != nil {
			return nil, 0, err
		}
		jobs = append(jobs, j)
		size += n
	}
	dvJobs, err := dvFileJobs(root, version, dvs)
	if err != nil {
		return nil, 0, err
	}
	return append(jobs, dvJobs...), size, nil
}

// dvFileJobs returns the uploads of the deletion vector files that dvs
// (nil for a file without one) name, each once: those stored in a file of
// the table (storage type "u"; an inline vector is in the log, and one
// named by an absolute path is outside the table). They go up before the
// commit that names them, like data files.
func dvFileJobs(root string, version int64, dvs []*delta.DeletionVectorDescriptor) ([]fileJob, error) {
	var jobs []fileJob
	seen := map[string]bool{}
	for _, d := range dvs {
		if d == nil || d.StorageType != delta.DeletionVectorStorageRelative {
			continue
		}
		local, err := d.FilePath(root)
		if err != nil {
			return nil, fmt.Errorf("%w: version %d: %w", ErrLocal, version, err)
		}
		if seen[local] {
			continue
		}
		seen[local] = true
		rel, err := filepath.Rel(root, local)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("%w: version %d: deletion vector file %s is outside the table", ErrLocal, version, local)
		}
		jobs = append(jobs, fileJob{version: version, rel: filepath.ToSlash(rel), local: local})
	}
	return jobs, nil
}

// dataFileJob returns the upload of the data file an add action of version
// names by path, which must lie inside the table at root.
func dataFileJob(root string, version int64, path string) (fileJob, error) {
	local, err := delta.ResolvePath(root, path)
	if err != nil {
		return fileJob{}, fmt.Errorf("%w: version %d: %w", ErrLocal, version, err)
	}
	rel, err := filepath.Rel(root, local)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fileJob{}, fmt.Errorf("%w: version %d: file %s is outside the table", ErrLocal, version, path)
	}
	return fileJob{version: version, rel: filepath.ToSlash(rel), local: local}, nil
}

// commitsFrom reports whether the local log holds every commit from
// version v to the latest.
func (l *localLog) commitsFrom(v int64) bool { return v >= l.tail }

// startCheckpoint tells where a remote copy whose next version is from
// starts: restart is false when commit from is local (or there is nothing
// after it), and the copy goes on commit by commit. Otherwise commit from
// was removed locally, and the copy starts at checkpoint v, the oldest at
// or after from that every later commit is local for; v is -1 when there
// is none.
func (l *localLog) startCheckpoint(from int64) (v int64, restart bool) {
	if _, ok := l.commits[from]; ok || from > l.latest {
		return -1, false
	}
	v = -1
	for c := range l.checkpoints {
		if c >= from && (v < 0 || c < v) && l.commitsFrom(c+1) {
			v = c
		}
	}
	return v, true
}

// checksum returns the SHA-256 of size bytes of r. It is the checksum the
// uploader sends with every body and the remote verifies; an MD5 as well
// would cost a second hash of every byte on a small machine and check
// nothing more.
func checksum(r io.Reader, size int64) ([]byte, error) {
	s := sha256.New()
	n, err := io.Copy(s, io.LimitReader(r, size))
	if err != nil {
		return nil, err
	}
	if n != size {
		return nil, fmt.Errorf("read %d bytes, want %d", n, size)
	}
	return s.Sum(nil), nil
}

// sameContent reports whether two readers hold the same bytes.
func sameContent(a, b io.Reader) (bool, error) {
	ba, bb := bufio.NewReaderSize(a, 64<<10), bufio.NewReaderSize(b, 64<<10)
	bufA, bufB := make([]byte, 32<<10), make([]byte, 32<<10)
	for {
		na, errA := io.ReadFull(ba, bufA)
		nb, errB := io.ReadFull(bb, bufB)
		if na != nb || !slices.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		endA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		endB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		if errA != nil && !endA {
			return false, errA
		}
		if errB != nil && !endB {
			return false, errB
		}
		if endA || endB {
			return endA == endB, nil
		}
	}
}
