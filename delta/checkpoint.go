package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lakeside/lakeside/delta/internal/parquet"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// checkpointSchema is the schema of classic (V1) checkpoint files written by
// this package, in the order of the protocol specification's example.
func checkpointSchema() *StructType {
	str := func(n string) *StructField { return NewField(n, TypeString, true) }
	long := func(n string) *StructField { return NewField(n, TypeLong, true) }
	boolean := func(n string) *StructField { return NewField(n, TypeBoolean, true) }
	strMap := func(n string) *StructField {
		return NewField(n, &MapType{KeyType: TypeString, ValueType: TypeString, ValueContainsNull: true}, true)
	}
	strList := func(n string) *StructField {
		return NewField(n, &ArrayType{ElementType: TypeString, ContainsNull: true}, true)
	}
	dv := func() *StructField {
		return NewField("deletionVector", NewStructType(str("storageType"), str("pathOrInlineDv"),
			NewField("offset", TypeInteger, true), NewField("sizeInBytes", TypeInteger, true),
			long("cardinality"), long("maxRowIndex")), true)
	}
	return NewStructType(
		NewField("txn", NewStructType(str("appId"), long("version"), long("lastUpdated")), true),
		NewField("add", NewStructType(str("path"), strMap("partitionValues"), long("size"),
			long("modificationTime"), boolean("dataChange"), str("stats"), strMap("tags"), dv()), true),
		NewField("remove", NewStructType(str("path"), long("deletionTimestamp"), boolean("dataChange"),
			boolean("extendedFileMetadata"), strMap("partitionValues"), long("size"), dv()), true),
		NewField("metaData", NewStructType(str("id"), str("name"), str("description"),
			NewField("format", NewStructType(str("provider"), strMap("options")), true),
			str("schemaString"), strList("partitionColumns"), strMap("configuration"), long("createdTime")), true),
		NewField("protocol", NewStructType(NewField("minReaderVersion", TypeInteger, true),
			NewField("minWriterVersion", TypeInteger, true), strList("readerFeatures"), strList("writerFeatures")), true),
	)
}

// Checkpoint writes a classic single-file checkpoint of the given version and
// then points _last_checkpoint at it (unless it already names a newer one).
// The checkpoint is written to a temporary file and renamed, so a crash
// leaves either no checkpoint or a complete one, and _last_checkpoint is
// written last.
func (t *Table) Checkpoint(ctx context.Context, version int64) error {
	snap, err := t.SnapshotAt(ctx, version)
	if err != nil {
		return fmt.Errorf("checkpoint %d: %w", version, err)
	}
	id, err := newUUID()
	if err != nil {
		return err
	}
	tmp := filepath.Join(t.logDir, "."+CheckpointFileName(version)+"."+id+".tmp")
	lc, err := WriteCheckpoint(ctx, snap, tmp)
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint %d: %w", version, err)
	}
	final := filepath.Join(t.logDir, CheckpointFileName(version))
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint %d: %w", version, err)
	}
	if err := fsyncDir(t.logDir); err != nil {
		return fmt.Errorf("checkpoint %d: %w", version, err)
	}
	if cur, err := readLastCheckpoint(t.logDir); err == nil && cur != nil && cur.Version > version {
		return nil
	}
	data, err := json.Marshal(lc)
	if err != nil {
		return err
	}
	tmpLC := filepath.Join(t.logDir, "."+LastCheckpointName+"."+id+".tmp")
	if err := writeFileSync(tmpLC, data); err != nil {
		os.Remove(tmpLC)
		return fmt.Errorf("checkpoint %d: write %s: %w", version, LastCheckpointName, err)
	}
	if err := os.Rename(tmpLC, filepath.Join(t.logDir, LastCheckpointName)); err != nil {
		os.Remove(tmpLC)
		return fmt.Errorf("checkpoint %d: write %s: %w", version, LastCheckpointName, err)
	}
	if err := fsyncDir(t.logDir); err != nil {
		return fmt.Errorf("checkpoint %d: %w", version, err)
	}
	return nil
}

