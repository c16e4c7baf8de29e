package delta

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/delta/internal/types"
)

// Deletion vectors: a table whose protocol has the deletionVectors
// feature (reader 3 / writer 7, in both feature lists) may give an add
// action a deletion vector, which names rows of its data file that are
// no longer in the table, so that deleting rows rewrites no data file
// (merge-on-read). Readers skip those rows wherever they read a file of
// the table (Snapshot.ScanFiles, ReadDataFile, ReadChanges, RewriteBin).
const (
	// DeletionVectorsFeature is the reader and writer table feature of
	// deletion vectors.
	DeletionVectorsFeature = "deletionVectors"
	// EnableDeletionVectorsKey is the table property that lets writers
	// write new deletion vectors.
	EnableDeletionVectorsKey = "delta.enableDeletionVectors"
)

// impliedWriterFeatures returns the writer features that a writer version
// below 7 implies.
func impliedWriterFeatures(version int) []string {
	var out []string
	for _, f := range []struct {
		version int
		name    string
	}{
		{2, "appendOnly"}, {2, "invariants"},
		{3, "checkConstraints"},
		{4, ChangeDataFeedFeature}, {4, "generatedColumns"},
		{5, ColumnMappingFeature},
		{6, "identityColumns"},
	} {
		if version >= f.version {
			out = append(out, f.name)
		}
	}
	return out
}

// isReaderWriterFeature reports whether a table feature is one of readers
// and writers both, listed in readerFeatures as well as writerFeatures.
func isReaderWriterFeature(name string) bool {
	switch name {
	case ColumnMappingFeature, DeletionVectorsFeature, "timestampNtz", "v2Checkpoint",
		"vacuumProtocolCheck", "catalogManaged", TypeWideningFeature, "variantType":
		return true
	}
	return false
}

// addFeature appends name to list unless it holds it already.
func addFeature(list []string, name string) []string {
	if slices.Contains(list, name) {
		return list
	}
	return append(list, name)
}

// SupportsDeletionVectors reports whether a protocol lets a table hold
// deletion vectors: reader version 3 and writer version 7 with the
// deletionVectors feature in both lists.
func SupportsDeletionVectors(p *Protocol) bool {
	return p.MinReaderVersion >= 3 && p.MinWriterVersion >= 7 &&
		slices.Contains(p.ReaderFeatures, DeletionVectorsFeature) &&
		slices.Contains(p.WriterFeatures, DeletionVectorsFeature)
}

// DeletionVectorsEnabled reports whether writers may write new deletion
// vectors to a table: its protocol supports them and its
// delta.enableDeletionVectors property is true.
func DeletionVectorsEnabled(p *Protocol, md *Metadata) bool {
	return p != nil && md != nil && SupportsDeletionVectors(p) &&
		strings.EqualFold(md.Configuration[EnableDeletionVectorsKey], "true")
}

// DeletionVectorsProtocol returns p raised to support deletion vectors:
// reader version 3 and writer version 7, with deletionVectors in
// readerFeatures and writerFeatures. Table features list explicitly what
// versions below them imply, and the protocol has a writer assume that
// an implied feature was used unless it can prove otherwise, so a
// protocol below writer 7 gets every writer feature its writer version
// implies (appendOnly and invariants from 2, checkConstraints from 3,
// changeDataFeed and generatedColumns from 4, columnMapping from 5,
// identityColumns from 6), and one at reader 2 columnMapping; the reader
// and writer features among them (columnMapping) go in readerFeatures
// too. It returns p itself when it supports deletion vectors already, and
// fails for a protocol at reader 3 without writer 7, which the protocol
// does not allow.
func DeletionVectorsProtocol(p *Protocol) (*Protocol, error) {
	if SupportsDeletionVectors(p) {
		return p, nil
	}
	return featureProtocol(p, DeletionVectorsFeature)
}

// featureProtocol returns p raised to reader version 3 and writer version
// 7 with the reader-writer feature name added to both lists, as
// DeletionVectorsProtocol describes.
func featureProtocol(p *Protocol, name string) (*Protocol, error) {
	if p.MinReaderVersion >= 3 && p.MinWriterVersion < 7 {
		return nil, fmt.Errorf("%w: protocol %d/%d has reader features without writer features",
			ErrCorruptLog, p.MinReaderVersion, p.MinWriterVersion)
	}
	out := &Protocol{MinReaderVersion: 3, MinWriterVersion: 7, WriterFeatures: slices.Clone(p.WriterFeatures)}
	if p.MinWriterVersion < 7 {
		for _, f := range impliedWriterFeatures(p.MinWriterVersion) {
			out.WriterFeatures = addFeature(out.WriterFeatures, f)
		}
	}
	if p.MinReaderVersion == 2 {
		out.WriterFeatures = addFeature(out.WriterFeatures, ColumnMappingFeature)
	}
	if p.MinReaderVersion >= 3 {
		out.ReaderFeatures = slices.Clone(p.ReaderFeatures)
	} else {
		for _, f := range out.WriterFeatures {
			if isReaderWriterFeature(f) {
				out.ReaderFeatures = addFeature(out.ReaderFeatures, f)
			}
		}
	}
	out.ReaderFeatures = addFeature(out.ReaderFeatures, name)
	out.WriterFeatures = addFeature(out.WriterFeatures, name)
	return out, nil
}

