package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Change data feed: a table whose configuration sets
// delta.enableChangeDataFeed to true has, in every version that changes
// rows by rewriting files, cdc actions naming change data files under
// _change_data/. Such a file holds the table's columns (by their physical
// names under column mapping) plus _change_type, one of the Change*
// values. A version without cdc actions reads as the rows of its add
// actions inserted and those of its remove actions deleted (only actions
// with dataChange true count).
const (
	// EnableChangeDataFeedKey is the table property that turns the change
	// data feed on.
	EnableChangeDataFeedKey = "delta.enableChangeDataFeed"
	// ChangeDataFeedFeature is the writer feature of the change data feed
	// at writer version 7.
	ChangeDataFeedFeature = "changeDataFeed"
	// ChangeTypeColumn is the column of change data files that says what
	// a row is.
	ChangeTypeColumn = "_change_type"
	// ChangeDataDir is the directory of change data files under the root.
	ChangeDataDir = "_change_data"

	ChangeInsert          = "insert"
	ChangeUpdatePreimage  = "update_preimage"
	ChangeUpdatePostimage = "update_postimage"
	ChangeDelete          = "delete"
)

// ErrChangeDataFeedDisabled is returned (wrapped) when the changes of a
// version are asked for and the table's change data feed is off in it.
var ErrChangeDataFeedDisabled = errors.New("delta: change data feed is not enabled")

// AddCDC is the cdc action: a change data file of the version it is
// committed in. It is no part of the table's files.
type AddCDC struct {
	Path            string             `json:"path"`
	PartitionValues map[string]*string `json:"partitionValues"`
	Size            int64              `json:"size"`
	DataChange      bool               `json:"dataChange"`
	Tags            map[string]string  `json:"tags,omitempty"`
}

// ActionName returns "cdc".
func (*AddCDC) ActionName() string { return "cdc" }

// MarshalJSON writes partitionValues as {} when empty.
func (c *AddCDC) MarshalJSON() ([]byte, error) {
	type plain AddCDC
	p := plain(*c)
	if p.PartitionValues == nil {
		p.PartitionValues = map[string]*string{}
	}
	return json.Marshal(p)
}

// CDCOf returns the cdc action of a change data file that a DataWriter
// from NewChangeDataWriter closed with add (dataChange false, as the
// protocol requires).
func CDCOf(add *Add) *AddCDC {
	return &AddCDC{Path: add.Path, PartitionValues: add.PartitionValues, Size: add.Size, Tags: add.Tags}
}

// ChangeDataFeedEnabled reports whether md turns the change data feed on.
func ChangeDataFeedEnabled(md *Metadata) bool {
	return md != nil && md.Configuration[EnableChangeDataFeedKey] == "true"
}

// ChangeDataFeedProtocol returns p raised so that writers respect the
// change data feed: writer version 4 or more, or at writer version 7 the
// changeDataFeed writer feature. It returns p itself when it does already.
func ChangeDataFeedProtocol(p *Protocol) *Protocol {
	switch {
	case p.MinWriterVersion >= 7:
		if slices.Contains(p.WriterFeatures, ChangeDataFeedFeature) {
			return p
		}
		out := *p
		out.ReaderFeatures = slices.Clone(p.ReaderFeatures)
		out.WriterFeatures = append(slices.Clone(p.WriterFeatures), ChangeDataFeedFeature)
		return &out
	case p.MinWriterVersion >= 4:
		return p
	}
	out := *p
	out.MinWriterVersion = 4
	return &out
}

// WithChangeDataFeed returns a copy of md with delta.enableChangeDataFeed
// set to on.
func (m *Metadata) WithChangeDataFeed(on bool) *Metadata {
	out := *m
	out.Configuration = maps.Clone(m.Configuration)
	if out.Configuration == nil {
		out.Configuration = map[string]string{}
	}
	out.Configuration[EnableChangeDataFeedKey] = fmt.Sprint(on)
	return &out
}

// ChangeDataSchema returns schema with the _change_type column after its
// fields: the schema of the rows of a change data file.
func ChangeDataSchema(schema *StructType) *StructType {
	st := &StructType{Fields: slices.Clone(schema.Fields)}
	st.Fields = append(st.Fields, NewField(ChangeTypeColumn, TypeString, false))
	return st
}

