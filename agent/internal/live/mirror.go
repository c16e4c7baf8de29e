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
// are paged in PostgreSQL's key order, as the rows in memory are (see
// rowSource): the byte order of the files' keys (typemap.AppendKey) is
// that order for keys of integers, floats, text, bytea, dates and
// timestamps; a page of a key it is not (numeric, a multiset's) merges
// the rows after the cursor of every file. A snapshot for stream clients,
// who order rows themselves, reads the files in their order instead.
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
// with the position of the row that follows it, if more do.
type encodedPage struct {
	data []byte
	next position
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
		mr.pages.put(id, p, int64(len(p.data)))
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
	// root is the table's directory and add the file's add action, whose
	// deletion vector, if any, names rows of the file the snapshot does
	// not hold.
	root string
	add  *delta.Add
	// logPath is the file's path as the log names it.
	logPath        string
	size           int64
	minKey, maxKey []byte
}

// mirrorScan reads the rows of one mirror snapshot by key range. It is
// the rowSource of tables served from their mirrors.
type mirrorScan struct {
	reads *mirrorReads
	types *typemap.Map
	rel   *store.Relation
	// snapVersion is the snapshot's version.
	snapVersion int64
	schema      *delta.StructType
	// archive is where the table's pruned files are kept
	// ("<url>/<site>/<dir>"), or empty when none are pruned.
	archive string
	// keyIdx are the schema fields of the files' key, in order (-1 for a
	// field the schema lacks); with multiset the key is every data field.
	keyIdx   []int
	multiset bool
	// relKey are the schema fields of rel's key columns, in order (-1
	// for a column the schema lacks): the key values rows are paged by.
	relKey []int
	// ordered is set when the files' byte keys order the rows as their
	// key values do (bytesOrder): a page reads the files from its
	// cursor's on, not all. exact, which ordered implies, is set when
	// they are equal only for equal key values (bytesEqual): a row is
	// looked for only in the file whose key range holds its byte key.
	ordered, exact bool
	// ranged is set when the byte keys order the rows but the files'
	// ranges may overlap (a mirror merged with deletion vectors): a page
	// skips the files whose ranges end before its cursor, and stops at a
	// file whose range starts after the rows it has.
	ranged bool
	// deleted is the soft-delete field, or -1.
	deleted int
	// keying names the schema, the keys and the types that a data file's
	// rows are read and keyed with, for the cache of decoded files.
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
	return h.mirrorScanOf(rel, mirrorLayout{root: root, version: snap.Version(), schema: snap.Schema(),
		conf: snap.Metadata().Configuration, adds: snap.Files()})
}

// mirrorLayout is what a scan reads of a mirror snapshot: the table's
// directory, and the snapshot's version, schema, configuration and data
// files.
type mirrorLayout struct {
	root    string
	version int64
	schema  *delta.StructType
	conf    map[string]string
	adds    []*delta.Add
}

// mirrorScanOf returns the scan of the mirror snapshot l, laid out per the
// table's schema version rel.
func (h *Hub) mirrorScanOf(rel *store.Relation, l mirrorLayout) (*mirrorScan, error) {
	ms := &mirrorScan{reads: h.mirrorReads, types: h.types, rel: rel, snapVersion: l.version, schema: l.schema, deleted: -1,
		maxValue: h.maxValue}
	if h.archive != "" {
		ms.archive = h.archive + "/" + rel.DirName()
	}
	ms.setFields()
	if err := ms.setMirrorKey(l.conf); err != nil {
		return nil, err
	}
	if err := ms.setFiles(l.root, l.adds); err != nil {
		return nil, err
	}
	ms.ranged, ms.exact = ms.keyedBy(bytesOrder), ms.keyedBy(bytesEqual)
	ms.ordered = ms.ranged && ms.disjoint()
	kinds := make([]store.Kind, len(ms.byType))
	for i, t := range ms.byType {
		kinds[i] = t.Kind
	}
	ms.keying = fmt.Sprintf("%v\x00%v\x00%d\x00%v\x00%v\x00%s", ms.keyIdx, ms.multiset, ms.deleted, ms.relKey, kinds, ms.schema)
	return ms, nil
}

