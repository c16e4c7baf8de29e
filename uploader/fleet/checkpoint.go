package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lakeside/lakeside/delta"
)

// DefaultCheckpointInterval is the number of versions between two
// checkpoints of a fleet table that does not set delta.checkpointInterval.
const DefaultCheckpointInterval = 100

// checkpointInterval returns the number of versions between two
// checkpoints: the table's delta.checkpointInterval, which every writer
// follows, else Options.CheckpointInterval, else
// DefaultCheckpointInterval. Zero or less: this site writes none.
func (w *Writer) checkpointInterval() int64 {
	if w.meta != nil {
		if s, ok := w.meta.Configuration["delta.checkpointInterval"]; ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil && n > 0 {
				return n
			}
		}
	}
	if w.opts.CheckpointInterval != 0 {
		return w.opts.CheckpointInterval
	}
	return DefaultCheckpointInterval
}

// afterCommit checkpoints version v, which this site just committed, when
// v is a multiple of the checkpoint interval: whoever commits such a
// version checkpoints it (docs/fleet.md, "Checkpoints"). A checkpoint that
// fails is logged, not returned: the commit is in, and the next multiple
// covers the table.
func (w *Writer) afterCommit(ctx context.Context, v int64) {
	n := w.checkpointInterval()
	if n <= 0 || v <= 0 || v%n != 0 {
		return
	}
	if err := w.checkpoint(ctx, v, v+n); err != nil {
		w.opts.Logger.Warn("fleet: checkpoint after commit failed", "table", w.log.table(), "version", v, "err", err)
	}
}

// checkpoint writes the classic checkpoint of version v, with
// If-None-Match (a copy another site put first is as valid), then moves
// _last_checkpoint forward to it; nextDue is the version whose committer
// checkpoints next. The state at v is the newest checkpoint before v plus
// the commits after it: they are copied into a scratch directory under
// Options.ScratchDir and replayed there by package delta, which writes the
// checkpoint as it does a local table's. So its memory is the table's
// state at v, not only the commits since the last checkpoint: there is
// no streaming writer. A checkpoint of v or a newer one already named by
// _last_checkpoint leaves nothing to do.
func (w *Writer) checkpoint(ctx context.Context, v, nextDue int64) error {
	lc, err := w.log.LastCheckpoint(ctx)
	if errors.Is(err, delta.ErrCorruptLog) {
		w.opts.Logger.Warn("fleet: replaying the log from version 0", "table", w.log.table(), "err", err)
		lc, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	if lc != nil && lc.Version >= v {
		return nil
	}
	dir, err := os.MkdirTemp(w.opts.ScratchDir, "fleet-checkpoint-")
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	defer os.RemoveAll(dir)
	logDir := filepath.Join(dir, delta.LogDirName)
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	from := int64(0)
	if lc != nil {
		if _, err := w.log.downloadCheckpoint(ctx, lc, logDir); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("checkpoint %d: %w", v, ctx.Err())
			}
			w.opts.Logger.Warn("fleet: replaying the log from version 0", "table", w.log.table(), "err", err)
		} else {
			from = lc.Version + 1
		}
	}
	if err := w.log.download(ctx, from, v, logDir); err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	tbl, err := delta.Open(ctx, dir, delta.WithCheckpointInterval(0), delta.WithClock(w.opts.Now), delta.WithLogger(w.opts.Logger))
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	snap, err := tbl.SnapshotAt(ctx, v)
	if err != nil && from > 0 && ctx.Err() == nil {
		// The previous checkpoint does not read: replay from version 0,
		// which delta does once the commits before it are there too.
		w.opts.Logger.Warn("fleet: replaying the log from version 0", "table", w.log.table(), "err", err)
		if derr := w.log.download(ctx, 0, from-1, logDir); derr != nil {
			return fmt.Errorf("checkpoint %d: %v; from version 0: %w", v, err, derr)
		}
		snap, err = tbl.SnapshotAt(ctx, v)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	path := filepath.Join(dir, delta.CheckpointFileName(v))
	next, err := delta.WriteCheckpoint(ctx, snap, path)
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	switch err := w.log.putCheckpoint(ctx, v, data); {
	case errors.Is(err, ErrExists):
		// Another site's copy: its size in bytes may differ from this
		// one's, so _last_checkpoint leaves it out.
		next.SizeInBytes = nil
	case err != nil:
		return err
	}
	if err := w.log.advanceLastCheckpoint(ctx, next, nextDue); err != nil {
		return fmt.Errorf("checkpoint %d: %w", v, err)
	}
	return nil
}