// NewChangeDataWriter creates a change data file under _change_data/ for
// rows of ChangeDataSchema(schema): the table's columns, then the change
// type. Close returns an add action: commit CDCOf of it.
func NewChangeDataWriter(root string, schema *StructType, partitionColumns []string, partitionValues map[string]any, opts WriteOptions) (*DataWriter, error) {
	return newDataWriter(root, ChangeDataDir, "cdc", ChangeDataSchema(schema), partitionColumns, partitionValues, opts)
}

// VersionChanges are the actions of one version that say how its rows
// changed.
type VersionChanges struct {
	Version   int64
	Timestamp time.Time
	// Schema and PartitionColumns are those of the version.
	Schema           *StructType
	PartitionColumns []string
	// CDC are the change data files; when there are none, Added and
	// Removed (those with dataChange true) are the rows inserted and
	// deleted.
	CDC     []*AddCDC
	Added   []*Add
	Removed []*Remove
}

// ChangeFiles returns the change actions of versions from to to, in
// order. Every version must have the change data feed on
// (ErrChangeDataFeedDisabled otherwise) and its commit file present.
func (t *Table) ChangeFiles(ctx context.Context, from, to int64) ([]VersionChanges, error) {
	if from < 0 || to < from {
		return nil, fmt.Errorf("change files: %w: versions %d to %d", ErrVersionNotFound, from, to)
	}
	snap, err := t.SnapshotAt(ctx, from)
	if err != nil {
		return nil, fmt.Errorf("change files: %w", err)
	}
	md := snap.Metadata()
	var out []VersionChanges
	for v := from; v <= to; v++ {
		acts, err := t.ReadCommit(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("change files: %w", err)
		}
		vc := VersionChanges{Version: v}
		for _, a := range acts {
			switch a := a.(type) {
			case *Metadata:
				md = a
			case *CommitInfo:
				vc.Timestamp = time.UnixMilli(a.Timestamp).UTC()
			case *AddCDC:
				vc.CDC = append(vc.CDC, a)
			case *Add:
				if a.DataChange {
					vc.Added = append(vc.Added, a)
				}
			case *Remove:
				if a.DataChange {
					vc.Removed = append(vc.Removed, a)
				}
			}
		}
		if !ChangeDataFeedEnabled(md) {
			return nil, fmt.Errorf("change files: %w at version %d", ErrChangeDataFeedDisabled, v)
		}
		if vc.Timestamp.IsZero() {
			if vc.Timestamp, err = t.CommitTimestamp(ctx, v); err != nil {
				return nil, fmt.Errorf("change files: %w", err)
			}
		}
		if vc.Schema, err = md.Schema(); err != nil {
			return nil, fmt.Errorf("change files: version %d: %w", v, err)
		}
		vc.PartitionColumns = md.PartitionColumns
		out = append(out, vc)
	}
	return out, nil
}

// ChangeRow is one row of the change data feed: the row's values in the
// schema of its version, what happened to it, and the version.
type ChangeRow struct {
	Row       Row
	Type      string
	Version   int64
	Timestamp time.Time
}

// ReadChanges reads the row changes of versions from to to, in version
// order and within a version in file order, as the protocol says: a
// version's change data files when it has any, else the rows of its added
// logical files as inserts and of its removed ones as deletes (those files
// must still be there). A data file removed and added again in one version
// with another deletion vector, rows deleted from it in place, changes by
// the rows one deletion vector deletes and the other does not: those the
// new one deletes are deletes, and those only the old one deleted are
// inserts. See ChangeFiles.
func (t *Table) ReadChanges(ctx context.Context, from, to int64) ([]ChangeRow, error) {
	versions, err := t.ChangeFiles(ctx, from, to)
	if err != nil {
		return nil, err
	}
	var out []ChangeRow
	for _, vc := range versions {
		n := len(vc.Schema.Fields)
		add := func(rows []Row, typ string) {
			for _, r := range rows {
				typ := typ
				if typ == "" {
					typ, _ = r[n].(string)
				}
				out = append(out, ChangeRow{Row: r[:n:n], Type: typ, Version: vc.Version, Timestamp: vc.Timestamp})
			}
		}
		if len(vc.CDC) > 0 {
			r := newFileReader(t.root, vc.Schema, vc.PartitionColumns, []*StructField{NewField(ChangeTypeColumn, TypeString, false)})
			for _, c := range vc.CDC {
				rows, err := r.read(ctx, c.Path, c.PartitionValues, rowSelection{})
				if err != nil {
					return nil, fmt.Errorf("read changes: version %d: %w", vc.Version, err)
				}
				add(rows, "")
			}
			continue
		}
		if err := t.fileChanges(ctx, vc, add); err != nil {
			return nil, fmt.Errorf("read changes: version %d: %w", vc.Version, err)
		}
	}
	return out, nil
}