// setFields maps the relation's columns to the schema's fields: their
// types, and which fields hold the relation's key.
func (ms *mirrorScan) setFields() {
	fieldIdx := map[string]int{}
	for i, f := range ms.schema.Fields {
		fieldIdx[f.Name] = i
		if f.Name == softDeleteColumn {
			ms.deleted = i
		}
	}
	ms.byType = make([]typemap.Type, len(ms.schema.Fields))
	for _, c := range ms.rel.Columns {
		if i, ok := fieldIdx[c.Name]; ok {
			ms.byType[i] = ms.types.Lookup(c.TypeOID)
		}
	}
	ms.keyField = make([]bool, len(ms.schema.Fields))
	ms.rel.KeyOf(func(ci int) {
		i, ok := fieldIdx[ms.rel.Columns[ci].Name]
		if !ok {
			i = -1
		} else {
			ms.keyField[i] = true
		}
		ms.relKey = append(ms.relKey, i)
	})
}

// setMirrorKey reads which fields the mirror's files are keyed by from the
// table's configuration conf.
func (ms *mirrorScan) setMirrorKey(conf map[string]string) error {
	if conf[confMirrorMultiset] == "true" {
		ms.multiset = true
		for i := range ms.schema.Fields {
			if i != ms.deleted {
				ms.keyIdx = append(ms.keyIdx, i)
			}
		}
		return nil
	}
	var names []string
	if err := json.Unmarshal([]byte(conf[confMirrorKey]), &names); err != nil {
		return fmt.Errorf("read %s: bad %s: %w", ms.rel.TableName(), confMirrorKey, err)
	}
	// The key names physical names (the names of tables written before
	// column mapping).
	for _, n := range names {
		i := slices.IndexFunc(ms.schema.Fields, func(f *delta.StructField) bool { return f.PhysicalName() == n })
		ms.keyIdx = append(ms.keyIdx, i)
	}
	return nil
}

// setFiles lists the snapshot's data files, adds, in key order, with their
// key ranges.
func (ms *mirrorScan) setFiles(root string, adds []*delta.Add) error {
	for _, add := range adds {
		path, err := delta.ResolvePath(root, add.Path)
		if err != nil {
			return err
		}
		f := mirrorFile{path: path, root: root, add: add, logPath: add.Path, size: add.Size}
		minKey, errMin := hex.DecodeString(add.Tags[tagMirrorMinKey])
		maxKey, errMax := hex.DecodeString(add.Tags[tagMirrorMaxKey])
		if errMin == nil && errMax == nil && add.Tags[tagMirrorMaxKey] != "" {
			f.minKey, f.maxKey = minKey, maxKey
		}
		ms.files = append(ms.files, f)
	}
	slices.SortStableFunc(ms.files, func(a, b mirrorFile) int { return bytes.Compare(a.minKey, b.minKey) })
	return nil
}

// disjoint reports whether the files' key ranges do not overlap, which a
// mirror merged with deletion vectors does not promise: the new version
// of a row goes to a new file whose range may overlap those of older
// files. Only then do the files that follow one hold greater keys only.
func (ms *mirrorScan) disjoint() bool {
	for i := 1; i < len(ms.files); i++ {
		if bytes.Compare(ms.files[i].minKey, ms.files[i-1].maxKey) <= 0 {
			return false
		}
	}
	return true
}

// keyedBy reports whether the files' byte keys are the encodings of the
// relation's key columns, each of whose values encode as encodes says:
// every file has a key range, and the mirror is keyed by those columns.
func (ms *mirrorScan) keyedBy(encodes func(delta.DataType, store.Kind) bool) bool {
	if ms.multiset || !slices.Equal(ms.keyIdx, ms.relKey) {
		return false
	}
	for _, f := range ms.files {
		if f.maxKey == nil {
			return false
		}
	}
	for _, i := range ms.relKey {
		if i < 0 || !encodes(ms.schema.Fields[i].Type, ms.byType[i].Kind) {
			return false
		}
	}
	return true
}

// bytesOrder reports whether typemap.AppendKeyValue encodes the values of
// a Delta type dt, queued as kind k, in the order typemap.Compare gives
// them. A decimal, or a numeric kept as a string, is encoded as its text,
// whose bytes put 10 before 9 and -1 before -2.
func bytesOrder(dt delta.DataType, k store.Kind) bool {
	switch dt {
	case delta.TypeBoolean, delta.TypeByte, delta.TypeShort, delta.TypeInteger, delta.TypeLong, delta.TypeFloat, delta.TypeDouble,
		delta.TypeBinary, delta.TypeDate, delta.TypeTimestamp, delta.TypeTimestampNTZ:
		return true
	case delta.TypeString:
		return k == store.KindString
	}
	return false
}

