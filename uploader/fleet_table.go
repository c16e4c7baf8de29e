package uploader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader/fleet"
)

// MaxFleetActions caps the file actions of one fleet commit, so that no
// commit is huge; a site's first commit of a table, its whole snapshot,
// is the exception, so that no reader sees half a partition.
const MaxFleetActions = 10_000

// FleetTable publishes one local table into the fleet table of the same
// name (docs/fleet.md). Each Sync commits the local versions the fleet
// does not hold yet, as ranges of their net effect: files added and
// removed inside a range never go up. The site's files are translated to
// the fleet's column names (a footer rewrite) and put under its partition.
// A FleetTable is not safe for concurrent use.
type FleetTable struct {
	client ReplicaClient // rooted at the fleet, not at the site
	store  fleet.Store
	local  *delta.Table
	name   string // the directory name, locally and in the fleet
	kind   string // "changelog" or "mirror"
	opts   fleet.Options
	tmpDir string
	w      *fleet.Writer
	trs    map[string]*delta.Translation // by local schema string

	// Limit, when set, wraps every body the table uploads (the
	// uploader's bandwidth limit); Uploaded, when set, is told the bytes
	// of every object put.
	Limit    func(ctx context.Context, r io.Reader) io.Reader
	Uploaded func(bytes int64)
}

// NewFleetTable returns the publisher of the local table at root, of kind
// "changelog" or "mirror", into the fleet on client. Translated files are
// staged in tmpDir, and so are the fleet's checkpoints unless
// opts.ScratchDir says otherwise.
func NewFleetTable(client ReplicaClient, root, kind, tmpDir string, opts fleet.Options) *FleetTable {
	if opts.ScratchDir == "" {
		opts.ScratchDir = tmpDir
	}
	f := &FleetTable{client: client, local: delta.New(root, delta.WithCheckpointInterval(0)),
		name: filepath.Base(root), kind: kind, opts: opts, tmpDir: tmpDir, trs: map[string]*delta.Translation{}}
	f.store = countingStore{Store: FleetStore(client), f: f}
	return f
}

// countingStore tells its FleetTable's Uploaded of the commits and
// checkpoints it puts.
type countingStore struct {
	fleet.Store
	f *FleetTable
}

func (s countingStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	err := s.Store.PutIfAbsent(ctx, key, data)
	if err == nil {
		s.f.uploaded(int64(len(data)))
	}
	return err
}

func (s countingStore) Put(ctx context.Context, key string, data []byte) error {
	err := s.Store.Put(ctx, key, data)
	if err == nil {
		s.f.uploaded(int64(len(data)))
	}
	return err
}

func (f *FleetTable) uploaded(n int64) {
	if f.Uploaded != nil {
		f.Uploaded(n)
	}
}

// Writer returns the fleet writer, once a Sync opened the fleet table.
func (f *FleetTable) Writer() *fleet.Writer { return f.w }

// Sync commits into the fleet every local version it does not hold yet,
// and returns the local version the fleet then holds.
func (f *FleetTable) Sync(ctx context.Context) (int64, error) {
	snap, err := f.local.Snapshot(ctx)
	if err != nil {
		return -1, fmt.Errorf("fleet %s: %w: %w", f.name, ErrLocal, err)
	}
	if f.w == nil {
		proto, md, err := fleetMetadata(snap)
		if err != nil {
			return -1, fmt.Errorf("fleet %s: %w", f.name, err)
		}
		if f.w, err = fleet.Create(ctx, f.store, f.name, proto, md, f.opts); err != nil {
			return -1, fmt.Errorf("fleet %s: %w", f.name, err)
		}
	}
	if err := sharedSettings(snap, f.w.Metadata()); err != nil {
		return -1, fmt.Errorf("fleet %s: %w", f.name, err)
	}
	appID := f.w.AppID(f.kind, snap.Metadata().ID)
	for {
		held, _, ok := f.w.Progress(appID)
		if ok && held >= snap.Version() {
			return held, nil
		}
		err := f.commitNext(ctx, snap, appID, held, ok)
		if errors.Is(err, fleet.ErrLanded) {
			continue // Progress says where the fleet stands now
		}
		if err != nil {
			return -1, fmt.Errorf("fleet %s: %w", f.name, err)
		}
	}
}