// fileChanges passes emit the changes of a version without change data
// files: the rows of its removed logical files as deletes, then those of
// its added ones as inserts, a data file both removed and added counting
// at its remove (see ReadChanges).
func (t *Table) fileChanges(ctx context.Context, vc VersionChanges, emit func(rows []Row, typ string)) error {
	r := newFileReader(t.root, vc.Schema, vc.PartitionColumns, nil)
	added := map[string]*Add{}
	for _, a := range vc.Added {
		added[fileKey(a.Path)] = a
	}
	for _, rm := range vc.Removed {
		if a, ok := added[fileKey(rm.Path)]; ok {
			delete(added, fileKey(rm.Path))
			if err := t.deletionVectorChanges(ctx, r, rm, a, emit); err != nil {
				return err
			}
			continue
		}
		rows, err := t.readLogicalFile(ctx, r, rm.Path, rm.PartitionValues, rm.DeletionVector)
		if err != nil {
			return err
		}
		emit(rows, ChangeDelete)
	}
	for _, a := range vc.Added {
		if _, ok := added[fileKey(a.Path)]; !ok {
			continue // read with its remove
		}
		rows, err := t.readLogicalFile(ctx, r, a.Path, a.PartitionValues, a.DeletionVector)
		if err != nil {
			return err
		}
		emit(rows, ChangeInsert)
	}
	return nil
}

// readLogicalFile reads the rows of the logical file of the data file at
// logPath with deletion vector d.
func (t *Table) readLogicalFile(ctx context.Context, r *fileReader, logPath string, pv map[string]*string, d *DeletionVectorDescriptor) ([]Row, error) {
	sel, err := skipDeleted(t.root, logPath, d)
	if err != nil {
		return nil, err
	}
	return r.read(ctx, logPath, pv, sel)
}

// deletionVectorChanges passes emit the changes between the logical file
// rm removes and the one a adds, of the same data file: the rows a's
// deletion vector deletes and rm's did not, as deletes, and those rm's
// deleted and a's does not, as inserts.
func (t *Table) deletionVectorChanges(ctx context.Context, r *fileReader, rm *Remove, a *Add, emit func(rows []Row, typ string)) error {
	oldDV, err := readDeletionVectorOrNone(t.root, rm.Path, rm.DeletionVector)
	if err != nil {
		return err
	}
	newDV, err := readDeletionVectorOrNone(t.root, a.Path, a.DeletionVector)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		rows *DeletionVector
		typ  string
	}{{newDV.AndNot(oldDV), ChangeDelete}, {oldDV.AndNot(newDV), ChangeInsert}} {
		if c.rows.Cardinality() == 0 {
			continue
		}
		rows, err := r.read(ctx, a.Path, a.PartitionValues, rowSelection{only: c.rows})
		if err != nil {
			return err
		}
		emit(rows, c.typ)
	}
	return nil
}

// readDeletionVectorOrNone reads the deletion vector d of the data file at
// logPath, an empty one when d is nil.
func readDeletionVectorOrNone(root, logPath string, d *DeletionVectorDescriptor) (*DeletionVector, error) {
	if d == nil {
		return &DeletionVector{}, nil
	}
	dv, err := ReadDeletionVector(root, d)
	if err != nil {
		return nil, fmt.Errorf("read data file %s: %w", logPath, err)
	}
	return dv, nil
}
