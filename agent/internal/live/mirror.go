package live

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// A table with more rows than the hub keeps, and any version of a table a
// client travels to, is served from its Delta mirror. The applier keeps a
// mirror's data files sorted by row key, with disjoint key ranges recorded
// in each file's tags (see the applier's mirror.go), so a page of rows
// needs only the files its key range overlaps, read one at a time. Rows
// are paged in the mirror's key order: the order of typemap.AppendKey,
// which is PostgreSQL's for integer, text, date and timestamp keys.
//
// What the reads hold in memory is bounded by mirrorReadBudget whatever
// the clients do: a read waits (as long as its request lasts) until the
// budget has room for the file it decodes, and clients reading the same
// file at once share one read.

var (
	errNoMirror = errors.New("no Delta mirror of the table yet")
	errBadKey   = errors.New("bad key")
)

// prunedError is a read of a mirror version whose data file was pruned
// locally (delta.local_retention): the replica keeps it, at remote.
type prunedError struct {
	table   string
	version int64
	remote  string
}

func (e *prunedError) Error() string {
	return fmt.Sprintf("version %d of %s is no longer kept locally (delta.local_retention); the replica holds it: %s",
		e.version, e.table, e.remote)
}

// softDeleteColumn marks deleted rows in a mirror written with soft deletes.
const softDeleteColumn = "_deleted"

// The mirror's configuration and file tags the applier writes.
const (
	confMirrorKey      = "lakeside.key"
	confMirrorMultiset = "lakeside.multiset"
	tagMirrorMinKey    = "lakeside.minKey"
	tagMirrorMaxKey    = "lakeside.maxKey"
)

// mirrorReadBudget bounds the memory of the decoded data files that
// mirror reads hold at once, mirrorFileCacheBudget that of the decoded
// files kept for the next pages and the next clients, and
// mirrorPageCacheBudget that of the encoded snapshot pages kept for the
// next stream clients.
const (
	mirrorReadBudget      = 256 << 20
	mirrorFileCacheBudget = 128 << 20
	mirrorPageCacheBudget = 64 << 20
)

// decodedBytesPerFileByte estimates a data file's size once decoded into
// Go values from its size on disk.
const decodedBytesPerFileByte = 8

// mirrorReads shares and bounds the reads of mirror data files: a file
// being read is read once for every client that asks meanwhile, and the
// files read last stay decoded for the pages and clients that follow (data
// files never change once written). Stream clients that connect together
// share the encoded pages of their snapshots the same way.
type mirrorReads struct {
	budget *semaphore.Weighted
	// workers bounds the requests that make pages of mirrors (and encode
	// them) at once to half the CPUs, at least one, so that clients asking
	// for large pages leave the other half to capture and the Delta
	// tables.
	workers *semaphore.Weighted
	group   singleflight.Group
	files   *lru[[]keyedRow]
	pages   *lru[encodedPage]
}

// encodedPage is a snapshot page of a mirror as sent to stream clients,
// with the key of its last row and whether rows follow.
type encodedPage struct {
	data []byte
	last []byte
	more bool
}

func newMirrorReads() *mirrorReads {
	return &mirrorReads{budget: semaphore.NewWeighted(mirrorReadBudget), workers: semaphore.NewWeighted(int64(max(runtime.GOMAXPROCS(0)/2, 1))),
		files: newLRU[[]keyedRow](mirrorFileCacheBudget), pages: newLRU[encodedPage](mirrorPageCacheBudget)}
}

// work runs f, which makes pages or rows of mirrors and sends them, in one
// of the worker slots, waiting for one as long as ctx lasts.
func (mr *mirrorReads) work(ctx context.Context, f func() error) error {
	if err := mr.workers.Acquire(ctx, 1); err != nil {
		return err
	}
	defer mr.workers.Release(1)
	start := time.Now()
	err := f()
	// The slot rests as long as it worked, so that the slots take at
	// most half of the CPUs they stand for; not past the request.
	select {
	case <-ctx.Done():
	case <-time.After(time.Since(start)):
	}
	return err
}

