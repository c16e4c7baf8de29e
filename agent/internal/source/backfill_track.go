package source

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// The stream's side of a backfill (see backfill.go): while a table is
// copied, the stream notes the keys of the table's rows every transaction
// changes, and at a chunk's high watermark decides which of the chunk's
// rows to queue.

// backfillPrefix is the prefix of the logical decoding messages that mark
// a chunk's window in the WAL.
const backfillPrefix = "lakeside.backfill"

// maxTrackedKeys bounds the keys the stream holds for the table being
// copied. A transaction whose keys would pass it is noted as changing
// keys unknown: if it is one the chunk's copy does not see, the chunk is
// copied again (correct, only slower).
const maxTrackedKeys = 65536

// watermark is the content of a watermark message.
type watermark struct {
	// ID names the chunk: the backfill's session nonce and the chunk's
	// number, so that a message of an earlier session, read again after
	// a restart, is passed over.
	ID   string `json:"id"`
	OID  uint32 `json:"oid"`
	Mark string `json:"mark"` // "low" or "high"
}

// pgSnapshot is a transaction snapshot as pg_current_snapshot() prints it:
// which transactions a chunk's copy sees.
type pgSnapshot struct {
	xmin, xmax uint64
	xip        map[uint64]bool
}

// parseSnapshot parses "xmin:xmax:xip,xip,...".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("parse snapshot %q: want xmin:xmax:xip", s)
	}
	var snap pgSnapshot
	var err error
	if snap.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
	}
	if snap.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return pgSnapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
	}
	snap.xip = map[uint64]bool{}
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			xid, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return pgSnapshot{}, fmt.Errorf("parse snapshot %q: %w", s, err)
			}
			snap.xip[xid] = true
		}
	}
	return snap, nil
}

// visible reports whether the snapshot sees the committed transaction
// xid (32 bits, as pgoutput sends it; widened by its distance from xmax,
// which every transaction still in flight is within 2^31 of).
func (s pgSnapshot) visible(xid uint32) bool {
	full := int64(s.xmax) + int64(int32(xid-uint32(s.xmax)))
	if full < 0 {
		return true
	}
	x := uint64(full)
	return x < s.xmin || (x < s.xmax && !s.xip[x])
}

// seesAllUpTo reports whether the snapshot sees every transaction whose
// xid is at or before xid: xmin is past it.
func (s pgSnapshot) seesAllUpTo(xid uint32) bool {
	full := int64(s.xmax) + int64(int32(xid-uint32(s.xmax)))
	return full < int64(s.xmin)
}

// xidKeys are the keys of the table under backfill that one transaction
// changed: per subtransaction while it runs, all of them once committed.
type xidKeys struct {
	xid uint32
	// commit is the transaction's end LSN, once committed.
	commit store.LSN
	subs   map[uint32][]string
	keys   []string
	// unknown is set when the keys are not all known: too many, a
	// truncate, changes before the tracking began, a table copied by
	// ctid ranges. partial is set when a change left TOAST values out
	// (the mirror fills them from the row it holds, which a table
	// being copied may not hold yet).
	unknown, partial bool
	n                int
}

// tracker is the stream's record of the changes of the table under
// backfill, from the moment the backfill began.
type tracker struct {
	oid uint32
	// keyNames are the key columns, in order; none for a table copied
	// by ctid ranges, whose changes are all unknown.
	keyNames []string
	// positions holds, per schema version, the positions of the key
	// columns (nil when one is missing).
	positions map[store.RelationKey][]int
	open      map[uint32]*xidKeys
	committed []*xidKeys
	keys      int
	buf       []byte
	// runLow is the low watermark of the last chunk that truncated the
	// table first: where a copy by ctid ranges began. truncLow is that
	// of the copy's truncate while no chunk is queued after it: a first
	// chunk copied again uses it rather than queue another truncate, but
	// for a copy by ctid ranges that starts over.
	runLow, truncLow store.LSN
	// Past maxTrackedKeys committed transactions, the others are folded
	// into one of unknown keys: the latest xid (overXid) and commit
	// (overCommit) of them, which a snapshot sees all of once its xmin
	// is past overXid.
	over       bool
	overXid    uint32
	overCommit store.LSN
}

func newTracker(oid uint32, keyNames []string) *tracker {
	return &tracker{oid: oid, keyNames: keyNames, positions: map[store.RelationKey][]int{}, open: map[uint32]*xidKeys{}}
}

