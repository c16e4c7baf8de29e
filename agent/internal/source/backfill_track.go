package source

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// The stream's side of a backfill (package backfill): while a table is
// copied, the stream notes the keys of the table's rows every transaction
// changes, and at a chunk's high watermark decides which of the chunk's
// rows to queue. It runs on the stream's state, in the stream's goroutine;
// the handoff is where the backfiller (backfill.Stream) and the stream
// meet.

// maxTrackedKeys bounds the keys the stream holds for the table being
// copied. A transaction whose keys would pass it is noted as changing
// keys unknown: if it is one the chunk's copy does not see, the chunk is
// copied again (correct, only slower).
const maxTrackedKeys = 65536

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
		pos = backfill.KeyPositions(rd.rel, t.keyNames)
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
func (t *tracker) judge(snap backfill.Snapshot, low, runLow, truncAt store.LSN) verdict {
	v := verdict{replaced: map[string]bool{}}
	if t.over {
		seen := snap.SeesAllUpTo(t.overXid)
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
		visible := snap.Visible(e.xid)
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

// handoff is what the backfiller and the stream share, under mu: the
// stream's side of backfill.Stream.
type handoff struct {
	mu sync.Mutex
	// track is the OID of the table whose changes the stream notes (zero:
	// none), by keyNames; trackGen counts the requests, and tracked,
	// when set, receives the position from which the stream tracks.
	track    uint32
	keyNames []string
	trackGen uint64
	tracked  chan store.LSN
	// wins are the chunks between their watermarks, oldest first: a
	// chunk's high watermark is written in the round trip that writes
	// the next chunk's low watermark.
	wins []*backfill.Window
	// wake, set while a session streams, interrupts the stream's wait
	// for its next message, so that it takes a request at once.
	wake func()
}

// setWake sets (nil: clears) how to wake the stream.
func (h *handoff) setWake(wake func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wake = wake
}

// StartTracking asks the stream to note the changes of table oid, and
// returns where it will receive the position it tracks from.
func (h *handoff) StartTracking(oid uint32, keyNames []string) <-chan store.LSN {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan store.LSN, 1)
	h.track, h.keyNames, h.tracked = oid, keyNames, ch
	h.trackGen++
	if h.wake != nil {
		h.wake()
	}
	return ch
}

// StopTracking asks the stream to stop noting changes.
func (h *handoff) StopTracking() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.track, h.keyNames, h.tracked, h.wins = 0, nil, nil, nil
	h.trackGen++
}

// Open adds a chunk's window before its low watermark is written.
func (h *handoff) Open(win *backfill.Window) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wins = append(h.wins, win)
}

// find returns the window of the watermark w, or nil.
func (h *handoff) find(w backfill.Watermark) *backfill.Window {
	for _, win := range h.wins {
		if win.ID == w.ID && win.OID == w.OID {
			return win
		}
	}
	return nil
}

// remove removes a chunk's window, under mu, and reports whether it was
// there: the stream takes a window at its high watermark, the backfiller
// withdraws one it gives up.
func (h *handoff) remove(win *backfill.Window) bool {
	n := len(h.wins)
	h.wins = slices.DeleteFunc(h.wins, func(w *backfill.Window) bool { return w == win })
	return len(h.wins) < n
}

// Withdraw removes a window the backfiller gives up, and reports whether
// it was there (see remove).
func (h *handoff) Withdraw(win *backfill.Window) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.remove(win)
}

// Update runs fn, which sets what the stream reads of a window, under mu.
func (h *handoff) Update(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
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
	var w backfill.Watermark
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
		win.Low, win.LowSeen = at, true
		h.mu.Unlock()
		if win.Truncate {
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
func (st *stream) queueBackfillTruncate(win *backfill.Window, low store.LSN) error {
	tracked := st.trk != nil && st.trk.oid == win.OID
	if tracked && st.trk.truncLow != 0 {
		// The first chunk copied again: the copy's truncate is
		// queued, and nothing of the copy after it.
		win.TruncAt = st.trk.truncLow
		return nil
	}
	key, err := st.backfillRelation(win.Rel)
	if err != nil {
		return err
	}
	switch {
	case key == (store.RelationKey{}):
		win.Redo = "the table's columns changed while it was copied"
		return nil
	case low+1 <= st.lastQueued:
		win.Redo = "the chunk's low watermark came before a transaction queued"
		return nil
	}
	win.TruncAt = low
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
func (st *stream) finishChunk(win *backfill.Window, high store.LSN) error {
	res := backfill.Result{}
	defer func() { win.Result <- res }()
	if win.Redo != "" {
		res.Redo = win.Redo
		return nil
	}
	if !win.Ready || !win.LowSeen || (win.Truncate && win.TruncAt == 0) {
		res.Redo = "the chunk's watermarks came out of order"
		return nil
	}
	if st.trk == nil || st.trk.oid != win.OID {
		res.Redo = "changes of the table were not tracked"
		return nil
	}
	v := st.trk.judge(win.Snap, win.Low, st.trk.runLow, win.TruncAt)
	switch {
	case v.restart != "":
		// The copy starts over with a truncate of its own: the
		// changes queued after this one's are in its copy too.
		st.trk.truncLow = 0
		res.Restart = v.restart
		return nil
	case v.redo != "":
		res.Redo = v.redo
		return nil
	}
	key, err := st.backfillRelation(win.Rel)
	if err != nil {
		return err
	}
	if key == (store.RelationKey{}) {
		res.Redo = "the table's columns changed while it was copied"
		return nil
	}
	changes := win.Rows[:0]
	for i, c := range win.Rows {
		if win.Keys.Len() > 0 && v.replaced[string(win.Keys.At(i))] {
			continue
		}
		c.Relation = key
		changes = append(changes, c)
	}
	res.Replaced = len(win.Rows) - len(changes)
	win.Prog.Rows += int64(len(changes))
	win.Prog.Chunks++
	win.Prog.Truncate = false
	if win.Prog.Done {
		win.Prog.Finished = time.Now().UTC()
	}
	res.Queued, res.Rows = true, len(changes)
	st.trk.truncLow = 0
	if len(changes) == 0 || high+1 <= st.lastQueued {
		return st.s.writer.send(writeOp{kind: opBackfill, backfills: []*store.Backfill{win.Prog}, recycle: win.Recycle})
	}
	st.lastQueued = high + 1
	st.s.txnsQueued.Add(1)
	txn := &store.Txn{TxnHeader: store.TxnHeader{CommitLSN: high, EndLSN: high + 1, CommitTime: time.Now(), Copied: true}, Changes: changes}
	return st.s.writer.send(writeOp{kind: opAppendTxn, txn: txn, backfills: []*store.Backfill{win.Prog}, recycle: win.Recycle})
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