// rows returns the decoded rows of a data file, id naming the file and how
// its rows are keyed; decode reads them when they are not at hand.
//
// The read is shared, so it does not end with the request that started it.
func (mr *mirrorReads) rows(ctx context.Context, id string, size int64, decode func(context.Context) ([]keyedRow, error)) ([]keyedRow, error) {
	if rows, ok := mr.files.get(id); ok {
		return rows, nil
	}
	shared := context.WithoutCancel(ctx)
	v, err, _ := mr.group.Do("file\x00"+id, func() (any, error) {
		w := min(max(size, 1)*decodedBytesPerFileByte, mirrorReadBudget)
		if err := mr.budget.Acquire(shared, w); err != nil {
			return nil, err
		}
		defer mr.budget.Release(w)
		rows, err := decode(shared)
		if err != nil {
			return nil, err
		}
		mr.files.put(id, rows, w)
		return rows, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]keyedRow), nil
}

// page returns the encoded snapshot page id names; encode makes it when it
// is not at hand.
func (mr *mirrorReads) page(id string, encode func() (encodedPage, error)) (encodedPage, error) {
	if p, ok := mr.pages.get(id); ok {
		return p, nil
	}
	v, err, _ := mr.group.Do("page\x00"+id, func() (any, error) {
		p, err := encode()
		if err != nil {
			return nil, err
		}
		mr.pages.put(id, p, int64(len(p.data)+len(p.last)))
		return p, nil
	})
	if err != nil {
		return encodedPage{}, err
	}
	return v.(encodedPage), nil
}

// mirrorFile is a data file of a mirror snapshot with its key range (nil
// when the file has no range tags: it is read for every page).
type mirrorFile struct {
	path string
	// logPath is the file's path as the log names it.
	logPath        string
	size           int64
	minKey, maxKey []byte
}

// mirrorScan reads the rows of one mirror snapshot by key range.
type mirrorScan struct {
	reads   *mirrorReads
	types   *typemap.Map
	rel     *store.Relation
	version int64
	schema  *delta.StructType
	// archive is where the table's pruned files are kept
	// ("<url>/<site>/<dir>"), or empty when none are pruned.
	archive string
	// keyIdx are the schema fields of the row key, in order; with
	// multiset the key is every data field.
	keyIdx   []int
	multiset bool
	// deleted is the soft-delete field, or -1.
	deleted int
	// keying names the schema and the key that a data file's rows are
	// read and keyed with, for the cache of decoded files.
	keying string
	// byType is the type table row of each schema field.
	byType []typemap.Type
	// keyField tells the schema fields that are key columns of rel: their
	// values are converted whole, to key the rows.
	keyField []bool
	// maxValue bounds each rendered value (HubConfig.MaxValueBytes).
	maxValue int
	files    []mirrorFile // sorted by minKey
}

// scanMirror opens the mirror of table at the version at says.
func (h *Hub) scanMirror(ctx context.Context, table string, at travelTo) (*mirrorScan, error) {
	rel := h.relation(table)
	if rel == nil {
		return nil, h.known(table)
	}
	if h.tablesDir == "" {
		return nil, errNoMirror
	}
	root := filepath.Join(h.tablesDir, rel.DirName())
	t, err := delta.Open(ctx, root)
	if err != nil {
		return nil, errNoMirror
	}
	var snap *delta.Snapshot
	switch {
	case at.byVersion:
		snap, err = t.SnapshotAt(ctx, at.version)
	case at.byTime:
		snap, err = t.SnapshotAsOf(ctx, at.asOf)
	default:
		snap, err = t.Snapshot(ctx)
	}
	if err != nil {
		return nil, err
	}
	return h.newMirrorScan(root, snap, rel)
}