// commitNext commits the next range: the whole snapshot when the fleet
// holds nothing of the table, else the versions after held.
func (f *FleetTable) commitNext(ctx context.Context, snap *delta.Snapshot, appID string, held int64, ok bool) error {
	if !ok {
		tr, err := f.translation(ctx, snap.Schema())
		if err != nil {
			return err
		}
		var acts []delta.Action
		for _, a := range snap.Files() {
			c := *a
			c.DataChange = true // new to the fleet, whatever made it locally
			acts = append(acts, &c)
		}
		return f.commitRange(ctx, appID, snap.Version(), f.positionAt(ctx, snap.Version()), "WRITE", acts,
			func(string) (*delta.Translation, error) { return tr, nil }, snap.Schema())
	}
	base, err := f.local.SnapshotAt(ctx, held)
	if err != nil {
		return fmt.Errorf("%w: the fleet holds this table up to version %d, which the local log no longer reads (%w): resync the table", ErrLocal, held, err)
	}
	schema := base.Schema()
	schemas := map[string]*delta.StructType{} // by the path of each file the range adds
	var acts []delta.Action
	operation, end, lsn := "", held, int64(0)
	for v := held + 1; v <= snap.Version(); v++ {
		commit, err := f.local.ReadCommit(ctx, v)
		if err != nil {
			return fmt.Errorf("%w: version %d: %w", ErrLocal, v, err)
		}
		files, op, dataChange, md := splitCommit(commit)
		if md != nil {
			st, err := md.Schema()
			if err != nil {
				return fmt.Errorf("%w: version %d: %w", ErrLocal, v, err)
			}
			schema = st
		}
		// A rewrite that changes no data goes in a range of its own:
		// folded into a data range, its removes would read as deletes.
		if len(acts) > 0 && (!dataChange || operation == "OPTIMIZE" || len(acts)+len(files) > MaxFleetActions) {
			break
		}
		for _, a := range files {
			if add, ok := a.(*delta.Add); ok {
				schemas[add.Path] = schema
			}
		}
		acts, end = append(acts, files...), v
		if l, ok := commitLSN(commit); ok {
			lsn = l
		}
		if operation == "" {
			operation = op
		} else if op != operation {
			operation = "MERGE"
		}
		if !dataChange {
			operation = "OPTIMIZE"
		}
	}
	if end == held {
		return fmt.Errorf("%w: version %d holds more than %d file actions", ErrLocal, held+1, MaxFleetActions)
	}
	byPath := func(path string) (*delta.Translation, error) {
		if st := schemas[path]; st != nil {
			return f.translation(ctx, st)
		}
		return f.translation(ctx, schema)
	}
	return f.commitRange(ctx, appID, end, lsn, operation, netEffect(acts), byPath, schema)
}

// splitCommit returns a local commit's file actions, its operation,
// whether it changes data, and its metaData action if any.
func splitCommit(acts []delta.Action) (files []delta.Action, op string, dataChange bool, md *delta.Metadata) {
	for _, a := range acts {
		switch a := a.(type) {
		case *delta.Add:
			files, dataChange = append(files, a), dataChange || a.DataChange
		case *delta.Remove:
			files, dataChange = append(files, a), dataChange || a.DataChange
		case *delta.AddCDC:
			files, dataChange = append(files, a), true
		case *delta.CommitInfo:
			op = a.Operation
		case *delta.Metadata:
			md = a
		}
	}
	if len(files) == 0 {
		dataChange = true // a schema or property change: no file moves
	}
	return files, op, dataChange, md
}