// entry returns the keys of the running transaction xid.
func (t *tracker) entry(xid uint32) *xidKeys {
	e := t.open[xid]
	if e == nil {
		e = &xidKeys{xid: xid, subs: map[uint32][]string{}, unknown: len(t.keyNames) == 0}
		t.open[xid] = e
	}
	return e
}

// note records a change of the table by subtransaction subXid of xid.
func (t *tracker) note(rels map[uint32]*relationDecoder, xid, subXid uint32, c *store.Change) {
	e := t.entry(xid)
	if e.unknown {
		return
	}
	if c.Op == store.OpTruncate {
		t.forget(e)
		return
	}
	rd := rels[c.Relation.OID]
	if rd == nil || rd.rel.Key != c.Relation {
		t.forget(e)
		return
	}
	pos, ok := t.positions[c.Relation]
	if !ok {
		pos = keyPositions(rd.rel, t.keyNames)
		t.positions[c.Relation] = pos
	}
	if pos == nil {
		t.forget(e)
		return
	}
	for _, row := range [][]store.Value{c.Old, c.New} {
		if row == nil {
			continue
		}
		key, ok := t.key(row, pos)
		if !ok {
			t.forget(e)
			return
		}
		e.subs[subXid] = append(e.subs[subXid], key)
		e.n++
		t.keys++
	}
	if c.Op != store.OpDelete {
		for _, v := range c.New {
			if v.Kind == store.KindUnchanged {
				e.partial = true
				break
			}
		}
	}
	if t.keys > maxTrackedKeys {
		t.forget(e)
	}
}

// key encodes the key of row; ok is false when a key value is not known.
func (t *tracker) key(row []store.Value, pos []int) (string, bool) {
	t.buf = t.buf[:0]
	for _, i := range pos {
		if i >= len(row) || row[i].Kind == store.KindUnchanged {
			return "", false
		}
		t.buf = typemap.AppendValueKey(t.buf, &row[i])
	}
	return string(t.buf), true
}

// forget drops an entry's keys and notes them unknown.
func (t *tracker) forget(e *xidKeys) {
	t.keys -= e.n
	e.n, e.subs, e.keys, e.unknown = 0, nil, nil, true
}

// abort forgets the changes of an aborted subtransaction (or the whole
// transaction when subXid is xid).
func (t *tracker) abort(xid, subXid uint32) {
	e := t.open[xid]
	if e == nil {
		return
	}
	if xid == subXid {
		t.keys -= e.n
		delete(t.open, xid)
		return
	}
	n := len(e.subs[subXid])
	delete(e.subs, subXid)
	e.n -= n
	t.keys -= n
}

// commit moves a committed transaction's keys to the committed list.
func (t *tracker) commit(xid uint32, end store.LSN) {
	e := t.open[xid]
	if e == nil {
		return
	}
	delete(t.open, xid)
	e.commit = end
	if len(t.committed) >= maxTrackedKeys {
		t.keys -= e.n
		if !t.over || int32(xid-t.overXid) > 0 {
			t.overXid = xid
		}
		t.over, t.overCommit = true, max(t.overCommit, end)
		return
	}
	for _, ks := range e.subs {
		e.keys = append(e.keys, ks...)
	}
	e.subs = nil
	t.committed = append(t.committed, e)
}

// verdict is what the committed changes say of a chunk: the keys whose
// copied rows the stream's changes replace, or why the chunk must be
// copied again (redo), or why a backfill by ctid ranges must start over
// (restart).
type verdict struct {
	replaced map[string]bool
	redo     string
	restart  string
}