// newMirrorScan returns the scan of a mirror's snapshot, whose table is in
// the directory root, laid out per the table's schema version rel.
func (h *Hub) newMirrorScan(root string, snap *delta.Snapshot, rel *store.Relation) (*mirrorScan, error) {
	ms := &mirrorScan{reads: h.mirrorReads, types: h.types, rel: rel, version: snap.Version(), schema: snap.Schema(), deleted: -1,
		maxValue: h.maxValue}
	if h.archive != "" {
		ms.archive = h.archive + "/" + rel.DirName()
	}
	conf := snap.Metadata().Configuration
	fieldIdx, physicalIdx := map[string]int{}, map[string]int{}
	for i, f := range ms.schema.Fields {
		fieldIdx[f.Name] = i
		physicalIdx[f.PhysicalName()] = i
		if f.Name == softDeleteColumn {
			ms.deleted = i
		}
	}
	ms.byType = make([]typemap.Type, len(ms.schema.Fields))
	for _, c := range rel.Columns {
		if i, ok := fieldIdx[c.Name]; ok {
			ms.byType[i] = h.types.Lookup(c.TypeOID)
		}
	}
	ms.keyField = make([]bool, len(ms.schema.Fields))
	rel.KeyOf(func(ci int) {
		if i, ok := fieldIdx[rel.Columns[ci].Name]; ok {
			ms.keyField[i] = true
		}
	})
	if conf[confMirrorMultiset] == "true" {
		ms.multiset = true
		for i := range ms.schema.Fields {
			if i != ms.deleted {
				ms.keyIdx = append(ms.keyIdx, i)
			}
		}
	} else {
		var names []string
		if err := json.Unmarshal([]byte(conf[confMirrorKey]), &names); err != nil {
			return nil, fmt.Errorf("read %s: bad %s: %w", rel.TableName(), confMirrorKey, err)
		}
		// The key names physical names (the names of tables written
		// before column mapping).
		for _, n := range names {
			i, ok := physicalIdx[n]
			if !ok {
				i = -1
			}
			ms.keyIdx = append(ms.keyIdx, i)
		}
	}
	ms.keying = fmt.Sprintf("%v\x00%v\x00%d\x00%s", ms.keyIdx, ms.multiset, ms.deleted, ms.schema)
	for _, add := range snap.Files() {
		path, err := delta.ResolvePath(root, add.Path)
		if err != nil {
			return nil, err
		}
		f := mirrorFile{path: path, logPath: add.Path, size: add.Size}
		minKey, errMin := hex.DecodeString(add.Tags[tagMirrorMinKey])
		maxKey, errMax := hex.DecodeString(add.Tags[tagMirrorMaxKey])
		if errMin == nil && errMax == nil && add.Tags[tagMirrorMaxKey] != "" {
			f.minKey, f.maxKey = minKey, maxKey
		}
		ms.files = append(ms.files, f)
	}
	slices.SortStableFunc(ms.files, func(a, b mirrorFile) int { return bytes.Compare(a.minKey, b.minKey) })
	return ms, nil
}

// rowKey returns the mirror key of a row of the snapshot's fields, as the
// applier encodes it.
func (ms *mirrorScan) rowKey(row []any) []byte {
	return typemap.AppendRowKey(nil, row, ms.keyIdx, ms.multiset)
}

// cursor returns the mirror key of a key a client gives (as the API
// returns them): the key of the row the client's key values would have.
func (ms *mirrorScan) cursor(key string) ([]byte, error) {
	vals, err := keyValues(ms.types, ms.rel, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadKey, err)
	}
	row := make([]any, len(ms.schema.Fields))
	n := 0
	var missing []string
	ms.rel.KeyOf(func(ci int) {
		name := ms.rel.Columns[ci].Name
		i := slices.IndexFunc(ms.schema.Fields, func(f *delta.StructField) bool { return f.Name == name })
		if i < 0 {
			missing = append(missing, name)
		} else if n < len(vals) {
			row[i] = typemap.ConverterFor(ms.schema.Fields[i].Type, name, quiet{})(&vals[n])
		}
		n++
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: the mirror has no column %s", errBadKey, strings.Join(missing, ", "))
	}
	return ms.rowKey(row), nil
}

// quiet is a typemap.Warner that says nothing: a client's key that does
// not fit its column finds no row.
type quiet struct{}

func (quiet) Warn(string, string) {}

// keyedRow is a mirror row with its key.
type keyedRow struct {
	key []byte
	row delta.Row
}

// fileRows returns a data file's rows (without soft-deleted ones) with
// their keys, in key order.
func (ms *mirrorScan) fileRows(ctx context.Context, f mirrorFile) ([]keyedRow, error) {
	return ms.reads.rows(ctx, f.path+"\x00"+ms.keying, f.size, func(ctx context.Context) ([]keyedRow, error) {
		rows, err := delta.ReadParquetFile(ctx, f.path, ms.schema)
		if errors.Is(err, fs.ErrNotExist) && ms.archive != "" {
			return nil, &prunedError{table: ms.rel.TableName(), version: ms.version, remote: ms.archive + "/" + f.logPath}
		}
		if err != nil {
			return nil, fmt.Errorf("read %s at version %d: %w", ms.rel.TableName(), ms.version, err)
		}
		out := make([]keyedRow, 0, len(rows))
		for _, r := range rows {
			if ms.deleted >= 0 {
				if d, _ := r[ms.deleted].(bool); d {
					continue
				}
			}
			out = append(out, keyedRow{key: ms.rowKey(r), row: r})
		}
		slices.SortStableFunc(out, func(a, b keyedRow) int { return bytes.Compare(a.key, b.key) })
		return out, nil
	})
}