// netEffect returns the actions of a range as one commit: a file added and
// removed inside the range (the same path and deletion vector) is dropped
// both times, as it never needs to go up.
func netEffect(acts []delta.Action) []delta.Action {
	key := func(path string, d *delta.DeletionVectorDescriptor) string {
		if d == nil {
			return path
		}
		return path + "\x00" + d.UniqueID()
	}
	added := map[string]int{} // key to index in out
	var out []delta.Action
	for _, a := range acts {
		switch a := a.(type) {
		case *delta.Add:
			added[key(a.Path, a.DeletionVector)] = len(out)
			out = append(out, a)
		case *delta.Remove:
			k := key(a.Path, a.DeletionVector)
			if i, ok := added[k]; ok {
				out[i] = nil
				delete(added, k)
				continue
			}
			out = append(out, a)
		default:
			out = append(out, a)
		}
	}
	return slices.DeleteFunc(out, func(a delta.Action) bool { return a == nil })
}

// commitRange uploads the files the actions add, translated, and commits
// the actions in the fleet's terms as the range up to local version end,
// with the source position lsn (0: none, the position stays as it was).
func (f *FleetTable) commitRange(ctx context.Context, appID string, end, lsn int64, operation string, acts []delta.Action,
	translationOf func(path string) (*delta.Translation, error), schema *delta.StructType) error {
	if err := f.ensureColumns(ctx, schema); err != nil {
		return err
	}
	site := f.w.SitePartition()
	partition := func(tr *delta.Translation, local map[string]*string) map[string]*string {
		pv := tr.PartitionValues(local)
		for k, v := range site {
			pv[k] = v
		}
		return pv
	}
	var out []delta.Action
	for _, a := range acts {
		tr, err := translationOf(actionPath(a))
		if err != nil {
			return err
		}
		switch a := a.(type) {
		case *delta.Add:
			size, err := f.upload(ctx, a.Path, tr)
			if err != nil {
				return err
			}
			if err := f.uploadVector(ctx, a.DeletionVector); err != nil {
				return err
			}
			stats, err := tr.Stats(a.Stats)
			if err != nil {
				return err
			}
			c := *a
			c.Path, c.Size, c.Stats, c.PartitionValues = f.fleetPath(a.Path), size, stats, partition(tr, a.PartitionValues)
			out = append(out, &c)
		case *delta.Remove:
			c := *a
			c.Path, c.PartitionValues = f.fleetPath(a.Path), partition(tr, a.PartitionValues)
			c.Size = nil // the fleet's copy has its own size
			out = append(out, &c)
		case *delta.AddCDC:
			size, err := f.upload(ctx, a.Path, tr)
			if err != nil {
				return err
			}
			c := *a
			c.Path, c.Size, c.PartitionValues = f.fleetPath(a.Path), size, partition(tr, a.PartitionValues)
			out = append(out, &c)
		}
	}
	r := fleet.Range{AppID: appID, Version: end, Actions: out, Operation: operation}
	if lsn > 0 {
		r.Position = &fleet.Position{AppID: f.w.PositionAppID(f.kind), Version: lsn}
	}
	_, err := f.w.Commit(ctx, r)
	return err
}

// actionPath returns the path of a file action, or "".
func actionPath(a delta.Action) string {
	switch a := a.(type) {
	case *delta.Add:
		return a.Path
	case *delta.Remove:
		return a.Path
	case *delta.AddCDC:
		return a.Path
	}
	return ""
}

// fleetPath returns where a local file goes in the fleet table (see
// fleetObjectPath).
func (f *FleetTable) fleetPath(path string) string { return fleetObjectPath(f.w.SiteDir(), path) }