// load reads what the site needs of the table's log: the newest schema and
// protocol and the site's progress, from the checkpoint _last_checkpoint
// names and the commits after it up to the head, and returns the head (-1:
// the table has no log). A checkpoint that is missing or does not read is
// passed over for the log from version 0; when that is gone too, the error
// says both.
func (w *Writer) load(ctx context.Context) (int64, error) {
	lc, err := w.log.LastCheckpoint(ctx)
	if errors.Is(err, delta.ErrCorruptLog) {
		w.opts.Logger.Warn("fleet: reading the log from version 0", "table", w.log.table(), "err", err)
		lc, err = nil, nil
	}
	if err != nil {
		return -1, err
	}
	known := int64(-1)
	var cpErr error
	if lc != nil {
		known = lc.Version
		if cpErr = w.fromCheckpoint(ctx, lc); cpErr != nil {
			if ctx.Err() != nil || errors.Is(cpErr, ErrConflict) {
				return -1, cpErr
			}
			w.opts.Logger.Warn("fleet: reading the log from version 0", "table", w.log.table(), "err", cpErr)
		}
	}
	head, err := w.log.latestFrom(ctx, known)
	if err != nil {
		return -1, err
	}
	if err := w.catchUp(ctx, head); err != nil {
		if cpErr != nil {
			return -1, fmt.Errorf("%v, the checkpoint _last_checkpoint names; the log from version 0 does not read either: %w", cpErr, err)
		}
		return -1, err
	}
	return head, nil
}

// fromCheckpoint takes in the checkpoint lc names: its protocol and
// metaData, and the versions of the site's appIds in its txn actions, all
// of which Delta keeps in a checkpoint. A checkpoint carries no
// commitInfo, so those versions are taken as they are; the check that the
// site's own runs wrote them applies to the commits read after it. The
// fleet version of such an appId's progress is the checkpoint's, which is
// at or after the commit that brought it there. Nothing is taken in
// unless the whole checkpoint reads.
func (w *Writer) fromCheckpoint(ctx context.Context, lc *delta.LastCheckpoint) error {
	var md *delta.Metadata
	var proto *delta.Protocol
	txns := map[string]int64{}
	err := w.log.readCheckpoint(ctx, lc, w.opts.ScratchDir, func(acts []delta.Action) error {
		for _, a := range acts {
			switch a := a.(type) {
			case *delta.Metadata:
				md = a
			case *delta.Protocol:
				proto = a
			case *delta.Txn:
				if strings.HasPrefix(a.AppID, w.appIDPrefix()) {
					txns[a.AppID] = a.Version
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if md == nil || proto == nil {
		return fmt.Errorf("read checkpoint %d: %w: no protocol or metaData", lc.Version, delta.ErrCorruptLog)
	}
	if err := checkProtocol(proto); err != nil {
		return fmt.Errorf("%w: checkpoint %d: %v", ErrConflict, lc.Version, err)
	}
	if err := w.setMetadata(md); err != nil {
		return fmt.Errorf("checkpoint %d: %w", lc.Version, err)
	}
	w.proto = proto
	for appID, local := range txns {
		w.progress[appID] = progress{local: local, fleet: lc.Version}
	}
	w.head = lc.Version
	return nil
}

// readCheckpoint reads the checkpoint lc names and hands its actions to
// fn, a batch at a time. Its files are staged in a directory of their own
// under scratch, removed after: delta reads a checkpoint from a file.
func (l *Log) readCheckpoint(ctx context.Context, lc *delta.LastCheckpoint, scratch string, fn func([]delta.Action) error) error {
	dir, err := os.MkdirTemp(scratch, "fleet-checkpoint-")
	if err != nil {
		return fmt.Errorf("read checkpoint %d: %w", lc.Version, err)
	}
	defer os.RemoveAll(dir)
	paths, err := l.downloadCheckpoint(ctx, lc, dir)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := delta.ReadCheckpointFile(ctx, p, fn); err != nil {
			return fmt.Errorf("read checkpoint %d: %w", lc.Version, err)
		}
	}
	return nil
}