// EnableDeletionVectors returns the protocol and metaData actions that let
// writers write deletion vectors to a table with protocol p and metadata
// md: DeletionVectorsProtocol(p), and a copy of md with
// delta.enableDeletionVectors true. The caller commits both in one commit
// (or the protocol alone when it is p itself and md already says so).
func EnableDeletionVectors(p *Protocol, md *Metadata) (*Protocol, *Metadata, error) {
	proto, err := DeletionVectorsProtocol(p)
	if err != nil {
		return nil, nil, fmt.Errorf("enable deletion vectors: %w", err)
	}
	out := *md
	out.Configuration = maps.Clone(md.Configuration)
	if out.Configuration == nil {
		out.Configuration = map[string]string{}
	}
	out.Configuration[EnableDeletionVectorsKey] = "true"
	return proto, &out, nil
}

// WithDeletionVector returns the add action of the logical file that is
// a's data file with the deletion vector d: a copy of a with d in place of
// a's deletion vector, dataChange true, and stats whose tightBounds is
// false, since its bounds are those of every row of the data file, not of
// the rows left (wide bounds, which still hold for data skipping). d
// replaces a's deletion vector: it must hold the rows that one deletes too
// (DeletionVector.Or). The protocol requires a file with a deletion vector
// to have numRecords in its stats, the rows of the data file: without it,
// or with d deleting more rows than that, it fails.
func (a *Add) WithDeletionVector(d *DeletionVectorDescriptor) (*Add, error) {
	if d == nil {
		return nil, fmt.Errorf("add with deletion vector %s: no deletion vector", a.Path)
	}
	stats, numRecords, err := wideStats(a.Stats)
	if err != nil {
		return nil, fmt.Errorf("add with deletion vector %s: %w", a.Path, err)
	}
	if d.Cardinality < 0 || d.Cardinality > numRecords {
		return nil, fmt.Errorf("add with deletion vector %s: it deletes %d rows of %d", a.Path, d.Cardinality, numRecords)
	}
	out := *a
	out.DeletionVector = d.clone()
	out.DataChange = true
	out.Stats = stats
	out.PartitionValues = maps.Clone(a.PartitionValues)
	out.Tags = maps.Clone(a.Tags)
	return &out, nil
}

// DeletionVectorActions returns the actions that delete rows of the logical
// file old in place: the remove of old (its path and deletion vector, see
// RemoveOf) and the add of its data file with the deletion vector d (see
// WithDeletionVector), which must hold old's deleted rows too. When d
// deletes every row of the data file the add is nil: the file leaves the
// table. Both have dataChange true; commit them together, after storing
// d (StoreDeletionVectors), in a table whose protocol supports deletion
// vectors (EnableDeletionVectors).
func DeletionVectorActions(old *Add, d *DeletionVectorDescriptor, deletionMillis int64) (*Remove, *Add, error) {
	add, err := old.WithDeletionVector(d)
	if err != nil {
		return nil, nil, err
	}
	rm := RemoveOf(old, deletionMillis, true)
	if st, err := ParseStats(add.Stats); err == nil && d.Cardinality == st.NumRecords {
		return rm, nil, nil
	}
	return rm, add, nil
}

// wideStats returns stats, a stats string, with tightBounds false, keeping
// its other fields in their order, and its numRecords, which it must have.
func wideStats(stats string) (string, int64, error) {
	if stats == "" {
		return "", 0, errors.New("no stats, so no numRecords")
	}
	dec := json.NewDecoder(strings.NewReader(stats))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", 0, fmt.Errorf("stats %q are not an object", stats)
	}
	var o types.OrderedObject
	numRecords := int64(-1)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", 0, fmt.Errorf("parse stats: %w", err)
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", 0, fmt.Errorf("parse stats: %w", err)
		}
		switch key {
		case "tightBounds":
			continue
		case "numRecords":
			if err := json.Unmarshal(v, &numRecords); err != nil || numRecords < 0 {
				return "", 0, fmt.Errorf("stats numRecords %s", v)
			}
		}
		o.Add(key, v)
	}
	if numRecords < 0 {
		return "", 0, errors.New("stats without numRecords")
	}
	o.Add("tightBounds", false)
	out, err := o.MarshalJSON()
	if err != nil {
		return "", 0, err
	}
	return string(out), numRecords, nil
}