// page returns up to limit rows whose keys follow after (nil: from the
// first), in key order, the key of the last one, and whether rows follow
// it.
//
// Callers hold a worker slot (mirrorReads.work) while they make and send it.
func (ms *mirrorScan) page(ctx context.Context, after []byte, limit int) (rows []Row, last []byte, more bool, err error) {
	for fi, f := range ms.files {
		if after != nil && f.maxKey != nil && bytes.Compare(f.maxKey, after) <= 0 {
			continue
		}
		krs, err := ms.fileRows(ctx, f)
		if err != nil {
			return nil, nil, false, err
		}
		start := 0
		if after != nil {
			start, _ = slices.BinarySearchFunc(krs, after, func(kr keyedRow, k []byte) int {
				if c := bytes.Compare(kr.key, k); c != 0 {
					return c
				}
				return -1 // equal keys come before: start after them
			})
		}
		for _, kr := range krs[start:] {
			if len(rows) == limit {
				return rows, last, true, nil
			}
			row, _ := ms.render(kr.row)
			rows = append(rows, row)
			last = kr.key
		}
		if len(rows) == limit {
			// The files that follow hold greater keys only.
			return rows, last, fi < len(ms.files)-1, nil
		}
	}
	return rows, last, false, nil
}

// find returns the row whose key a client gives.
//
// Callers hold a worker slot (mirrorReads.work).
func (ms *mirrorScan) find(ctx context.Context, key string) (Row, bool, error) {
	want, err := ms.cursor(key)
	if err != nil {
		return Row{}, false, err
	}
	for _, f := range ms.files {
		if f.maxKey != nil && (bytes.Compare(want, f.minKey) < 0 || bytes.Compare(want, f.maxKey) > 0) {
			continue
		}
		krs, err := ms.fileRows(ctx, f)
		if err != nil {
			return Row{}, false, err
		}
		if i, ok := slices.BinarySearchFunc(krs, want, func(kr keyedRow, k []byte) int { return bytes.Compare(kr.key, k) }); ok {
			row, _ := ms.render(krs[i].row)
			return row, true, nil
		}
	}
	return Row{}, false, nil
}

// each calls fn with every row of the snapshot and its key values, a data
// file at a time, until fn returns false.
func (ms *mirrorScan) each(ctx context.Context, fn func(Row, []store.Value) (more bool)) error {
	for _, f := range ms.files {
		krs, err := ms.fileRows(ctx, f)
		if err != nil {
			return err
		}
		for _, kr := range krs {
			if !fn(ms.render(kr.row)) {
				return nil
			}
		}
	}
	return nil
}

// render renders a mirror row as the live rows are, so that a client sees
// one format (each value bounded by maxValue), and returns the values of
// its key too.
func (ms *mirrorScan) render(row delta.Row) (Row, []store.Value) {
	values := make(map[string]json.RawMessage, len(ms.schema.Fields))
	byName := make(map[string]store.Value, len(ms.schema.Fields))
	for i, f := range ms.schema.Fields {
		if i == ms.deleted {
			continue
		}
		if !ms.keyField[i] {
			values[f.Name] = ms.byType[i].BoundedJSONFromDelta(row[i], f.Type, ms.maxValue)
			continue
		}
		v := ms.byType[i].FromDelta(row[i], f.Type)
		byName[f.Name] = v
		values[f.Name] = typemap.BoundedJSON(v, ms.maxValue)
	}
	// Only the key columns are set: keyOf reads no other.
	ordered := make([]store.Value, len(ms.rel.Columns))
	for i, c := range ms.rel.Columns {
		ordered[i] = byName[c.Name]
	}
	keyVals, key := keyOf(ms.rel, ordered)
	return Row{Key: key, Values: values}, keyVals
}