// bytesEqual reports whether typemap.AppendKeyValue encodes values of a
// Delta type dt, queued as kind k, that typemap.Compare finds equal, and
// only those, as the same bytes: those it encodes in order, and decimals,
// written with their column's scale (a numeric kept as a string is kept as
// PostgreSQL printed it: 1.5 and 1.50 are equal).
func bytesEqual(dt delta.DataType, k store.Kind) bool {
	_, decimal := dt.(delta.DecimalType)
	return decimal || bytesOrder(dt, k)
}

// keyVals returns the values of a row's key columns (the relation's, in
// order), as the rows in memory hold them; NULL for a column the snapshot
// lacks.
func (ms *mirrorScan) keyVals(row delta.Row) []store.Value {
	vals := make([]store.Value, len(ms.relKey))
	for n, i := range ms.relKey {
		if i >= 0 {
			vals[n] = ms.byType[i].FromDelta(row[i], ms.schema.Fields[i].Type)
		}
	}
	return vals
}

// byteKey returns the mirror key a row of the key values vals would have.
// Only for a snapshot keyed by the relation's key (see keyedBy).
func (ms *mirrorScan) byteKey(vals []store.Value) []byte {
	var k []byte
	for n, i := range ms.relKey {
		f := ms.schema.Fields[i]
		k = typemap.AppendKeyValue(k, typemap.ConverterFor(f.Type, f.Name, quiet{})(&vals[n]))
	}
	return k
}