// fleetObjectPath returns where the local file at path, relative to its
// table, goes in the fleet table of a site whose directory is siteDir: a
// data file under siteDir, a change data file under
// _change_data/<siteDir>, a deletion vector file where it is (its name is
// unique, and its descriptor names it from the table's root).
func fleetObjectPath(siteDir, path string) string {
	if strings.HasPrefix(filepath.Base(path), "deletion_vector_") {
		return path
	}
	if rest, ok := strings.CutPrefix(path, "_change_data/"); ok {
		return "_change_data/" + siteDir + rest
	}
	return siteDir + path
}

// upload puts the local data file at path, translated (as it is when the
// translation changes nothing: the site that created the fleet table),
// under its fleet path unless it is there already, and returns its size
// in the fleet. A
// fleet file's name is its local file's, and the translation of a file is
// always the same bytes, so a file found there is this one.
func (f *FleetTable) upload(ctx context.Context, path string, tr *delta.Translation) (int64, error) {
	local, err := delta.ResolvePath(f.local.Path(), path)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	src, err := os.Open(local)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrLocal, err)
	}
	rel, err := filepath.Rel(f.local.Path(), local)
	if err != nil || strings.HasPrefix(rel, "..") {
		return 0, fmt.Errorf("%w: file %s is outside the table", ErrLocal, path)
	}
	key := f.name + "/" + f.fleetPath(filepath.ToSlash(rel))
	if tr.Identity() {
		// The file names its columns as the fleet does: it goes up as
		// it is.
		return info.Size(), f.putFile(ctx, key, src, info.Size())
	}
	if err := os.MkdirAll(f.tmpDir, 0o755); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(f.tmpDir, "fleet-*.parquet")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	size, err := tr.File(tmp, src, info.Size())
	if err != nil {
		return 0, fmt.Errorf("translate %s: %w", path, err)
	}
	if err := f.putFile(ctx, key, tmp, size); err != nil {
		return 0, err
	}
	return size, nil
}

// uploadVector puts the deletion vector file d names, as it is, at the same
// place in the fleet table (its name is unique).
func (f *FleetTable) uploadVector(ctx context.Context, d *delta.DeletionVectorDescriptor) error {
	if d == nil || d.StorageType != delta.DeletionVectorStorageRelative {
		return nil
	}
	local, err := d.FilePath(f.local.Path())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLocal, err)
	}
	rel, err := filepath.Rel(f.local.Path(), local)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%w: deletion vector %s is outside the table", ErrLocal, local)
	}
	src, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLocal, err)
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLocal, err)
	}
	return f.putFile(ctx, f.name+"/"+filepath.ToSlash(rel), src, info.Size())
}

// putFile puts size bytes of r at key unless key exists.
func (f *FleetTable) putFile(ctx context.Context, key string, r io.ReadSeeker, size int64) error {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sum, err := checksum(r, size)
	if err != nil {
		return err
	}
	reopen := func() io.Reader {
		r.Seek(0, io.SeekStart)
		var body io.Reader = io.LimitReader(r, size)
		if f.Limit != nil {
			body = f.Limit(ctx, body)
		}
		return body
	}
	body := Body{R: reopen(), Size: size, SHA256: sum, Reopen: reopen}
	err = f.client.PutObject(ctx, key, body, PutOptions{IfNoneMatch: true})
	if errors.Is(err, ErrPreconditionFailed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	f.uploaded(size)
	return nil
}

// translation returns the translation of files written under the local
// schema st into the fleet's columns, adding to the fleet the columns it
// lacks.
func (f *FleetTable) translation(ctx context.Context, st *delta.StructType) (*delta.Translation, error) {
	key, err := st.SchemaString()
	if err != nil {
		return nil, err
	}
	if tr := f.trs[key]; tr != nil {
		return tr, nil
	}
	if err := f.ensureColumns(ctx, st); err != nil {
		return nil, err
	}
	fleetSchema, err := f.w.Metadata().Schema()
	if err != nil {
		return nil, err
	}
	tr, err := delta.NewTranslation(st, fleetSchema)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", fleet.ErrConflict, err)
	}
	f.trs[key] = tr
	return tr, nil
}

