package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Commit atomically writes actions as version readVersion+1 of the table and
// returns that version. readVersion is the version the caller's changes are
// based on; -1 creates the table, in which case actions must hold a protocol
// and a metaData action.
//
// The commit file is written to a temporary file in _delta_log, flushed, and
// then hard-linked to its final name, which fails if the version exists: the
// error then wraps ErrVersionExists and names the version. A commitInfo action
// is written first, with its timestamp set to the current time when zero.
//
// After a successful commit whose version is a multiple of the checkpoint
// interval, Commit writes a checkpoint; a failure to do so is logged, not
// returned, because the commit itself is durable.
func (t *Table) Commit(ctx context.Context, readVersion int64, actions []Action) (int64, error) {
	version := readVersion + 1
	if readVersion < -1 {
		return -1, fmt.Errorf("commit: invalid read version %d", readVersion)
	}
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}
	if err := validateCommit(version, actions); err != nil {
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}
	if version > 0 {
		if err := t.checkVersionExists(readVersion); err != nil {
			return -1, fmt.Errorf("commit version %d: %w", version, err)
		}
	}
	if err := t.checkDeletionVectors(ctx, readVersion, actions); err != nil {
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}

	data, err := EncodeCommit(actions, t.now())
	if err != nil {
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}

	if err := mkdirAllSync(t.logDir); err != nil {
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}
	if err := t.putIfAbsent(CommitFileName(version), data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return -1, fmt.Errorf("commit version %d: %w", version, ErrVersionExists)
		}
		return -1, fmt.Errorf("commit version %d: %w", version, err)
	}

	if t.checkpointInterval > 0 && version > 0 && version%t.checkpointInterval == 0 {
		if err := t.Checkpoint(ctx, version); err != nil {
			t.logger.Warn("delta: checkpoint after commit failed", "table", t.root, "version", version, "err", err)
		}
	}
	return version, nil
}

// EncodeCommit returns the content of a commit file holding actions, one
// JSON line each, its commitInfo first with its timestamp set to now when
// zero. It checks nothing; Table.Commit validates what it writes.
func EncodeCommit(actions []Action, now time.Time) ([]byte, error) {
	ordered := make([]Action, len(actions))
	copy(ordered, actions)
	sort.SliceStable(ordered, func(i, j int) bool {
		_, ci := ordered[i].(*CommitInfo)
		_, cj := ordered[j].(*CommitInfo)
		return ci && !cj
	})
	var buf bytes.Buffer
	for _, a := range ordered {
		if ci, ok := a.(*CommitInfo); ok && ci.Timestamp == 0 {
			c := *ci
			c.Timestamp = now.UnixMilli()
			a = &c
		}
		line, err := marshalAction(a)
		if err != nil {
			return nil, err
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// ParseCommit parses the content of a commit file. Actions of kinds this
// package does not know are skipped; a line that is not JSON fails with an
// error wrapping ErrCorruptLog.
func ParseCommit(data []byte) ([]Action, error) { return parseActions(data) }

// checkDeletionVectors fails when an add action of a commit on top of
// readVersion carries a deletion vector while the protocol in effect (the
// commit's own protocol action, else the table's at readVersion) does not
// support deletion vectors: readers that do not know the feature would
// read the rows it deletes. Only a commit with such an add reads the
// table's protocol.
func (t *Table) checkDeletionVectors(ctx context.Context, readVersion int64, actions []Action) error {
	var withDV *Add
	var proto *Protocol
	for _, a := range actions {
		switch a := a.(type) {
		case *Add:
			if a.DeletionVector != nil && withDV == nil {
				withDV = a
			}
		case *Protocol:
			proto = a
		}
	}
	if withDV == nil {
		return nil
	}
	if proto == nil && readVersion >= 0 {
		snap, err := t.SnapshotAt(ctx, readVersion)
		if err != nil {
			return fmt.Errorf("check deletion vector of %s: %w", withDV.Path, err)
		}
		proto = snap.Protocol()
	}
	if proto == nil || !SupportsDeletionVectors(proto) {
		p := Protocol{}
		if proto != nil {
			p = *proto
		}
		return fmt.Errorf("%w: add %s has a deletion vector, but protocol %d/%d does not support deletion vectors (see EnableDeletionVectors)",
			ErrUnsupportedFeature, withDV.Path, p.MinReaderVersion, p.MinWriterVersion)
	}
	return nil
}

// putIfAbsent atomically creates name in the log directory with data, failing
// with an error wrapping fs.ErrExist when it already exists.
func (t *Table) putIfAbsent(name string, data []byte) error {
	id, err := newUUID()
	if err != nil {
		return err
	}
	tmp := filepath.Join(t.logDir, "."+name+"."+id+".tmp")
	if err := writeFileSync(tmp, data); err != nil {
		os.Remove(tmp)
		return err
	}
	linkErr := os.Link(tmp, filepath.Join(t.logDir, name))
	rmErr := os.Remove(tmp)
	if linkErr != nil {
		return linkErr
	}
	if rmErr != nil {
		return rmErr
	}
	return fsyncDir(t.logDir)
}

// checkVersionExists fails unless the log holds a commit or a checkpoint of
// the given version, so that a commit never leaves a gap.
func (t *Table) checkVersionExists(v int64) error {
	if _, err := os.Stat(filepath.Join(t.logDir, CommitFileName(v))); err == nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(t.logDir, CheckpointFileName(v))); err == nil {
		return nil
	}
	return fmt.Errorf("%w: read version %d does not exist", ErrVersionNotFound, v)
}

// validateCommit checks the actions of a commit against the rules a writer
// must follow.
func validateCommit(version int64, actions []Action) error {
	var nProto, nMeta, nInfo int
	adds := map[string]bool{}
	removes := map[string]bool{}
	apps := map[string]bool{}
	for _, a := range actions {
		switch a := a.(type) {
		case *Protocol:
			nProto++
			if a.MinReaderVersion < 1 || a.MinWriterVersion < 1 {
				return fmt.Errorf("invalid protocol %d/%d", a.MinReaderVersion, a.MinWriterVersion)
			}
		case *Metadata:
			nMeta++
			if a.ID == "" {
				return errors.New("metaData without id")
			}
			if _, err := a.Schema(); err != nil {
				return err
			}
		case *CommitInfo:
			nInfo++
		case *Add:
			if a.Path == "" {
				return errors.New("add without path")
			}
			if adds[a.Path] {
				return fmt.Errorf("duplicate add of %q", a.Path)
			}
			adds[a.Path] = true
		case *Remove:
			if a.Path == "" {
				return errors.New("remove without path")
			}
			if removes[a.Path] {
				return fmt.Errorf("duplicate remove of %q", a.Path)
			}
			removes[a.Path] = true
		case *AddCDC:
			if a.Path == "" {
				return errors.New("cdc without path")
			}
			if a.DataChange {
				return errors.New("cdc with dataChange true")
			}
		case *Txn:
			if a.AppID == "" {
				return errors.New("txn without appId")
			}
			if apps[a.AppID] {
				return fmt.Errorf("two txn actions for appId %q", a.AppID)
			}
			apps[a.AppID] = true
		case nil:
			return errors.New("nil action")
		default:
			return fmt.Errorf("unknown action %T", a)
		}
	}
	if nProto > 1 || nMeta > 1 || nInfo > 1 {
		return errors.New("at most one protocol, metaData and commitInfo action per commit")
	}
	if version == 0 && (nProto == 0 || nMeta == 0) {
		return errors.New("version 0 needs a protocol and a metaData action")
	}
	return nil
}
