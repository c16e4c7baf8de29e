package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LogDirName is the name of the transaction log directory inside a table.
const LogDirName = "_delta_log"

// LastCheckpointName is the name of the file pointing at the newest checkpoint.
const LastCheckpointName = "_last_checkpoint"

// CommitFileName returns the name of the commit file of a version, such as
// "00000000000000000007.json".
func CommitFileName(version int64) string { return fmt.Sprintf("%020d.json", version) }

// CheckpointFileName returns the name of the classic checkpoint file of a
// version, such as "00000000000000000010.checkpoint.parquet".
func CheckpointFileName(version int64) string {
	return fmt.Sprintf("%020d.checkpoint.parquet", version)
}

// CheckpointPartFileName returns the name of part part (from 1) of a
// multi-part checkpoint of parts files, such as
// "00000000000000000010.checkpoint.0000000001.0000000003.parquet".
func CheckpointPartFileName(version int64, part, parts int) string {
	return fmt.Sprintf("%020d.checkpoint.%010d.%010d.parquet", version, part, parts)
}

// logFile is one file of the log directory.
type logFile struct {
	version int64
	path    string
	modTime time.Time
}

// checkpointRef is a complete checkpoint of one version: a single classic
// file or all the parts of a multi-part checkpoint, in part order.
type checkpointRef struct {
	version int64
	paths   []string
}

// logListing is what the log directory holds.
type logListing struct {
	commits     map[int64]logFile
	checkpoints map[int64]checkpointRef
	// minCommit and maxVersion are -1 when there is no such file.
	minCommit  int64
	maxVersion int64
}

// listLog lists the log directory of a table.
func listLog(ctx context.Context, logDir string) (*logListing, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(logDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list log: %w: %s has no %s", ErrNotATable, filepath.Dir(logDir), LogDirName)
		}
		return nil, fmt.Errorf("list log: %w", err)
	}
	l := &logListing{commits: map[int64]logFile{}, checkpoints: map[int64]checkpointRef{}, minCommit: -1, maxVersion: -1}
	type partSet struct {
		total int
		parts map[int]string
	}
	multi := map[int64]map[int]*partSet{}
	for _, e := range entries {
		name := e.Name()
		if len(name) < 21 || name[20] != '.' || e.IsDir() {
			continue
		}
		v, err := strconv.ParseInt(name[:20], 10, 64)
		if err != nil || v < 0 {
			continue
		}
		rest := name[21:]
		full := filepath.Join(logDir, name)
		switch {
		case rest == "json":
			info, err := e.Info()
			if err != nil {
				continue // removed while listing
			}
			l.commits[v] = logFile{version: v, path: full, modTime: info.ModTime()}
			if l.minCommit < 0 || v < l.minCommit {
				l.minCommit = v
			}
		case rest == "checkpoint.parquet":
			l.checkpoints[v] = checkpointRef{version: v, paths: []string{full}}
		case strings.HasPrefix(rest, "checkpoint.") && strings.HasSuffix(rest, ".parquet"):
			// Multi-part: checkpoint.<part>.<total>.parquet.
			mid := strings.TrimSuffix(strings.TrimPrefix(rest, "checkpoint."), ".parquet")
			ps, ts, ok := strings.Cut(mid, ".")
			if !ok || len(ps) != 10 || len(ts) != 10 {
				continue
			}
			part, err1 := strconv.Atoi(ps)
			total, err2 := strconv.Atoi(ts)
			if err1 != nil || err2 != nil || part < 1 || part > total {
				continue
			}
			if multi[v] == nil {
				multi[v] = map[int]*partSet{}
			}
			set := multi[v][total]
			if set == nil {
				set = &partSet{total: total, parts: map[int]string{}}
				multi[v][total] = set
			}
			set.parts[part] = full
		}
	}
	for v, sets := range multi {
		if _, ok := l.checkpoints[v]; ok {
			continue // prefer the classic checkpoint
		}
		for _, set := range sets {
			if len(set.parts) != set.total {
				continue // incomplete multi-part checkpoints are ignored
			}
			ref := checkpointRef{version: v}
			for i := 1; i <= set.total; i++ {
				ref.paths = append(ref.paths, set.parts[i])
			}
			l.checkpoints[v] = ref
			break
		}
	}
	for v := range l.commits {
		l.maxVersion = max(l.maxVersion, v)
	}
	for v := range l.checkpoints {
		l.maxVersion = max(l.maxVersion, v)
	}
	return l, nil
}

// checkpointVersionsDesc returns the checkpoint versions <= upTo, newest first.
func (l *logListing) checkpointVersionsDesc(upTo int64) []int64 {
	var vs []int64
	for v := range l.checkpoints {
		if v <= upTo {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
	return vs
}

// LastCheckpoint is the content of _last_checkpoint: the version of the
// newest checkpoint, so that a reader starts there instead of listing the
// whole log, and what the checkpoint holds.
type LastCheckpoint struct {
	// Version is the version the checkpoint is of.
	Version int64 `json:"version"`
	// Size is the number of actions the checkpoint holds.
	Size int64 `json:"size"`
	// Parts is the number of files of a multi-part checkpoint; nil for a
	// single file.
	Parts *int `json:"parts,omitempty"`
	// SizeInBytes is the size of the checkpoint's files.
	SizeInBytes *int64 `json:"sizeInBytes,omitempty"`
	// NumOfAddFiles is the number of add actions the checkpoint holds.
	NumOfAddFiles *int64 `json:"numOfAddFiles,omitempty"`
}

// ParseLastCheckpoint parses the content of _last_checkpoint. Content that
// is not such an object, or names a negative version, fails with an error
// wrapping ErrCorruptLog.
func ParseLastCheckpoint(data []byte) (*LastCheckpoint, error) {
	var lc LastCheckpoint
	if err := json.Unmarshal(data, &lc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptLog, err)
	}
	if lc.Version < 0 {
		return nil, fmt.Errorf("%w: negative version", ErrCorruptLog)
	}
	return &lc, nil
}

// readLastCheckpoint reads _last_checkpoint. A missing file returns nil, nil.
func readLastCheckpoint(logDir string) (*LastCheckpoint, error) {
	data, err := os.ReadFile(filepath.Join(logDir, LastCheckpointName))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read last checkpoint: %w", err)
	}
	lc, err := ParseLastCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("read last checkpoint: %w", err)
	}
	return lc, nil
}

// readCommitFile reads and parses one commit file.
func readCommitFile(path string) ([]Action, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read commit: %w", err)
	}
	acts, err := parseActions(data)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", filepath.Base(path), err)
	}
	return acts, nil
}

// commitTimestamp returns the timestamp of a commit: the commitInfo timestamp
// when the commit has one, else the file's modification time.
func commitTimestamp(f logFile, acts []Action) time.Time {
	for _, a := range acts {
		if ci, ok := a.(*CommitInfo); ok && ci.Timestamp != 0 {
			return time.UnixMilli(ci.Timestamp).UTC()
		}
	}
	return f.modTime.UTC()
}