// ensureColumns adds to the fleet table the columns of st it lacks, by
// name, with ids and physical names of the fleet's own; a column the fleet
// holds with another type fails (type widening is not built yet).
func (f *FleetTable) ensureColumns(ctx context.Context, st *delta.StructType) error {
	_, err := f.w.CommitSchema(ctx, func(md *delta.Metadata, p *delta.Protocol) (*delta.Metadata, *delta.Protocol, error) {
		cur, err := md.Schema()
		if err != nil {
			return nil, nil, err
		}
		union, changed, widened, err := unionStruct("", cur, st)
		if err != nil {
			return nil, nil, err
		}
		if !changed {
			return nil, nil, nil
		}
		if widened {
			if p, err = delta.TypeWideningProtocol(p); err != nil {
				return nil, nil, err
			}
			c := *md
			c.Configuration = maps.Clone(md.Configuration)
			c.Configuration[delta.EnableTypeWideningKey] = "true"
			md = &c
		}
		next, _, err := delta.AssignColumnIDs(union, md.MaxColumnID())
		if err != nil {
			return nil, nil, err
		}
		nmd, err := md.WithSchema(next)
		return nmd, p, err
	})
	return err
}

// unionStruct returns the fleet's struct cur with the fields of the local
// struct local it lacks added (without column mapping, for the fleet to
// assign), a field the site holds in a wider type widened (delta.WidenField),
// nested structs by the same rule; and whether it changed anything and
// whether it widened a type. A field held in a narrower type at the site
// stays: its files are read as the wider type. Types that neither widens to
// the other fail.
func unionStruct(prefix string, cur, local *delta.StructType) (out *delta.StructType, changed, widened bool, err error) {
	fields := slices.Clone(cur.Fields)
	for _, l := range local.Fields {
		g, i := cur.Field(l.Name)
		if g == nil {
			fields, changed = append(fields, delta.NewField(l.Name, stripMapping(l.Type), true)), true
			continue
		}
		gs, gStruct := g.Type.(*delta.StructType)
		ls, lStruct := l.Type.(*delta.StructType)
		switch {
		case gStruct && lStruct:
			sub, subChanged, subWidened, err := unionStruct(prefix+l.Name+".", gs, ls)
			if err != nil {
				return nil, false, false, err
			}
			if subChanged {
				c := *g
				c.Type = sub
				fields[i], changed, widened = &c, true, widened || subWidened
			}
		case g.Type.String() == l.Type.String(), delta.CanWiden(l.Type, g.Type):
		case delta.CanWiden(g.Type, l.Type):
			fields[i], changed, widened = delta.WidenField(g, l.Type), true, true
		default:
			return nil, false, false, fmt.Errorf("%w: column %q is %s at this site and %s in the fleet, and neither widens to the other",
				fleet.ErrConflict, prefix+l.Name, l.Type, g.Type)
		}
	}
	return delta.NewStructType(fields...), changed, widened, nil
}

// sharedSettings fails with fleet.ErrConflict unless the local table
// agrees with the fleet table on what every site must share: the
// partition columns (the site column, then the local ones), the mirror's
// key columns by name (lakeside.key) or its having none
// (lakeside.multiset), and whether it has a change data feed.
func sharedSettings(local *delta.Snapshot, fleetMD *delta.Metadata) error {
	lmd := local.Metadata()
	if want := append([]string{fleet.SiteColumn}, lmd.PartitionColumns...); !slices.Equal(fleetMD.PartitionColumns, want) {
		return fmt.Errorf("%w: the fleet table is partitioned by %v, this site's by %v", fleet.ErrConflict, fleetMD.PartitionColumns, want)
	}
	fleetSchema, err := fleetMD.Schema()
	if err != nil {
		return fmt.Errorf("%w: fleet schema: %v", fleet.ErrConflict, err)
	}
	localKey, err := keyNames(lmd.Configuration[keyProperty], local.Schema())
	if err != nil {
		return err
	}
	fleetKey, err := keyNames(fleetMD.Configuration[keyProperty], fleetSchema)
	if err != nil {
		return err
	}
	if !slices.Equal(localKey, fleetKey) {
		return fmt.Errorf("%w: the fleet table's key is %v, this site's %v: a site with another primary key cannot share the table", fleet.ErrConflict, fleetKey, localKey)
	}
	for _, k := range []string{multisetProperty, delta.EnableChangeDataFeedKey} {
		if !strings.EqualFold(lmd.Configuration[k], fleetMD.Configuration[k]) {
			return fmt.Errorf("%w: %s is %q in the fleet table and %q at this site", fleet.ErrConflict, k, fleetMD.Configuration[k], lmd.Configuration[k])
		}
	}
	return nil
}