// judge decides about a chunk whose copy saw snap, whose low watermark is
// at low (runLow: the low watermark of the first chunk of a run of a
// table copied by ctid ranges), and which truncates the table first when
// truncAt, the position of the truncate, is set. Then it forgets the
// transactions every later copy sees.
//
// A change replaces the copy of its row when its transaction committed
// after the low watermark, or is one the copy does not see (it committed
// before the low watermark but was not yet visible when the copy began:
// its commit record is in the WAL before it leaves the running
// transactions, and a synchronous standby holds it longer). Both are
// queued before the chunk, at their commits.
func (t *tracker) judge(snap pgSnapshot, low, runLow, truncAt store.LSN) verdict {
	v := verdict{replaced: map[string]bool{}}
	if t.over {
		seen := snap.seesAllUpTo(t.overXid)
		switch {
		case len(t.keyNames) == 0 && (!seen || t.overCommit > runLow):
			v.restart = "too many transactions changed the table while it was copied"
		case !seen || t.overCommit > low:
			v.redo = fmt.Sprintf("more than %d transactions changed the table", maxTrackedKeys)
		}
		if seen {
			t.over = false
		}
	}
	keep := t.committed[:0]
	for _, e := range t.committed {
		visible := snap.visible(e.xid)
		switch {
		case len(t.keyNames) == 0:
			// Copied by ctid ranges: no change is in the copy and
			// the queue both, so that no row is counted twice.
			if !visible || e.commit > runLow {
				v.restart = fmt.Sprintf("transaction %d changed the table while it was copied", e.xid)
			}
		case visible && e.commit < low:
		case truncAt > 0 && e.commit < truncAt:
			v.redo = fmt.Sprintf("transaction %d, committed before the truncate but not seen by the copy, changed rows", e.xid)
		case e.unknown:
			v.redo = fmt.Sprintf("transaction %d changed rows whose keys are not known (more than %d tracked, a truncate, or changes before the copy began)", e.xid, maxTrackedKeys)
		case e.partial:
			v.redo = fmt.Sprintf("transaction %d updated rows and left TOAST values out", e.xid)
		default:
			for _, k := range e.keys {
				v.replaced[k] = true
			}
		}
		if !visible {
			keep = append(keep, e)
		} else {
			t.keys -= e.n
		}
	}
	clear(t.committed[len(keep):])
	t.committed = keep
	return v
}

// keyPositions returns the positions of the named columns in rel, nil
// when one is missing.
func keyPositions(rel *store.Relation, names []string) []int {
	pos := make([]int, len(names))
	for i, n := range names {
		pos[i] = -1
		for j, c := range rel.Columns {
			if c.Name == n {
				pos[i] = j
			}
		}
		if pos[i] < 0 {
			return nil
		}
	}
	return pos
}

// adoptTracking starts or stops tracking as the backfill asks (at a chore
// of the streaming loop). Transactions running when tracking starts may
// have changed the table already: their keys are unknown.
func (st *stream) adoptTracking() {
	h := st.s.handoff
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.trackGen == st.trackGen {
		return
	}
	st.trackGen = h.trackGen
	st.trk = nil
	if h.track != 0 {
		st.trk = newTracker(h.track, h.keyNames)
		for xid := range st.open {
			st.trk.forget(st.trk.entry(xid))
		}
		if st.inTxn {
			st.trk.forget(st.trk.entry(st.txn.Xid))
		}
	}
	if h.tracked != nil {
		h.tracked <- st.received
		h.tracked = nil
		if st.acked < st.received {
			st.ackAsk = st.received
		}
	}
}

// watermark handles a backfill's watermark message.
func (st *stream) watermark(m *pglogrepl.LogicalDecodingMessage) error {
	var w watermark
	if err := json.Unmarshal(m.Content, &w); err != nil {
		st.s.log.Warn("passing over a malformed backfill watermark", "err", err)
		return nil
	}
	at := store.LSN(m.LSN)
	h := st.s.handoff
	h.mu.Lock()
	win := h.find(w)
	if win == nil {
		h.mu.Unlock()
		return nil // an earlier session's, read again, or withdrawn
	}
	if w.Mark == "low" {
		win.low, win.lowSeen = at, true
		h.mu.Unlock()
		if win.truncate {
			return st.queueBackfillTruncate(win, at)
		}
		return nil
	}
	h.remove(win)
	h.mu.Unlock()
	return st.finishChunk(win, at)
}

// queueBackfillTruncate queues a truncate of the table just after the low
// watermark of a chunk that starts by truncating it.
func (st *stream) queueBackfillTruncate(win *chunkWindow, low store.LSN) error {
	tracked := st.trk != nil && st.trk.oid == win.oid
	if tracked && st.trk.truncLow != 0 {
		// The first chunk copied again: the copy's truncate is
		// queued, and nothing of the copy after it.
		win.truncAt = st.trk.truncLow
		return nil
	}
	key, err := st.backfillRelation(win.rel)
	if err != nil {
		return err
	}
	switch {
	case key == (store.RelationKey{}):
		win.redo = "the table's columns changed while it was copied"
		return nil
	case low+1 <= st.lastQueued:
		win.redo = "the chunk's low watermark came before a transaction queued"
		return nil
	}
	win.truncAt = low
	if tracked {
		st.trk.runLow, st.trk.truncLow = low, low
	}
	st.lastQueued = low + 1
	txn := &store.Txn{TxnHeader: store.TxnHeader{CommitLSN: low, EndLSN: low + 1, CommitTime: time.Now()},
		Changes: []store.Change{{Op: store.OpTruncate, Relation: key}}}
	st.s.txnsQueued.Add(1)
	return st.s.writer.send(writeOp{kind: opAppendTxn, txn: txn})
}

