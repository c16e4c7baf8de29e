package delta

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/lakeside/lakeside/delta/internal/parquet"
)

// Translation maps the columns of one table's data files onto another
// table's columns of the same names: their physical names and ids, as
// column mapping gives each table its own. A fleet table's files are a
// site's files translated.
type Translation struct {
	byPhysical map[string]*translated // by the path of physical names in the source, joined
}

type translated struct {
	name string // the target's physical name
	id   int32
	same bool // the source's name and id are these
}

// NewTranslation returns the translation of files written under from into
// files of to. Every column of from must be in to under the same name and
// type, or a type to widens it to (CanWiden: readers convert the file's
// values), a struct's fields by the same rule (to's may hold more), or it
// fails with ErrInvalidSchema.
func NewTranslation(from, to *StructType) (*Translation, error) {
	t := &Translation{byPhysical: map[string]*translated{}}
	if err := t.add(nil, from, to); err != nil {
		return nil, fmt.Errorf("translate columns: %w", err)
	}
	return t, nil
}

func (t *Translation) add(prefix []string, from, to *StructType) error {
	for _, f := range from.Fields {
		g, _ := to.Field(f.Name)
		if g == nil {
			return fmt.Errorf("%w: column %q is not in the target", ErrInvalidSchema, f.Name)
		}
		fs, fStruct := f.Type.(*StructType)
		gs, gStruct := g.Type.(*StructType)
		if !(fStruct && gStruct) && f.Type.String() != g.Type.String() && !CanWiden(f.Type, g.Type) {
			return fmt.Errorf("%w: column %q is %s in the source and %s in the target", ErrInvalidSchema, f.Name, f.Type, g.Type)
		}
		path := append(append([]string(nil), prefix...), f.PhysicalName())
		t.byPhysical[joinPath(path)] = &translated{name: g.PhysicalName(), id: int32(g.ColumnID()),
			same: f.PhysicalName() == g.PhysicalName() && f.ColumnID() == g.ColumnID()}
		if fStruct && gStruct {
			// The target's struct may hold more fields: a file without
			// them reads them as null.
			if err := t.add(path, fs, gs); err != nil {
				return err
			}
		}
	}
	return nil
}

// Identity reports whether the translation changes no name nor id: files
// then go to the target as they are.
func (t *Translation) Identity() bool {
	for _, x := range t.byPhysical {
		if !x.same {
			return false
		}
	}
	return true
}

// File writes to dst the data file src of size bytes with its columns
// renamed to the target's, rewriting only its footer, and returns the
// bytes written.
func (t *Translation) File(dst io.Writer, src io.ReaderAt, size int64) (int64, error) {
	return parquet.RenameColumns(dst, src, size, func(path []string) (string, int32, bool) {
		x, ok := t.byPhysical[joinPath(path)]
		if !ok {
			return "", 0, false
		}
		return x.name, x.id, true
	})
}

// Stats returns an add action's stats with their columns keyed by the
// target's physical names.
func (t *Translation) Stats(stats string) (string, error) {
	if stats == "" {
		return "", nil
	}
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader([]byte(stats)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return "", fmt.Errorf("translate stats: %w", err)
	}
	for _, k := range []string{"minValues", "maxValues", "nullCount"} {
		if v, ok := m[k].(map[string]any); ok {
			m[k] = t.rekey(nil, v)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("translate stats: %w", err)
	}
	return string(out), nil
}

func (t *Translation) rekey(prefix []string, v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, x := range v {
		path := append(append([]string(nil), prefix...), k)
		name := k
		if tr, ok := t.byPhysical[joinPath(path)]; ok {
			name = tr.name
		}
		if sub, ok := x.(map[string]any); ok {
			x = t.rekey(path, sub)
		}
		out[name] = x
	}
	return out
}

// PartitionValues returns partition values keyed by the target's physical
// names.
func (t *Translation) PartitionValues(values map[string]*string) map[string]*string {
	out := make(map[string]*string, len(values))
	for k, v := range values {
		if tr, ok := t.byPhysical[joinPath([]string{k})]; ok {
			k = tr.name
		}
		out[k] = v
	}
	return out
}

func joinPath(p []string) string {
	var b bytes.Buffer
	for _, s := range p {
		fmt.Fprintf(&b, "%d:%s", len(s), s)
	}
	return b.String()
}
