package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// Action is one action of a Delta commit: *Protocol, *Metadata, *Add,
// *Remove, *AddCDC, *CommitInfo or *Txn.
type Action interface {
	// ActionName returns the key of the action in the log ("add", "metaData"...).
	ActionName() string
}

// Protocol is the protocol action: the reader and writer versions a client
// needs, and at versions 3 and 7 the table features.
type Protocol struct {
	MinReaderVersion int      `json:"minReaderVersion"`
	MinWriterVersion int      `json:"minWriterVersion"`
	ReaderFeatures   []string `json:"readerFeatures,omitempty"`
	WriterFeatures   []string `json:"writerFeatures,omitempty"`
}

// ActionName returns "protocol".
func (*Protocol) ActionName() string { return "protocol" }

// DefaultProtocol returns the protocol this package writes unless a feature
// needs more: reader version 1, writer version 2.
func DefaultProtocol() *Protocol { return &Protocol{MinReaderVersion: 1, MinWriterVersion: 2} }

// MarshalJSON writes the feature lists exactly when the versions require them.
func (p *Protocol) MarshalJSON() ([]byte, error) {
	type out struct {
		MinReaderVersion int       `json:"minReaderVersion"`
		MinWriterVersion int       `json:"minWriterVersion"`
		ReaderFeatures   *[]string `json:"readerFeatures,omitempty"`
		WriterFeatures   *[]string `json:"writerFeatures,omitempty"`
	}
	o := out{MinReaderVersion: p.MinReaderVersion, MinWriterVersion: p.MinWriterVersion}
	rf, wf := nonNil(p.ReaderFeatures), nonNil(p.WriterFeatures)
	if p.MinReaderVersion >= 3 || len(rf) > 0 {
		o.ReaderFeatures = &rf
	}
	if p.MinWriterVersion >= 7 || len(wf) > 0 {
		o.WriterFeatures = &wf
	}
	return json.Marshal(o)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Format is the format of a table's data files.
type Format struct {
	Provider string            `json:"provider"`
	Options  map[string]string `json:"options"`
}

// Metadata is the metaData action: schema, partition columns and
// configuration of the table.
type Metadata struct {
	ID               string            `json:"id"`
	Name             string            `json:"name,omitempty"`
	Description      string            `json:"description,omitempty"`
	Format           Format            `json:"format"`
	SchemaString     string            `json:"schemaString"`
	PartitionColumns []string          `json:"partitionColumns"`
	Configuration    map[string]string `json:"configuration"`
	CreatedTime      *int64            `json:"createdTime,omitempty"`
}

// ActionName returns "metaData".
func (*Metadata) ActionName() string { return "metaData" }

// NewMetadata returns a metaData action for a new table with a random id, the
// parquet format, and createdTime set to createdMillis.
func NewMetadata(schema *StructType, partitionColumns []string, configuration map[string]string, createdMillis int64) (*Metadata, error) {
	ss, err := schema.SchemaString()
	if err != nil {
		return nil, err
	}
	for _, pc := range partitionColumns {
		if f, _ := schema.Field(pc); f == nil {
			return nil, fmt.Errorf("%w: partition column %q not in schema", ErrInvalidSchema, pc)
		}
	}
	id, err := newUUID()
	if err != nil {
		return nil, err
	}
	if partitionColumns == nil {
		partitionColumns = []string{}
	}
	if configuration == nil {
		configuration = map[string]string{}
	}
	ct := createdMillis
	return &Metadata{
		ID:               id,
		Format:           Format{Provider: "parquet", Options: map[string]string{}},
		SchemaString:     ss,
		PartitionColumns: partitionColumns,
		Configuration:    configuration,
		CreatedTime:      &ct,
	}, nil
}

// Schema parses the schemaString.
func (m *Metadata) Schema() (*StructType, error) { return ParseSchema(m.SchemaString) }

// MarshalJSON writes empty maps and lists rather than null.
func (m *Metadata) MarshalJSON() ([]byte, error) {
	type plain Metadata
	c := plain(*m)
	if c.Format.Options == nil {
		c.Format.Options = map[string]string{}
	}
	if c.PartitionColumns == nil {
		c.PartitionColumns = []string{}
	}
	if c.Configuration == nil {
		c.Configuration = map[string]string{}
	}
	return json.Marshal(c)
}

// Add is the add action: a data file that is part of the table.
type Add struct {
	// Path is the file path relative to the table root, URI-encoded.
	Path string `json:"path"`
	// PartitionValues maps every partition column to its serialised value;
	// nil means null.
	PartitionValues  map[string]*string `json:"partitionValues"`
	Size             int64              `json:"size"`
	ModificationTime int64              `json:"modificationTime"`
	DataChange       bool               `json:"dataChange"`
	// Stats is the JSON statistics string (see Stats).
	Stats string            `json:"stats,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	// DeletionVector, when not nil, names the rows of the data file that
	// the logical file does not hold (see ReadDataFile). The logical file
	// is the path and the deletion vector's unique id together.
	DeletionVector          *DeletionVectorDescriptor `json:"deletionVector,omitempty"`
	BaseRowID               *int64                    `json:"baseRowId,omitempty"`
	DefaultRowCommitVersion *int64                    `json:"defaultRowCommitVersion,omitempty"`
}

// ActionName returns "add".
func (*Add) ActionName() string { return "add" }

// MarshalJSON writes partitionValues as {} when empty.
func (a *Add) MarshalJSON() ([]byte, error) {
	type plain Add
	c := plain(*a)
	if c.PartitionValues == nil {
		c.PartitionValues = map[string]*string{}
	}
	return json.Marshal(c)
}

// HasDeletionVector reports whether the file carries a deletion vector.
func (a *Add) HasDeletionVector() bool { return a.DeletionVector != nil }

// Remove is the remove action: a tombstone for a file no longer in the table.
type Remove struct {
	Path                 string             `json:"path"`
	DeletionTimestamp    *int64             `json:"deletionTimestamp,omitempty"`
	DataChange           bool               `json:"dataChange"`
	ExtendedFileMetadata bool               `json:"extendedFileMetadata,omitempty"`
	PartitionValues      map[string]*string `json:"partitionValues,omitempty"`
	Size                 *int64             `json:"size,omitempty"`
	Stats                string             `json:"stats,omitempty"`
	Tags                 map[string]string  `json:"tags,omitempty"`
	// DeletionVector is that of the logical file removed: the path and
	// its unique id identify it.
	DeletionVector *DeletionVectorDescriptor `json:"deletionVector,omitempty"`
}

// ActionName returns "remove".
func (*Remove) ActionName() string { return "remove" }

// MarshalJSON writes partitionValues whenever extendedFileMetadata is true.
func (r *Remove) MarshalJSON() ([]byte, error) {
	type plain Remove // the same fields, without this method
	c := plain(*r)
	if !c.ExtendedFileMetadata {
		return json.Marshal(c)
	}
	// With extendedFileMetadata the partition values must be present, even
	// when empty, which omitempty cannot express: these fields shadow the
	// embedded ones.
	pv := c.PartitionValues
	if pv == nil {
		pv = map[string]*string{}
	}
	return json.Marshal(struct {
		plain
		ExtendedFileMetadata bool               `json:"extendedFileMetadata"`
		PartitionValues      map[string]*string `json:"partitionValues"`
	}{c, true, pv})
}

// RemoveOf returns a remove action for a file of the table, with
// extendedFileMetadata, its partition values, size and deletion vector (the
// logical file's), deleted at deletionMillis.
func RemoveOf(a *Add, deletionMillis int64, dataChange bool) *Remove {
	size := a.Size
	ts := deletionMillis
	pv := make(map[string]*string, len(a.PartitionValues))
	for k, v := range a.PartitionValues {
		pv[k] = v
	}
	return &Remove{
		Path:                 a.Path,
		DeletionTimestamp:    &ts,
		DataChange:           dataChange,
		ExtendedFileMetadata: true,
		PartitionValues:      pv,
		Size:                 &size,
		DeletionVector:       a.DeletionVector.clone(),
	}
}

// Txn is the txn action: the progress of an application writing to the
// table, used for exactly-once writes.
type Txn struct {
	AppID       string `json:"appId"`
	Version     int64  `json:"version"`
	LastUpdated *int64 `json:"lastUpdated,omitempty"`
}

// ActionName returns "txn".
func (*Txn) ActionName() string { return "txn" }

// CommitInfo is the commitInfo action: provenance of a commit. Fields the
// struct does not name are kept in Extra, both when reading and writing.
type CommitInfo struct {
	// Timestamp is the commit time in milliseconds since the epoch. Commit
	// fills it in when it is zero.
	Timestamp           int64
	Operation           string
	OperationParameters map[string]any
	ReadVersion         *int64
	IsolationLevel      string
	IsBlindAppend       *bool
	OperationMetrics    map[string]any
	// EngineInfo identifies the writer, for example "lakeside/1.2.0".
	EngineInfo string
	// Extra holds any other fields, for example an LSN range.
	Extra map[string]any
}

// ActionName returns "commitInfo".
func (*CommitInfo) ActionName() string { return "commitInfo" }

func isKnownCommitInfoKey(k string) bool {
	switch k {
	case "timestamp", "operation", "operationParameters", "readVersion",
		"isolationLevel", "isBlindAppend", "operationMetrics", "engineInfo":
		return true
	}
	return false
}

// MarshalJSON writes the known fields first, then Extra sorted by key.
func (c *CommitInfo) MarshalJSON() ([]byte, error) {
	var o types.OrderedObject
	o.Add("timestamp", c.Timestamp)
	if c.Operation != "" {
		o.Add("operation", c.Operation)
	}
	params := c.OperationParameters
	if params == nil {
		params = map[string]any{}
	}
	o.Add("operationParameters", params)
	if c.ReadVersion != nil {
		o.Add("readVersion", *c.ReadVersion)
	}
	if c.IsolationLevel != "" {
		o.Add("isolationLevel", c.IsolationLevel)
	}
	if c.IsBlindAppend != nil {
		o.Add("isBlindAppend", *c.IsBlindAppend)
	}
	if c.OperationMetrics != nil {
		o.Add("operationMetrics", c.OperationMetrics)
	}
	if c.EngineInfo != "" {
		o.Add("engineInfo", c.EngineInfo)
	}
	keys := make([]string, 0, len(c.Extra))
	for k := range c.Extra {
		if !isKnownCommitInfoKey(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		o.Add(k, c.Extra[k])
	}
	return o.MarshalJSON()
}

// UnmarshalJSON reads the known fields and keeps the others in Extra.
func (c *CommitInfo) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*c = CommitInfo{}
	dec := func(key string, dst any) {
		if raw, ok := m[key]; ok {
			// Foreign writers sometimes use other types; ignore mismatches.
			_ = json.Unmarshal(raw, dst)
			delete(m, key)
		}
	}
	dec("timestamp", &c.Timestamp)
	dec("operation", &c.Operation)
	dec("operationParameters", &c.OperationParameters)
	dec("readVersion", &c.ReadVersion)
	dec("isolationLevel", &c.IsolationLevel)
	dec("isBlindAppend", &c.IsBlindAppend)
	dec("operationMetrics", &c.OperationMetrics)
	dec("engineInfo", &c.EngineInfo)
	if len(m) > 0 {
		c.Extra = make(map[string]any, len(m))
		for k, raw := range m {
			var v any
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			if err := d.Decode(&v); err == nil {
				c.Extra[k] = v
			}
		}
	}
	return nil
}

// actionLine is one line of a commit file.
type actionLine struct {
	Add        *Add        `json:"add,omitempty"`
	Remove     *Remove     `json:"remove,omitempty"`
	MetaData   *Metadata   `json:"metaData,omitempty"`
	Protocol   *Protocol   `json:"protocol,omitempty"`
	Txn        *Txn        `json:"txn,omitempty"`
	CommitInfo *CommitInfo `json:"commitInfo,omitempty"`
	CDC        *AddCDC     `json:"cdc,omitempty"`
}

func (l *actionLine) action() Action {
	switch {
	case l.Add != nil:
		return l.Add
	case l.Remove != nil:
		return l.Remove
	case l.MetaData != nil:
		return l.MetaData
	case l.Protocol != nil:
		return l.Protocol
	case l.Txn != nil:
		return l.Txn
	case l.CommitInfo != nil:
		return l.CommitInfo
	case l.CDC != nil:
		return l.CDC
	}
	return nil
}

// marshalAction returns the single-line JSON form of an action, such as
// {"add":{...}}.
func marshalAction(a Action) ([]byte, error) {
	var l actionLine
	switch a := a.(type) {
	case *Add:
		l.Add = a
	case *Remove:
		l.Remove = a
	case *Metadata:
		l.MetaData = a
	case *Protocol:
		l.Protocol = a
	case *Txn:
		l.Txn = a
	case *CommitInfo:
		l.CommitInfo = a
	case *AddCDC:
		l.CDC = a
	default:
		return nil, fmt.Errorf("marshal action: unknown action %T", a)
	}
	return json.Marshal(&l)
}

// parseActions parses newline-delimited JSON actions. Unknown action kinds
// (domainMetadata...) are skipped.
func parseActions(data []byte) ([]Action, error) {
	var out []Action
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var l actionLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptLog, err)
		}
		if a := l.action(); a != nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// Stats are the per-file statistics of an add action, decoded from its stats
// string. Values are decoded JSON (numbers as json.Number).
type Stats struct {
	NumRecords int64          `json:"numRecords"`
	MinValues  map[string]any `json:"minValues,omitempty"`
	MaxValues  map[string]any `json:"maxValues,omitempty"`
	NullCount  map[string]any `json:"nullCount,omitempty"`
}

// ParseStats decodes an add action's stats string.
func ParseStats(s string) (*Stats, error) {
	var st Stats
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	if err := d.Decode(&st); err != nil {
		return nil, fmt.Errorf("parse stats: %w", err)
	}
	return &st, nil
}
