package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/lakeside/lakeside/delta"
)

// Create makes version 0 of the fleet table named table, a schema commit
// of proto and md, and returns a Writer on it. When another site created
// the table first, Create opens that one instead: the caller then brings
// its columns in with CommitSchema.
func Create(ctx context.Context, store Store, table string, proto *delta.Protocol, md *delta.Metadata, opts Options) (*Writer, error) {
	w, err := newWriter(store, table, opts)
	if err != nil {
		return nil, err
	}
	head, err := w.load(ctx)
	if err != nil {
		return nil, fmt.Errorf("open fleet table %s: %w", table, err)
	}
	if head >= 0 {
		return w, nil
	}
	if err := checkProtocol(proto); err != nil {
		return nil, fmt.Errorf("create fleet table %s: %w", table, err)
	}
	if err := w.setMetadata(md); err != nil {
		return nil, fmt.Errorf("create fleet table %s: %w", table, err)
	}
	data, err := delta.EncodeCommit([]delta.Action{proto, md, w.schemaInfo("CREATE TABLE", -1)}, w.opts.Now())
	if err != nil {
		return nil, fmt.Errorf("create fleet table %s: %w", table, err)
	}
	w.meta = nil // known once the commit is in
	if err := w.log.put(ctx, 0, data); err != nil && !errors.Is(err, ErrExists) {
		return nil, fmt.Errorf("create fleet table %s: %w", table, err)
	}
	// Whoever won version 0, the log now says what the table is.
	if err := w.catchUp(ctx, 0); err != nil {
		return nil, fmt.Errorf("create fleet table %s: %w", table, err)
	}
	return w, nil
}

// schemaInfo returns the commitInfo of a schema commit on readVersion.
func (w *Writer) schemaInfo(operation string, readVersion int64) *delta.CommitInfo {
	blind := false
	return &delta.CommitInfo{Operation: operation, EngineInfo: w.opts.EngineInfo, ReadVersion: &readVersion, IsBlindAppend: &blind,
		Extra: map[string]any{"lakeside": map[string]any{"site": w.site, "run": w.opts.RunID}}}
}

// CommitSchema changes the fleet's schema and protocol. change returns
// them changed from the newest the site knows, or nil when nothing is to
// change; it is called again after a lost race, on the schema that won.
// A change may only add columns and features (ErrConflict otherwise), so
// that every file written before stays valid.
func (w *Writer) CommitSchema(ctx context.Context, change func(*delta.Metadata, *delta.Protocol) (*delta.Metadata, *delta.Protocol, error)) (int64, error) {
	var put *delta.Metadata
	v, err := w.put(ctx, func(v int64) ([]byte, error) {
		md, proto, err := change(w.meta, w.proto)
		if err != nil || md == nil {
			return nil, errUnchanged{err}
		}
		if err := compatibleMetadata(w.meta, md); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConflict, err)
		}
		if err := checkProtocol(proto); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConflict, err)
		}
		put = md
		return delta.EncodeCommit([]delta.Action{proto, md, w.schemaInfo("CHANGE COLUMN", v-1)}, w.opts.Now())
	}, func(v int64, acts []delta.Action) (bool, error) {
		// Own is the same schema put by this run: its put landed unseen.
		run, own := "", false
		for _, a := range acts {
			switch a := a.(type) {
			case *delta.CommitInfo:
				run = runOf(a)
			case *delta.Metadata:
				own = put != nil && a.SchemaString == put.SchemaString && a.ID == put.ID
			}
		}
		if own && run == w.opts.RunID {
			return true, nil
		}
		_, err := w.classify(v, acts, "", -1)
		return false, err
	})
	var unchanged errUnchanged
	if errors.As(err, &unchanged) {
		if unchanged.err != nil {
			return -1, fmt.Errorf("change schema: %w", unchanged.err)
		}
		return w.head, nil
	}
	if err != nil {
		return -1, fmt.Errorf("change schema: %w", err)
	}
	w.afterCommit(ctx, v)
	return v, nil
}

// errUnchanged ends CommitSchema when its change has nothing to commit, or
// fails.
type errUnchanged struct{ err error }

func (e errUnchanged) Error() string {
	if e.err == nil {
		return "schema unchanged"
	}
	return e.err.Error()
}
