package delta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultCheckpointInterval is the number of versions between two
// checkpoints written by Commit unless WithCheckpointInterval says otherwise.
const DefaultCheckpointInterval = 10

// Table is a Delta table in a local directory. A Table holds no state about
// the log beyond its configuration; every read lists the log again, so a
// Table may be shared by goroutines.
type Table struct {
	root               string
	logDir             string
	checkpointInterval int64
	logger             *slog.Logger
	now                func() time.Time
}

// Option configures a Table.
type Option func(*Table)

// WithCheckpointInterval makes Commit write a checkpoint after every commit
// whose version is a positive multiple of n. Zero or a negative n disables
// automatic checkpoints.
func WithCheckpointInterval(n int64) Option { return func(t *Table) { t.checkpointInterval = n } }

// WithLogger sets the logger used for problems that do not fail an
// operation, such as a checkpoint that could not be written after a
// successful commit.
func WithLogger(l *slog.Logger) Option { return func(t *Table) { t.logger = l } }

// WithClock sets the clock used for commit timestamps and tombstone expiry.
func WithClock(now func() time.Time) Option { return func(t *Table) { t.now = now } }

// New returns a handle on the table at path without checking that it exists;
// use it to create a table by committing version 0.
func New(path string, opts ...Option) *Table {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = filepath.Clean(path)
	}
	t := &Table{
		root:               abs,
		logDir:             filepath.Join(abs, LogDirName),
		checkpointInterval: DefaultCheckpointInterval,
		logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		now:                time.Now,
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Open returns the table at path. It fails with an error wrapping
// ErrNotATable when the path holds no Delta log.
func Open(ctx context.Context, path string, opts ...Option) (*Table, error) {
	t := New(path, opts...)
	l, err := listLog(ctx, t.logDir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if l.maxVersion < 0 {
		return nil, fmt.Errorf("open %s: %w: empty %s", path, ErrNotATable, LogDirName)
	}
	return t, nil
}

// TableDirs returns the names of the subdirectories of root that hold a
// Delta log, sorted; none when root does not exist. Names starting with
// "." are passed over.
func TableDirs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(root, e.Name(), LogDirName)); err == nil && fi.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Path returns the absolute path of the table root.
func (t *Table) Path() string { return t.root }

// LogPath returns the absolute path of the _delta_log directory.
func (t *Table) LogPath() string { return t.logDir }

// Create creates a new table at path by committing version 0 with a protocol,
// a metaData action for the schema, partition columns and configuration, and
// info (a commitInfo with operation "CREATE TABLE" when nil). The protocol is
// reader 1 / writer 2, or reader 3 / writer 7 with the timestampNtz feature
// when the schema has a timestamp_ntz column. It fails with an error wrapping
// ErrVersionExists when the table already exists.
//
// When configuration sets ColumnMappingModeKey to ColumnMappingName, the
// table starts in column mapping mode name: every field without an id gets
// one and a physical name "col-<uuid>" (AssignColumnIDs), the configuration
// gets delta.columnMapping.maxColumnId, and the protocol supports column
// mapping (reader 2 / writer 5, or the columnMapping feature at 3 / 7).
// With delta.enableChangeDataFeed true the protocol covers the change data
// feed too (ChangeDataFeedProtocol), and with delta.enableDeletionVectors
// true deletion vectors (DeletionVectorsProtocol). Mode id is refused with an error wrapping ErrUnsupportedFeature.
func Create(ctx context.Context, path string, schema *StructType, partitionColumns []string,
	configuration map[string]string, info *CommitInfo, opts ...Option) (*Table, error) {
	t := New(path, opts...)
	proto := DefaultProtocol()
	if usesType(schema, TypeTimestampNTZ) {
		proto = &Protocol{MinReaderVersion: 3, MinWriterVersion: 7,
			ReaderFeatures: []string{"timestampNtz"}, WriterFeatures: []string{"timestampNtz"}}
	}
	switch m := strings.ToLower(configuration[ColumnMappingModeKey]); m {
	case "", ColumnMappingNone:
	case ColumnMappingName:
		var err error
		if schema, configuration, err = mappedSchema(schema, configuration); err != nil {
			return nil, fmt.Errorf("create table: %w", err)
		}
		if proto, err = columnMappingProtocol(proto); err != nil {
			return nil, fmt.Errorf("create table: %w", err)
		}
	default:
		return nil, fmt.Errorf("create table: %w: column mapping mode %q", ErrUnsupportedFeature, m)
	}
	if configuration[EnableChangeDataFeedKey] == "true" {
		proto = ChangeDataFeedProtocol(proto)
	}
	if strings.EqualFold(configuration[EnableDeletionVectorsKey], "true") {
		var err error
		if proto, err = DeletionVectorsProtocol(proto); err != nil {
			return nil, fmt.Errorf("create table: %w", err)
		}
	}
	md, err := NewMetadata(schema, partitionColumns, configuration, t.now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	if info == nil {
		info = &CommitInfo{Operation: "CREATE TABLE"}
	}
	if _, err := t.Commit(ctx, -1, []Action{info, proto, md}); err != nil {
		return nil, fmt.Errorf("create table: %w", err)
	}
	return t, nil
}

// mappedSchema returns the schema and configuration of a new table in
// column mapping mode name: fields without ids get theirs, and the
// configuration, copied, its maxColumnId.
func mappedSchema(schema *StructType, configuration map[string]string) (*StructType, map[string]string, error) {
	start := (&Metadata{Configuration: configuration}).MaxColumnID()
	st, maxID, err := AssignColumnIDs(schema, start)
	if err != nil {
		return nil, nil, err
	}
	if err := checkColumnMapping(st); err != nil {
		return nil, nil, err
	}
	conf := maps.Clone(configuration)
	conf[ColumnMappingMaxIDKey] = strconv.FormatInt(maxID, 10)
	return st, conf, nil
}

// usesType reports whether a data type contains the primitive type p.
func usesType(dt DataType, p PrimitiveType) bool {
	switch dt := dt.(type) {
	case PrimitiveType:
		return dt == p
	case *StructType:
		for _, f := range dt.Fields {
			if usesType(f.Type, p) {
				return true
			}
		}
	case *ArrayType:
		return usesType(dt.ElementType, p)
	case *MapType:
		return usesType(dt.KeyType, p) || usesType(dt.ValueType, p)
	}
	return false
}

// fsyncDir flushes a directory entry list to stable storage.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFileSync writes data to a new file and flushes it to stable storage.
func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// mkdirAllSync creates dir and its missing parents, flushing each parent
// whose entry list changed.
func mkdirAllSync(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return fsyncDir(parent)
}