// checkKey returns an error naming the key columns the snapshot lacks: a
// client's key cannot be looked up in it.
func (ms *mirrorScan) checkKey() error {
	var missing []string
	for n, ci := range ms.rel.KeyColumns() {
		if ms.relKey[n] < 0 {
			missing = append(missing, ms.rel.Columns[ci].Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the mirror has no column %s", errBadKey, strings.Join(missing, ", "))
	}
	return nil
}

// quiet is a typemap.Warner that says nothing: a client's key that does
// not fit its column finds no row.
type quiet struct{}

func (quiet) Warn(string, string) {}

// keyedRow is a mirror row with the values of its key.
type keyedRow struct {
	vals []store.Value
	row  delta.Row
}

// key returns the key values of a keyed row.
func (kr keyedRow) key() []store.Value { return kr.vals }

// fileRows returns a data file's rows (without soft-deleted ones, nor
// those its deletion vector deletes) with their key values, in key order.
// The rows are cached by the file and its deletion vector: a later
// version may delete more rows of the same file.
func (ms *mirrorScan) fileRows(ctx context.Context, f mirrorFile) ([]keyedRow, error) {
	id := f.path + "\x00" + f.add.DeletionVector.UniqueID() + "\x00" + ms.keying
	return ms.reads.rows(ctx, id, f.size, func(ctx context.Context) ([]keyedRow, error) {
		rows, err := delta.ReadDataFile(ctx, f.root, f.add, ms.schema)
		if errors.Is(err, fs.ErrNotExist) && ms.archive != "" {
			return nil, &prunedError{table: ms.rel.TableName(), version: ms.snapVersion, remote: ms.archive + "/" + f.logPath}
		}
		if err != nil {
			return nil, fmt.Errorf("read %s at version %d: %w", ms.rel.TableName(), ms.snapVersion, err)
		}
		out := make([]keyedRow, 0, len(rows))
		for _, r := range rows {
			if ms.deleted >= 0 {
				if d, _ := r[ms.deleted].(bool); d {
					continue
				}
			}
			out = append(out, keyedRow{vals: ms.keyVals(r), row: r})
		}
		slices.SortStableFunc(out, func(a, b keyedRow) int { return compareKeys(a.vals, b.vals) })
		return out, nil
	})
}

// relation returns the schema version the snapshot's rows are rendered by.
func (ms *mirrorScan) relation() *store.Relation { return ms.rel }

// version returns the snapshot's version.
func (ms *mirrorScan) version() *int64 { return &ms.snapVersion }

// page returns up to limit rows whose keys follow after (nil: from the
// first), in key order, and whether rows follow the last one. It reads
// the files whose key ranges end after the cursor, in key order, until it
// has limit rows and one more and the next file's range starts after them
// (ranged), or, when the byte order of the keys is not theirs, merges the
// rows after the cursor of every file.
//
// Callers hold a worker slot (mirrorReads.work) while they make and send it.
func (ms *mirrorScan) page(ctx context.Context, after []store.Value, limit int) ([]Row, bool, error) {
	files, err := ms.filesAfter(after)
	if err != nil {
		return nil, false, err
	}
	var got []keyedRow
	for _, f := range files {
		if len(got) > limit && (ms.ordered || ms.ranged && bytes.Compare(f.minKey, ms.byteKey(got[limit].vals)) > 0) {
			break // the files that follow hold greater keys only
		}
		krs, err := ms.fileRows(ctx, f)
		if err != nil {
			return nil, false, err
		}
		krs = krs[indexAfter(krs, after, keyedRow.key):]
		got = mergeRows(got, krs[:min(len(krs), limit+1)], limit+1)
	}
	rows := make([]Row, min(len(got), limit))
	for i := range rows {
		rows[i] = ms.render(got[i])
	}
	return rows, len(got) > limit, nil
}

// filesAfter returns the data files that may hold rows whose keys follow
// after: when the snapshot's byte keys order its rows (ranged), those
// whose key ranges end at or after it, otherwise all.
func (ms *mirrorScan) filesAfter(after []store.Value) ([]mirrorFile, error) {
	if after == nil {
		return ms.files, nil
	}
	if err := ms.checkKey(); err != nil {
		return nil, err
	}
	if !ms.ranged {
		return ms.files, nil
	}
	k := ms.byteKey(after)
	if !ms.ordered {
		var out []mirrorFile
		for _, f := range ms.files {
			if bytes.Compare(f.maxKey, k) >= 0 {
				out = append(out, f)
			}
		}
		return out, nil
	}
	i := slices.IndexFunc(ms.files, func(f mirrorFile) bool { return bytes.Compare(f.maxKey, k) >= 0 })
	if i < 0 {
		return nil, nil
	}
	return ms.files[i:], nil
}

// mergeRows returns the first n rows of a and b, each in key order, in key
// order.
func mergeRows(a, b []keyedRow, n int) []keyedRow {
	out := make([]keyedRow, 0, min(n, len(a)+len(b)))
	for len(out) < n && len(a)+len(b) > 0 {
		if len(b) == 0 || len(a) > 0 && compareKeys(a[0].vals, b[0].vals) <= 0 {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// find returns the row whose key equals key.
//
// Callers hold a worker slot (mirrorReads.work).
func (ms *mirrorScan) find(ctx context.Context, key []store.Value) (Row, bool, error) {
	if err := ms.checkKey(); err != nil {
		return Row{}, false, err
	}
	var k []byte
	if ms.exact {
		k = ms.byteKey(key)
	}
	for _, f := range ms.files {
		if k != nil && (bytes.Compare(k, f.minKey) < 0 || bytes.Compare(k, f.maxKey) > 0) {
			continue
		}
		krs, err := ms.fileRows(ctx, f)
		if err != nil {
			return Row{}, false, err
		}
		if i, ok := indexOf(krs, key, keyedRow.key); ok {
			return ms.render(krs[i]), true, nil
		}
	}
	return Row{}, false, nil
}

// position is a place in a snapshot's rows in the order of its data
// files: a file, and a row of it in key order.
type position struct{ file, row int }

// scan calls fn with the rows of the snapshot from at on, in the order of
// its data files (not key order, unless the snapshot is ordered), until fn
// returns false. It returns the position of the row fn refused, or past
// the last file.
func (ms *mirrorScan) scan(ctx context.Context, at position, fn func(keyedRow) bool) (position, error) {
	for ; at.file < len(ms.files); at = (position{file: at.file + 1}) {
		krs, err := ms.fileRows(ctx, ms.files[at.file])
		if err != nil {
			return at, err
		}
		for ; at.row < len(krs); at.row++ {
			if !fn(krs[at.row]) {
				return at, nil
			}
		}
	}
	return at, nil
}

// each calls fn with every row of the snapshot and its key values, a data
// file at a time, until fn returns false.
func (ms *mirrorScan) each(ctx context.Context, fn func(Row, []store.Value) (more bool)) error {
	_, err := ms.scan(ctx, position{}, func(kr keyedRow) bool { return fn(ms.render(kr), kr.vals) })
	return err
}

// render renders a mirror row as the live rows are, so that a client sees
// one format (each value bounded by maxValue).
func (ms *mirrorScan) render(kr keyedRow) Row {
	values := make(map[string]json.RawMessage, len(ms.schema.Fields))
	for i, f := range ms.schema.Fields {
		switch {
		case i == ms.deleted:
		case ms.keyField[i]:
			// Key values are converted whole: they key the row.
			values[f.Name] = typemap.BoundedJSON(ms.byType[i].FromDelta(kr.row[i], f.Type), ms.maxValue)
		default:
			values[f.Name] = ms.byType[i].BoundedJSONFromDelta(kr.row[i], f.Type, ms.maxValue)
		}
	}
	return Row{Key: keyString(kr.vals), Values: values}
}