// The properties of a mirror's key (agent/internal/applier/mirror.go):
// the JSON list of its key columns' physical names, or true for a table
// without a key.
const (
	keyProperty      = "lakeside.key"
	multisetProperty = "lakeside.multiset"
)

// keyNames returns the names of the key columns listed by physical name in
// conf (a lakeside.key value) of a table of schema st.
func keyNames(conf string, st *delta.StructType) ([]string, error) {
	if conf == "" {
		return nil, nil
	}
	var physical []string
	if err := json.Unmarshal([]byte(conf), &physical); err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", fleet.ErrConflict, keyProperty, conf, err)
	}
	names := make([]string, len(physical))
	for i, p := range physical {
		for _, f := range st.Fields {
			if f.PhysicalName() == p {
				names[i] = f.Name
			}
		}
		if names[i] == "" {
			return nil, fmt.Errorf("%w: key column %s is not in the schema", fleet.ErrConflict, p)
		}
	}
	return names, nil
}

// stripMapping returns dt with the column mapping of its nested fields
// taken out, so that the fleet assigns its own.
func stripMapping(dt delta.DataType) delta.DataType {
	st, ok := dt.(*delta.StructType)
	if !ok {
		return dt
	}
	fields := make([]*delta.StructField, len(st.Fields))
	for i, f := range st.Fields {
		fields[i] = delta.NewField(f.Name, stripMapping(f.Type), f.Nullable)
	}
	return delta.NewStructType(fields...)
}

// fleetMetadata returns the protocol and metaData a site proposes for a
// fleet table of its local table: the site column first, as the first
// partition column, then the local columns under their local physical
// names and ids (so that the creating site's files go up as they are), and
// the local table's properties.
func fleetMetadata(snap *delta.Snapshot) (*delta.Protocol, *delta.Metadata, error) {
	local := snap.Metadata()
	fields := append([]*delta.StructField{delta.NewField(fleet.SiteColumn, delta.TypeString, true)}, snap.Schema().Fields...)
	mapped := snap.ColumnMappingMode() == delta.ColumnMappingName
	if !mapped {
		for i, f := range fields {
			fields[i] = delta.NewField(f.Name, stripMapping(f.Type), true)
		}
	}
	st, maxID, err := delta.AssignColumnIDs(delta.NewStructType(fields...), local.MaxColumnID())
	if err != nil {
		return nil, nil, err
	}
	conf := maps.Clone(local.Configuration)
	if conf == nil {
		conf = map[string]string{}
	}
	conf[delta.ColumnMappingModeKey] = delta.ColumnMappingName
	conf[delta.ColumnMappingMaxIDKey] = fmt.Sprint(maxID)
	md, err := delta.NewMetadata(st, append([]string{fleet.SiteColumn}, local.PartitionColumns...), conf, 0)
	if err != nil {
		return nil, nil, err
	}
	md.Name = local.Name
	proto := snap.Protocol()
	if !mapped {
		if proto, err = delta.ColumnMappingProtocol(proto); err != nil {
			return nil, nil, err
		}
	}
	return proto, md, nil
}