// finishChunk decides, at a chunk's high watermark, which of its rows to
// queue, and queues them as one transaction just after the watermark, in
// the same write as the backfill's progress.
func (st *stream) finishChunk(win *chunkWindow, high store.LSN) error {
	res := chunkResult{}
	defer func() { win.result <- res }()
	if win.redo != "" {
		res.redo = win.redo
		return nil
	}
	if !win.ready || !win.lowSeen || (win.truncate && win.truncAt == 0) {
		res.redo = "the chunk's watermarks came out of order"
		return nil
	}
	if st.trk == nil || st.trk.oid != win.oid {
		res.redo = "changes of the table were not tracked"
		return nil
	}
	v := st.trk.judge(win.snap, win.low, st.trk.runLow, win.truncAt)
	switch {
	case v.restart != "":
		// The copy starts over with a truncate of its own: the
		// changes queued after this one's are in its copy too.
		st.trk.truncLow = 0
		res.restart = v.restart
		return nil
	case v.redo != "":
		res.redo = v.redo
		return nil
	}
	key, err := st.backfillRelation(win.rel)
	if err != nil {
		return err
	}
	if key == (store.RelationKey{}) {
		res.redo = "the table's columns changed while it was copied"
		return nil
	}
	changes := win.rows[:0]
	for i, c := range win.rows {
		if len(win.keys.ends) > 0 && v.replaced[string(win.keys.at(i))] {
			continue
		}
		c.Relation = key
		changes = append(changes, c)
	}
	res.replaced = len(win.rows) - len(changes)
	win.prog.Rows += int64(len(changes))
	win.prog.Chunks++
	win.prog.Truncate = false
	if win.prog.Done {
		win.prog.Finished = time.Now().UTC()
	}
	res.queued, res.rows = true, len(changes)
	st.trk.truncLow = 0
	if len(changes) == 0 || high+1 <= st.lastQueued {
		return st.s.writer.send(writeOp{kind: opBackfill, backfills: []*store.Backfill{win.prog}, recycle: win.recycle})
	}
	st.lastQueued = high + 1
	st.s.txnsQueued.Add(1)
	txn := &store.Txn{TxnHeader: store.TxnHeader{CommitLSN: high, EndLSN: high + 1, CommitTime: time.Now(), Copied: true}, Changes: changes}
	return st.s.writer.send(writeOp{kind: opAppendTxn, txn: txn, backfills: []*store.Backfill{win.prog}, recycle: win.recycle})
}

// backfillRelation returns the schema version of the table a chunk's rows
// follow: the stream's when it has the same shape, else the newest
// recorded one of that shape, else a new one recorded now. It returns the
// zero key when the stream decodes the table with another shape: its
// columns changed while the chunk was copied.
func (st *stream) backfillRelation(rel *store.Relation) (store.RelationKey, error) {
	if rd, ok := st.rels[rel.Key.OID]; ok {
		// A copy reads the catalog anew: the text of a missing value
		// may have changed with no change to the table, and its rows
		// hold every value.
		if !rd.rel.SameShapeButMissing(rel) {
			return store.RelationKey{}, nil
		}
		return rd.rel.Key, nil
	}
	newest, err := st.newestVersion(rel.Key.OID)
	if err != nil {
		return store.RelationKey{}, err
	}
	if newest != nil && newest.SameShape(rel) {
		st.rels[rel.Key.OID] = newRelationDecoder(st.types, newest, st.s.maxValue())
		return newest.Key, nil
	}
	r := *rel
	r.Key.LSN = st.received
	if newest != nil && r.Key.LSN <= newest.Key.LSN {
		r.Key.LSN = newest.Key.LSN + 1
	}
	st.rels[r.Key.OID] = newRelationDecoder(st.types, &r, st.s.maxValue())
	return r.Key, st.s.writer.send(writeOp{kind: opRelation, rel: &r})
}