// WriteCheckpoint writes a classic single-file checkpoint of snap to a new
// file at path, flushed to stable storage, and returns what
// _last_checkpoint says of it. The checkpoint holds the protocol, the
// metaData, every txn, every file and the tombstones not yet expired at
// the snapshot's time (delta.deletedFileRetentionDuration), as the
// protocol asks. It is how a writer whose log is not in a local table
// directory (a fleet table on an object store) checkpoints: it replays
// the log into a scratch directory, writes the checkpoint there and puts
// it where the log is. Its memory is the snapshot's.
func WriteCheckpoint(ctx context.Context, snap *Snapshot, path string) (*LastCheckpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, numAdds := checkpointRows(snap, snap.now.UnixMilli())
	if err := parquet.WriteFile(path, checkpointSchema(), rows); err != nil {
		return nil, fmt.Errorf("write checkpoint %d: %w", snap.version, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("write checkpoint %d: %w", snap.version, err)
	}
	size, nAdds := info.Size(), int64(numAdds)
	return &LastCheckpoint{Version: snap.version, Size: int64(len(rows)), SizeInBytes: &size, NumOfAddFiles: &nAdds}, nil
}

// checkpointRows returns the rows of a checkpoint of the snapshot: protocol,
// metaData, txns, adds and the tombstones that have not expired at nowMillis.
func checkpointRows(s *Snapshot, nowMillis int64) ([]Row, int) {
	var rows []Row
	p := s.protocol
	var rf, wf any
	if p.MinReaderVersion >= 3 {
		rf = stringsToAny(p.ReaderFeatures)
	}
	if p.MinWriterVersion >= 7 {
		wf = stringsToAny(p.WriterFeatures)
	}
	rows = append(rows, Row{nil, nil, nil, nil, Row{int32(p.MinReaderVersion), int32(p.MinWriterVersion), rf, wf}})

	m := s.metadata
	var created any
	if m.CreatedTime != nil {
		created = *m.CreatedTime
	}
	rows = append(rows, Row{nil, nil, nil, Row{m.ID, nilIfEmpty(m.Name), nilIfEmpty(m.Description),
		Row{m.Format.Provider, nonNilMap(m.Format.Options)}, m.SchemaString, stringsToAny(m.PartitionColumns),
		nonNilMap(m.Configuration), created}, nil})

	for _, t := range s.Transactions() {
		var lu any
		if t.LastUpdated != nil {
			lu = *t.LastUpdated
		}
		rows = append(rows, Row{Row{t.AppID, t.Version, lu}, nil, nil, nil, nil})
	}
	files := s.Files()
	for _, a := range files {
		pv := a.PartitionValues
		if pv == nil {
			pv = map[string]*string{}
		}
		var tags any
		if a.Tags != nil {
			tags = a.Tags
		}
		rows = append(rows, Row{nil, Row{a.Path, pv, a.Size, a.ModificationTime, a.DataChange, nilIfEmpty(a.Stats), tags,
			deletionVectorRow(a.DeletionVector)}, nil, nil, nil})
	}
	retention := 7 * 24 * 3600 * int64(1000)
	if v, ok := m.Configuration["delta.deletedFileRetentionDuration"]; ok {
		if d, err := parseInterval(v); err == nil {
			retention = d.Milliseconds()
		}
	}
	for _, r := range s.Tombstones() {
		if r.DeletionTimestamp != nil && *r.DeletionTimestamp < nowMillis-retention {
			continue
		}
		var ts, size, pv any
		if r.DeletionTimestamp != nil {
			ts = *r.DeletionTimestamp
		}
		if r.Size != nil {
			size = *r.Size
		}
		if r.PartitionValues != nil {
			pv = r.PartitionValues
		}
		rows = append(rows, Row{nil, nil, Row{r.Path, ts, r.DataChange, r.ExtendedFileMetadata, pv, size,
			deletionVectorRow(r.DeletionVector)}, nil, nil})
	}
	return rows, len(files)
}

// deletionVectorRow returns the checkpoint value of a deletion vector
// descriptor: nil, or a row of checkpointSchema's deletionVector struct.
func deletionVectorRow(d *DeletionVectorDescriptor) any {
	if d == nil {
		return nil
	}
	var off, maxRow any
	if d.Offset != nil {
		off = *d.Offset
	}
	if d.MaxRowIndex != nil {
		maxRow = *d.MaxRowIndex
	}
	return Row{d.StorageType, d.PathOrInlineDv, off, d.SizeInBytes, d.Cardinality, maxRow}
}

// deletionVectorOf returns the descriptor of a checkpoint's deletionVector
// value.
func deletionVectorOf(v any) *DeletionVectorDescriptor {
	r, ok := v.(Row)
	if !ok {
		return nil
	}
	d := &DeletionVectorDescriptor{StorageType: asString(r[0]), PathOrInlineDv: asString(r[1]),
		SizeInBytes: int32(asInt64(r[3])), Cardinality: asInt64(r[4]), MaxRowIndex: asInt64Ptr(r[5])}
	if r[2] != nil {
		off := int32(asInt64(r[2]))
		d.Offset = &off
	}
	return d
}

func stringsToAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// readCheckpoint reads the actions of a checkpoint into a replay state.
func (t *Table) readCheckpoint(ctx context.Context, ref checkpointRef) (*replayState, error) {
	st := newReplayState()
	for _, p := range ref.paths {
		err := ReadCheckpointFile(ctx, p, func(acts []Action) error {
			st.apply(acts)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read checkpoint %d: %w", ref.version, err)
		}
	}
	if st.protocol == nil || st.metadata == nil {
		return nil, fmt.Errorf("read checkpoint %d: %w: no protocol or metaData", ref.version, ErrCorruptLog)
	}
	return st, nil
}

// ReadCheckpointFile reads the actions of one checkpoint file at path (a
// classic checkpoint, or one part of a multi-part one) and hands them to
// fn in file order, a batch of rows at a time, so that its memory is a
// batch's whatever the checkpoint's size. fn may keep the actions. A
// file that is not Parquet fails with an error.
func ReadCheckpointFile(ctx context.Context, path string, fn func([]Action) error) error {
	return parquet.ReadBatches(ctx, path, checkpointSchema(), func(rows []Row) error {
		acts, err := checkpointActions(rows)
		if err != nil {
			return err
		}
		return fn(acts)
	})
}

// checkpointActions converts checkpoint rows (read with checkpointSchema)
// into actions.
func checkpointActions(rows []Row) ([]Action, error) {
	var out []Action
	for _, r := range rows {
		if v, ok := r[0].(Row); ok {
			out = append(out, &Txn{AppID: asString(v[0]), Version: asInt64(v[1]), LastUpdated: asInt64Ptr(v[2])})
		}
		if v, ok := r[1].(Row); ok {
			a := &Add{Path: asString(v[0]), PartitionValues: asNullableStringMap(v[1]), Size: asInt64(v[2]),
				ModificationTime: asInt64(v[3]), DataChange: asBool(v[4]), Stats: asString(v[5]), Tags: asStringMap(v[6])}
			if a.PartitionValues == nil {
				a.PartitionValues = map[string]*string{}
			}
			a.DeletionVector = deletionVectorOf(v[7])
			out = append(out, a)
		}
		if v, ok := r[2].(Row); ok {
			var size *int64
			if v[5] != nil {
				s := asInt64(v[5])
				size = &s
			}
			out = append(out, &Remove{Path: asString(v[0]), DeletionTimestamp: asInt64Ptr(v[1]), DataChange: asBool(v[2]),
				ExtendedFileMetadata: asBool(v[3]), PartitionValues: asNullableStringMap(v[4]), Size: size,
				DeletionVector: deletionVectorOf(v[6])})
		}
		if v, ok := r[3].(Row); ok {
			md := &Metadata{ID: asString(v[0]), Name: asString(v[1]), Description: asString(v[2]),
				SchemaString: asString(v[4]), Configuration: asStringMap(v[6]), CreatedTime: asInt64Ptr(v[7])}
			if f, ok := v[3].(Row); ok {
				md.Format = Format{Provider: asString(f[0]), Options: asStringMap(f[1])}
			}
			if l, ok := v[5].([]any); ok {
				for _, e := range l {
					md.PartitionColumns = append(md.PartitionColumns, asString(e))
				}
			}
			if md.PartitionColumns == nil {
				md.PartitionColumns = []string{}
			}
			if md.Configuration == nil {
				md.Configuration = map[string]string{}
			}
			out = append(out, md)
		}
		if v, ok := r[4].(Row); ok {
			p := &Protocol{MinReaderVersion: int(asInt64(v[0])), MinWriterVersion: int(asInt64(v[1]))}
			for _, e := range asAnySlice(v[2]) {
				p.ReaderFeatures = append(p.ReaderFeatures, asString(e))
			}
			for _, e := range asAnySlice(v[3]) {
				p.WriterFeatures = append(p.WriterFeatures, asString(e))
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}

func asBool(v any) bool {
	b, _ := v.(bool)
	return b
}

func asInt64(v any) int64 {
	n, _ := types.ToInt64(v)
	return n
}

func asInt64Ptr(v any) *int64 {
	if v == nil {
		return nil
	}
	n := asInt64(v)
	return &n
}

func asAnySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func asStringMap(v any) map[string]string {
	entries, ok := v.([]MapEntry)
	if !ok {
		return nil
	}
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		m[asString(e.Key)] = asString(e.Value)
	}
	return m
}

func asNullableStringMap(v any) map[string]*string {
	entries, ok := v.([]MapEntry)
	if !ok {
		return nil
	}
	m := make(map[string]*string, len(entries))
	for _, e := range entries {
		if s, ok := e.Value.(string); ok {
			m[asString(e.Key)] = &s
		} else {
			m[asString(e.Key)] = nil
		}
	}
	return m
}

// CheckpointPolicy says after which commits a writer checkpoints a table.
type CheckpointPolicy struct {
	// Interval is the least number of versions between two checkpoints;
	// zero or less disables checkpoints.
	Interval int64
	// Fixed checkpoints every Interval versions whatever the sizes. When
	// false, a version at least Interval past the last checkpoint is
	// checkpointed only once the commits since that checkpoint are at least
	// as large as it: checkpoints then cost no more bytes than the commits
	// they cover, however many files the table holds, and a reader replays
	// no more JSON than one checkpoint's size.
	Fixed bool
}

// CheckpointDue reports whether version, just committed, should be
// checkpointed under policy p.
func (t *Table) CheckpointDue(version int64, p CheckpointPolicy) (bool, error) {
	if p.Interval <= 0 || version <= 0 {
		return false, nil
	}
	if p.Fixed {
		return version%p.Interval == 0, nil
	}
	lc, err := readLastCheckpoint(t.logDir)
	if err != nil {
		return false, fmt.Errorf("checkpoint due %d: %w", version, err)
	}
	last, size := int64(-1), int64(0)
	if lc != nil {
		last = lc.Version
		if lc.SizeInBytes != nil {
			size = *lc.SizeInBytes
		} else if info, err := os.Stat(filepath.Join(t.logDir, CheckpointFileName(last))); err == nil {
			size = info.Size()
		}
	}
	if version-last < p.Interval {
		return false, nil
	}
	var since int64
	for v := version; v > last && since < size; v-- {
		info, err := os.Stat(filepath.Join(t.logDir, CommitFileName(v)))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return true, nil // a gap in the log: a checkpoint is what reads past it
			}
			return false, fmt.Errorf("checkpoint due %d: %w", version, err)
		}
		since += info.Size()
	}
	return since >= size, nil
}
