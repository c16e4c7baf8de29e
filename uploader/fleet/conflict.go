package fleet

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/delta"
)

// winner is what a commit that took a version this site waited for means
// to the site's own commit (docs/fleet.md, "The conflict rules").
type winner int

const (
	// winnerOther is another site's commit that conflicts with nothing:
	// the site's commit follows it at the next version.
	winnerOther winner = iota
	// winnerOwn is the site's own commit: an earlier attempt of the same
	// range whose put landed while its outcome was unknown.
	winnerOwn
	// winnerSchema is a compatible change of the schema or protocol: a
	// data commit follows it as it is, a schema commit is computed anew.
	winnerSchema
)

// classify applies the conflict rules to the actions of a commit that took
// the version w's commit for range end b of appID waited for. It fails
// with an error wrapping ErrConflict when the commit makes w's unsafe.
func (w *Writer) classify(v int64, acts []delta.Action, appID string, b int64) (winner, error) {
	conflict := func(format string, args ...any) (winner, error) {
		return winnerOther, fmt.Errorf("%w: version %d: %s", ErrConflict, v, fmt.Sprintf(format, args...))
	}
	run := ""
	var txn *delta.Txn
	for _, a := range acts {
		if ci, ok := a.(*delta.CommitInfo); ok {
			run = runOf(ci)
		}
		if t, ok := a.(*delta.Txn); ok && t.AppID == appID {
			txn = t
		}
	}
	if txn != nil {
		switch {
		case !slices.Contains(w.runs, run):
			return conflict("appId %s committed by run %q, not one of this site's: another agent holds this site's state", appID, run)
		case txn.Version < b:
			return winnerOther, fmt.Errorf("%w at version %d, up to %d", ErrLanded, v, txn.Version)
		case txn.Version > b:
			return conflict("appId %s at %d where this site commits up to %d", appID, txn.Version, b)
		}
		return winnerOwn, nil
	}
	result := winnerOther
	for _, a := range acts {
		switch a := a.(type) {
		case *delta.Add:
			if w.ownPartition(a.PartitionValues, a.Path) {
				return conflict("adds %s in the partition of site %q", a.Path, w.site)
			}
		case *delta.Remove:
			if w.ownPartition(a.PartitionValues, a.Path) {
				return conflict("removes %s from the partition of site %q", a.Path, w.site)
			}
		case *delta.AddCDC:
			if w.ownPartition(a.PartitionValues, a.Path) {
				return conflict("adds change data %s in the partition of site %q", a.Path, w.site)
			}
		case *delta.Txn:
			if strings.HasPrefix(a.AppID, w.appIDPrefix()) {
				return conflict("appId %s of site %q, not this agent's", a.AppID, w.site)
			}
		case *delta.Protocol:
			if err := checkProtocol(a); err != nil {
				return conflict("%v", err)
			}
			result = winnerSchema
		case *delta.Metadata:
			if err := compatibleMetadata(w.meta, a); err != nil {
				return conflict("%v", err)
			}
			result = winnerSchema
		}
	}
	return result, nil
}

// ownPartition reports whether a file action with these partition values
// and path lies in the site's partition. A remove may lack its partition
// values; its path then tells.
func (w *Writer) ownPartition(values map[string]*string, path string) bool {
	if v, ok := values[w.sitePhysical]; ok {
		return v != nil && *v == w.site
	}
	return strings.HasPrefix(path, w.prefix)
}

// knownWriterFeatures are the writer features a site respects in a fleet
// table: what it writes keeps the rules each of them sets.
// The features a writer version of 2 to 5 implies are among them: a site
// never removes from a table whose delta.appendOnly is true (Commit), and
// refuses a table with invariants, CHECK constraints or generated columns
// (setMetadata), which it would not check.
var knownWriterFeatures = []string{"appendOnly", "invariants", "checkConstraints", "generatedColumns",
	delta.ColumnMappingFeature, delta.ChangeDataFeedFeature, delta.DeletionVectorsFeature, delta.TypeWideningFeature, "timestampNtz"}

// knownReaderFeatures are the reader features a site writes correctly.
var knownReaderFeatures = []string{delta.ColumnMappingFeature, delta.DeletionVectorsFeature, delta.TypeWideningFeature, "timestampNtz"}

// checkProtocol fails unless a site can read and write a table of protocol
// p. It never lowers what another site raised, so a protocol it cannot keep
// stops it.
func checkProtocol(p *delta.Protocol) error {
	if p.MinReaderVersion > 3 || p.MinWriterVersion > 7 {
		return fmt.Errorf("protocol %d/%d is newer than this agent", p.MinReaderVersion, p.MinWriterVersion)
	}
	if p.MinReaderVersion == 3 {
		for _, f := range p.ReaderFeatures {
			if !slices.Contains(knownReaderFeatures, f) {
				return fmt.Errorf("reader feature %s is not one this agent writes", f)
			}
		}
	}
	if p.MinWriterVersion == 7 {
		for _, f := range p.WriterFeatures {
			if !slices.Contains(knownWriterFeatures, f) {
				return fmt.Errorf("writer feature %s is not one this agent respects", f)
			}
		}
	}
	return nil
}

// compatibleMetadata fails unless next only adds columns to prev: the same
// table, partition columns and column mapping, and every column of prev
// still there under the same id, physical name and type. A file written
// under prev then reads the same under next.
func compatibleMetadata(prev, next *delta.Metadata) error {
	if prev == nil {
		return nil
	}
	if prev.ID != next.ID {
		return fmt.Errorf("table id changed from %s to %s: the table was replaced", prev.ID, next.ID)
	}
	if !slices.Equal(prev.PartitionColumns, next.PartitionColumns) {
		return fmt.Errorf("partition columns changed from %v to %v", prev.PartitionColumns, next.PartitionColumns)
	}
	for _, k := range []string{delta.ColumnMappingModeKey, "delta.appendOnly", "delta.setTransactionRetentionDuration",
		delta.EnableChangeDataFeedKey, "lakeside.key", "lakeside.multiset"} {
		if prev.Configuration[k] != next.Configuration[k] {
			return fmt.Errorf("table property %s changed from %q to %q", k, prev.Configuration[k], next.Configuration[k])
		}
	}
	before, err := prev.Schema()
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	after, err := next.Schema()
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	return compatibleFields("", before, after)
}

// compatibleFields fails unless every field of before is in after under
// the same id, physical name and type or a wider one (delta.CanWiden), a
// struct's fields by the same rule (after's may hold more).
func compatibleFields(prefix string, before, after *delta.StructType) error {
	for _, f := range before.Fields {
		g, _ := after.Field(f.Name)
		name := prefix + f.Name
		switch {
		case g == nil:
			return fmt.Errorf("column %q was dropped or renamed", name)
		case g.ColumnID() != f.ColumnID() || g.PhysicalName() != f.PhysicalName():
			return fmt.Errorf("column %q changed its id or physical name", name)
		}
		fs, fStruct := f.Type.(*delta.StructType)
		gs, gStruct := g.Type.(*delta.StructType)
		if fStruct && gStruct {
			if err := compatibleFields(name+".", fs, gs); err != nil {
				return err
			}
			continue
		}
		if f.Type.String() != g.Type.String() && !delta.CanWiden(f.Type, g.Type) {
			return fmt.Errorf("column %q changed its type from %s to %s", name, f.Type, g.Type)
		}
	}
	return nil
}
