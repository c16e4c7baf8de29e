package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// Retention of the hub: how many recent transactions, and bytes of their
// changes, a reconnecting client can resume from, and how many changes one
// message carries at most.
const (
	defaultRetainTxns   = 100000
	defaultRetainBytes  = 64 << 20
	maxChangesPerSend   = 5000
	maxBytesPerSend     = 1 << 20
	defaultPollInterval = 200 * time.Millisecond
	// minPollGap coalesces the queue's notifications: under load the hub
	// reads and fans out at most this often, one message per client per
	// turn instead of one per group commit of the queue.
	minPollGap = 10 * time.Millisecond
	// hugeTxnChanges: a transaction with more changes than this is not
	// streamed row by row; clients refetch the tables' rows instead, so
	// neither the hub nor a client holds it whole.
	hugeTxnChanges = 10000
	// defaultFarBehind: a hub that finds more changes than this queued
	// after its offset applies them without streaming them, and then has
	// its clients refetch (see poll).
	defaultFarBehind = 20000
	// defaultMaxRows bounds the rows of one table the hub keeps in memory,
	// and defaultMaxTableBytes the bytes of their JSON values (wide rows:
	// documents, images); a larger table is served from its Delta mirror.
	defaultMaxRows       = 50000
	defaultMaxTableBytes = 32 << 20
)

// DefaultMaxValueBytes bounds a value the live view renders (the bytes of
// its text or bytea; see typemap.BoundedJSON) when HubConfig.MaxValueBytes
// is not set. A larger value (a document, an image) is rendered as its
// start, marked truncated with its full size: the hub holds each row's
// rendered values, keeps recent changes for resuming clients and queues
// them for every client, so one huge value would otherwise be held several
// times over, while a page shows only the start of it anyway. The whole
// value stays readable from the table's Delta mirror.
const DefaultMaxValueBytes = 64 << 10

// Hub follows the queue: it applies each durable transaction to its copy of
// the current rows, keeps the recent transactions for clients that resume,
// and fans the changes out to subscribers. It reads only what the queue has
// made durable (invariant 7 in docs/architecture.md).
type Hub struct {
	db        *store.DB
	log       *slog.Logger
	tablesDir string
	// archive is HubConfig.Archive.
	archive string
	maxRows int
	// maxBytes bounds the bytes of one table's rows (tableState.bytes).
	maxBytes int
	// maxValue is HubConfig.MaxValueBytes: the bound of a rendered value.
	maxValue int
	// defer, when set and true, spaces polls out to deferredPoll: while
	// capture catches up with PostgreSQL, the view is not live anyway.
	backlog Backlog

	notify chan struct{}
	types  *typemap.Map
	// mirrorReads shares and bounds the reads of mirror data files.
	mirrorReads *mirrorReads

	mu    sync.Mutex
	epoch string
	// offset is the end LSN of the last transaction applied. It is
	// written with mu held and read without it (Offset).
	offset atomic.Uint64
	tables map[string]*tableState
	// configured names the source tables of the configuration.
	configured map[string]bool
	rels       map[store.RelationKey]*store.Relation
	retained   []retainedTxn // oldest first
	// retainedSince is the offset after which every transaction is retained.
	retainedSince store.LSN
	retain        int
	// retainBytes bounds retainedBytes, the size of the retained
	// transactions' changes.
	retainBytes, retainedBytes int
	farBehind                  int64
	subs                       map[*subscriber]struct{}
	// clients is len(subs), kept apart so that Clients (the agent's
	// status), like Offset (the applier's trimming), never waits for mu,
	// which poll holds while it applies a transaction: about half a second
	// for a transaction of a million rows.
	clients atomic.Int64
	// passedOver counts the huge transactions passed over without reading
	// their values (see passOverLocked).
	passedOver int64
	// snapshots holds, by group of tables, the encoded snapshot pages of
	// the rows at snapshotsAt (epoch and offset): clients that connect
	// together (the page open in many back offices, all reconnecting after
	// a restart) share one encoding.
	snapshots   map[string][][]byte
	snapshotsAt string
	// appIDPrefix starts the appIds of the mirrors' txn actions.
	appIDPrefix string
}

// retainedTxn is a transaction kept for resuming clients. A refetch marker
// stands for a transaction too large to stream (or the initial snapshot):
// clients past it reload the rows.
type retainedTxn struct {
	lsn        store.LSN
	xid        uint32
	commitTime time.Time
	changes    []Change
	refetch    bool
	// bytes is its size once retained (see size).
	bytes int
}

// HubConfig configures a Hub.
type HubConfig struct {
	// TablesDir holds the Delta mirrors, which serve time travel and
	// tables too large to keep in memory.
	TablesDir string
	// SourceTables names the configured source tables ("schema.table"),
	// so that one of which nothing was captured yet is told apart from an
	// unknown one.
	SourceTables []string
	// AppIDPrefix starts the appIds of the mirrors' txn actions (the
	// applier's AppIDPrefix): the appId of a table's mirror is
	// "<prefix>/<dir>/mirror", and its version the end LSN of the last
	// transaction the mirror holds. "lakeside" when empty.
	AppIDPrefix string
	// Backlog says when the hub polls the queue only now and then; nil:
	// never.
	Backlog Backlog
	// Archive, when not empty, is where the mirrors' data files pruned
	// locally are kept (delta.local_retention): the replica's
	// "<url>/<site>". A time travel that misses a data file then answers
	// 410 Gone naming the file there.
	Archive string
	// MaxValueBytes bounds each value the live view renders, in the rows
	// it holds, the changes it streams and retains, and the rows it reads
	// from the mirrors: a text, numeric, bytea or array value of more bytes
	// is rendered as its start, marked truncated with its full size (see
	// typemap.BoundedJSON). DefaultMaxValueBytes when zero or less.
	MaxValueBytes int
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
}

// Backlog tells the hub that the pipeline is working through a backlog,
// which the hub then leaves the CPUs to (see Agent.liveDefer).
type Backlog interface {
	Backlogged() bool
}

// NewHub returns a hub over db. Run feeds it.
func NewHub(db *store.DB, cfg HubConfig) *Hub {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	prefix := cfg.AppIDPrefix
	if prefix == "" {
		prefix = defaultAppIDPrefix
	}
	maxValue := cfg.MaxValueBytes
	if maxValue <= 0 {
		maxValue = DefaultMaxValueBytes
	}
	configured := map[string]bool{}
	for _, n := range cfg.SourceTables {
		configured[n] = true
	}
	return &Hub{
		db:          db,
		log:         log,
		tablesDir:   cfg.TablesDir,
		archive:     cfg.Archive,
		backlog:     cfg.Backlog,
		maxRows:     defaultMaxRows,
		maxBytes:    defaultMaxTableBytes,
		maxValue:    maxValue,
		notify:      make(chan struct{}, 1),
		types:       typemap.New(),
		mirrorReads: newMirrorReads(),
		tables:      map[string]*tableState{},
		configured:  configured,
		rels:        map[store.RelationKey]*store.Relation{},
		retain:      defaultRetainTxns,
		retainBytes: defaultRetainBytes,
		farBehind:   defaultFarBehind,
		subs:        map[*subscriber]struct{}{},

		appIDPrefix: prefix,
	}
}

// deferredPoll is the poll interval during a backlog.
const deferredPoll = 2 * time.Second

// Notify tells the hub that the queue changed; it never blocks.
func (h *Hub) Notify() {
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

// Offset returns the queue position the hub has applied: the queue may be
// trimmed up to it without the hub missing anything.
func (h *Hub) Offset() store.LSN { return store.LSN(h.offset.Load()) }

// setOffsetLocked sets the queue position the hub has applied; h.mu is held.
func (h *Hub) setOffsetLocked(lsn store.LSN) { h.offset.Store(uint64(lsn)) }

// Clients returns the number of connected stream clients.
func (h *Hub) Clients() int { return int(h.clients.Load()) }

// addSubscriberLocked adds s to the subscribers; h.mu is held.
func (h *Hub) addSubscriberLocked(s *subscriber) {
	h.subs[s] = struct{}{}
	h.clients.Store(int64(len(h.subs)))
}

// Run follows the queue until ctx ends.
func (h *Hub) Run(ctx context.Context) error {
	tick := time.NewTicker(defaultPollInterval)
	defer tick.Stop()
	var last time.Time
	for {
		if h.backlog == nil || !h.backlog.Backlogged() || time.Since(last) >= deferredPoll {
			if err := h.poll(ctx); err != nil {
				return fmt.Errorf("live view: %w", err)
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			h.closeAll()
			return nil
		case <-h.notify:
			if gap := minPollGap - time.Since(last); gap > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(gap):
				}
			}
		case <-tick.C:
		}
	}
}

// epochOf names the state's lifetime: a new slot means a new epoch.
func epochOf(s *store.SlotState) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%s.%x", s.SystemID, uint64(s.ConsistentPoint))
}

// poll applies the transactions queued since the last poll and sends them.
// The mirrors it loads when the queue begins a new epoch are read under ctx.
func (h *Hub) poll(ctx context.Context) error {
	if err := h.resetIfNewEpoch(ctx); err != nil {
		return err
	}
	var batch []retainedTxn
	var farBehind bool
	err := h.db.View(func(r *store.Reader) error {
		slot, err := r.SlotState()
		if err != nil {
			return err
		}
		h.mu.Lock()
		if epochOf(slot) != h.epoch {
			// Changed since resetIfNewEpoch looked: the next poll resets.
			h.mu.Unlock()
			return nil
		}
		after, limit := h.Offset(), h.farBehind
		h.mu.Unlock()
		rels, err := r.Relations()
		if err != nil {
			return err
		}
		// A hub far behind the queue (it held back while capture caught
		// up with a backlog) does not stream the backlog to every client
		// change by change: it applies it, and the clients refetch the
		// rows once.
		var pending int64
		err = r.Txns(after, func(hd *store.TxnHeader, _ *store.TxnCursor) error {
			if pending += hd.Changes; pending > limit {
				farBehind = true
				return store.ErrStopScan
			}
			return nil
		})
		if err != nil {
			return err
		}
		var batchBytes, batchChanges int
		return r.Txns(after, func(hd *store.TxnHeader, c *store.TxnCursor) error {
			txn := retainedTxn{lsn: hd.EndLSN, xid: hd.Xid, commitTime: hd.CommitTime}
			h.mu.Lock()
			defer h.mu.Unlock()
			for k, v := range rels {
				h.rels[k] = v
			}
			huge := hd.Snapshot || hd.Changes > hugeTxnChanges || farBehind
			var size int
			passed, err := h.passOverLocked(hd, c, huge)
			if err == nil && !passed {
				size, err = h.applyLocked(hd, c, huge, &txn)
			}
			if err != nil {
				return err
			}
			h.setOffsetLocked(hd.EndLSN)
			// The encoded snapshots are of the rows before: dropped
			// now rather than kept until the next client comes.
			h.snapshots, h.snapshotsAt = nil, ""
			if farBehind {
				return nil // one refetch marker follows the backlog
			}
			if huge {
				// Send what came before, then the marker on its own.
				if len(batch) > 0 {
					h.publishLocked(batch)
				}
				h.publishLocked([]retainedTxn{{lsn: hd.EndLSN, refetch: true}})
				batch, batchBytes, batchChanges = nil, 0, 0
				return nil
			}
			batch = append(batch, txn)
			batchBytes += size
			batchChanges += len(txn.changes)
			if batchBytes >= maxBytesPerSend || batchChanges >= maxChangesPerSend {
				h.publishLocked(batch)
				batch, batchBytes, batchChanges = nil, 0, 0
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(batch) > 0 {
		h.publishLocked(batch)
	}
	if farBehind {
		h.log.Debug("live view: applied a backlog without streaming it; clients refetch", "up_to", h.Offset(), "clients", len(h.subs))
		h.publishLocked([]retainedTxn{{lsn: h.Offset(), refetch: true}})
	}
	return nil
}

// applyLocked applies a transaction's changes to the tables' rows and, unless
// it is huge, adds them to txn for the clients; it returns their size. h.mu
// is held.
func (h *Hub) applyLocked(hd *store.TxnHeader, c *store.TxnCursor, huge bool, txn *retainedTxn) (size int, err error) {
	err = c.Chunks(func(changes []store.Change) error {
		for i := range changes {
			ch := &changes[i]
			rel := h.rels[ch.Relation]
			if rel == nil {
				return fmt.Errorf("change of unknown schema version %+v", ch.Relation)
			}
			t := h.tables[rel.TableName()]
			if t == nil {
				t = newTableState(rel, h.maxValue)
				h.tables[t.name] = t
			}
			if hd.EndLSN <= t.seededTo {
				continue // the rows loaded from the mirror hold it
			}
			out, ok := t.apply(rel, ch, !huge)
			if !t.overflow && h.tooBig(t) {
				h.overflowLocked(t)
			}
			if ok && !huge {
				txn.changes = append(txn.changes, out)
				size += out.size()
			}
		}
		return nil
	})
	return size, err
}

// tooBig reports whether a table has more rows, or bytes of rows, than the
// hub keeps in memory.
func (h *Hub) tooBig(t *tableState) bool {
	return len(t.rows) > h.maxRows || t.bytes > h.maxBytes
}

// overflowLocked stops keeping a table's rows: it has too many, and is
// served from its Delta mirror from now on. h.mu is held.
func (h *Hub) overflowLocked(t *tableState) {
	h.log.Warn("live view: table has too many rows to keep in memory; serving it from its Delta mirror", "table", t.name,
		"max_rows", h.maxRows, "max_bytes", h.maxBytes, "rows", len(t.rows), "bytes", t.bytes)
	t.overflow, t.rows, t.bytes = true, nil, 0
}

// errApplyChanges ends passOverLocked's scan: the transaction has a change
// of a schema version the hub does not know, which applying it reports.
var errApplyChanges = errors.New("changes to apply")

// passOverLocked reports whether the hub can pass over a huge transaction
// (one that clients refetch the rows of, not streamed) without reading its
// values, and when it can, does what applying it would have done: every
// table it changes keeps no rows (overflowed: served from its Delta mirror),
// or will have too many rows to keep once the transaction is applied, so
// applying it would only note each table's schema version (and overflow
// the tables that are not yet). Reading the values of a million-row
// transaction took the hub 0.3 s of CPU, beside the applier writing the
// same transaction to the Delta tables. h.mu is held.
func (h *Hub) passOverLocked(hd *store.TxnHeader, c *store.TxnCursor, huge bool) (bool, error) {
	if !huge {
		return false, nil
	}
	// What the transaction does to each table: its last schema version,
	// and how many rows it adds and removes. Most transactions change one
	// table.
	type tableChanges struct {
		name             string
		t                *tableState
		rel              *store.Relation
		inserts, deletes int
		truncated        bool
	}
	var tables []*tableChanges
	var last *tableChanges
	var lastKey store.RelationKey
	err := c.ChunksWithoutValues(func(changes []store.Change) error {
		for i := range changes {
			ch := &changes[i]
			if last == nil || ch.Relation != lastKey {
				rel := h.rels[ch.Relation]
				if rel == nil {
					return errApplyChanges // applying says what is wrong
				}
				name := rel.TableName()
				j := slices.IndexFunc(tables, func(x *tableChanges) bool { return x.name == name })
				if j < 0 {
					tables = append(tables, &tableChanges{name: name, t: h.tables[name]})
					j = len(tables) - 1
				}
				last, lastKey = tables[j], ch.Relation
				last.rel = rel
			}
			switch ch.Op {
			case store.OpInsert, store.OpSnapshot:
				// A copied row may replace a row held: counted as an
				// insert, the estimate errs on the large side.
				last.inserts++
			case store.OpDelete:
				last.deletes++
			case store.OpTruncate:
				last.truncated = true
			}
		}
		return nil
	})
	switch {
	case errors.Is(err, errApplyChanges):
		return false, nil
	case err != nil:
		return false, err
	}
	var overflowing []*tableChanges
	for _, x := range tables {
		switch t := x.t; {
		case t != nil && (t.overflow || hd.EndLSN <= t.seededTo):
			// Keeps no rows, or the rows loaded from its mirror hold the
			// transaction.
		case h.overflowsLocked(t, x.rel, x.inserts, x.deletes, x.truncated):
			overflowing = append(overflowing, x)
		default:
			return false, nil
		}
	}
	for _, x := range overflowing {
		if x.t == nil {
			x.t = newTableState(x.rel, h.maxValue)
			h.tables[x.name] = x.t
		}
		h.overflowLocked(x.t)
	}
	for _, x := range tables {
		if x.t != nil && hd.EndLSN > x.t.seededTo {
			x.t.rel = x.rel
		}
	}
	h.passedOver++
	return true, nil
}

// overflowsLocked reports whether a table whose rows the hub keeps (t; nil
// for one it has not seen) will have more than maxRows of them once a
// transaction that inserts and deletes so many rows is applied. Only a
// table keyed by its primary key or a unique index is counted so: there,
// each insert adds a row and each delete removes one. (A table with
// REPLICA IDENTITY FULL is keyed by its whole row, so two equal rows are
// one.) h.mu is held.
func (h *Hub) overflowsLocked(t *tableState, rel *store.Relation, inserts, deletes int, truncated bool) bool {
	if truncated || rel.Multiset() {
		return false
	}
	rows := 0
	if t != nil {
		rows = len(t.rows)
	}
	return rows+inserts-deletes > h.maxRows
}

// resetLocked forgets everything: the state belongs to a new epoch. Every
// client is told to refetch.
func (h *Hub) resetLocked(epoch string) {
	if h.epoch != "" {
		h.log.Info("live view: state was reset; clients will refetch", "epoch", epoch)
	}
	h.epoch = epoch
	h.setOffsetLocked(0)
	h.tables = map[string]*tableState{}
	h.rels = map[store.RelationKey]*store.Relation{}
	h.retained, h.retainedSince, h.retainedBytes = nil, 0, 0
	h.snapshots, h.snapshotsAt = nil, ""
	for s := range h.subs {
		s.refetch("the agent's state was reset")
	}
}

// publishLocked retains transactions and sends each subscriber the changes
// of its tables, as one message.
func (h *Hub) publishLocked(batch []retainedTxn) {
	for i := range batch {
		batch[i].bytes = batch[i].size()
		h.retainedBytes += batch[i].bytes
	}
	h.retained = append(h.retained, batch...)
	// Drop the oldest in steps of a quarter of the retention (of its
	// transactions or its bytes), so that trimming costs nothing per
	// transaction.
	drop, bytes := 0, h.retainedBytes
	if over := len(h.retained) - h.retain; over > h.retain/4 {
		for _, txn := range h.retained[:over] {
			bytes -= txn.bytes
		}
		drop = over
	}
	if h.retainedBytes > h.retainBytes {
		for ; bytes > h.retainBytes*3/4 && drop < len(h.retained); drop++ {
			bytes -= h.retained[drop].bytes
		}
	}
	if drop > 0 {
		h.retainedSince, h.retainedBytes = h.retained[drop-1].lsn, bytes
		h.retained = append([]retainedTxn(nil), h.retained[drop:]...)
	}
	offset := h.offsetString(batch[len(batch)-1].lsn)
	if batch[0].refetch {
		h.refetchAllLocked("a transaction or backlog too large to stream")
		return
	}
	// Subscribers of the same tables get the same bytes: each distinct
	// message is encoded once, however many clients watch.
	encoded := map[string][]byte{}
	for s := range h.subs {
		data, ok := encoded[s.tablesKey]
		if !ok {
			data = s.encodeChanges(offset, batch)
			encoded[s.tablesKey] = data
		}
		if data != nil {
			s.enqueueEncoded(data)
		}
	}
}

// refetchAllLocked tells every client to drop its rows and sends it the
// current rows on the same connection, the snapshot of each group of
// tables encoded once. A client of a table that is served from its mirror
// or not captured yet is closed instead: it reconnects without an offset
// and takes a new snapshot.
func (h *Hub) refetchAllLocked(reason string) {
	encoded := map[string][][]byte{}
	for s := range h.subs {
		msgs, ok := encoded[s.tablesKey]
		if !ok {
			msgs = h.encodeRefetchLocked(s.tableNames(), reason)
			encoded[s.tablesKey] = msgs
		}
		if msgs == nil {
			s.refetch(reason)
			continue
		}
		for _, m := range msgs {
			s.enqueueEncoded(m)
		}
	}
}

// encodeRefetchLocked encodes a refetch and the snapshot of tables, or
// returns nil when a table's rows are not in memory.
func (h *Hub) encodeRefetchLocked(tables []string, reason string) [][]byte {
	for _, n := range tables {
		if t := h.tables[n]; t == nil || t.overflow {
			return nil
		}
	}
	msgs := append([]any{Refetch{Type: TypeRefetch, Reason: reason}}, h.snapshotLocked(tables)...)
	out := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		data, err := json.Marshal(m)
		if err != nil {
			return nil
		}
		out = append(out, data)
	}
	return out
}

func (h *Hub) offsetString(l store.LSN) string {
	return h.epoch + ":" + strconv.FormatUint(uint64(l), 10)
}

// parseOffset splits "<epoch>:<lsn>".
func parseOffset(s string) (epoch string, lsn store.LSN, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, errors.New("offset must be <epoch>:<lsn>")
	}
	n, err := strconv.ParseUint(s[i+1:], 10, 64)
	if err != nil {
		return "", 0, errors.New("offset must be <epoch>:<lsn>")
	}
	return s[:i], store.LSN(n), nil
}

// TableInfos describes the tables the hub knows, sorted by name.
func (h *Hub) TableInfos() []TableInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tableInfosLocked(nil)
}

func (h *Hub) tableInfosLocked(names []string) []TableInfo {
	if names == nil {
		for n := range h.tables {
			names = append(names, n)
		}
	}
	out := make([]TableInfo, 0, len(names))
	for _, n := range sortedStrings(names) {
		t := h.tables[n]
		if t == nil {
			continue
		}
		out = append(out, h.tableInfo(t.rel))
	}
	return out
}

// subscribe registers a client for the given tables (nil: all) and returns
// what it must be sent first: a hello, then either the transactions it
// missed since offset or snapshots of the current rows. Registration and
// the snapshot happen under one lock, so the client's queue holds exactly
// the changes after what it is sent here.
//
// snapshot reports whether the client takes snapshots (rather than resuming),
// so that the caller adds those of tables served from mirrors.
func (h *Hub) subscribe(s *subscriber, tables []string, offset string) (first []any, snap [][]byte, snapshot bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range tables {
		if h.tables[n] == nil {
			return nil, nil, false, h.missingLocked(n)
		}
	}
	if tables == nil {
		for n := range h.tables {
			tables = append(tables, n)
		}
	}
	s.tables = map[string]bool{}
	for _, n := range tables {
		s.tables[n] = true
	}
	s.tablesKey = strings.Join(sortedStrings(tables), ",")
	first = []any{Hello{Type: TypeHello, Epoch: h.epoch, Offset: h.offsetString(h.Offset()), Tables: h.tableInfosLocked(tables)}}
	if offset != "" {
		epoch, lsn, err := parseOffset(offset)
		if err != nil {
			return nil, nil, false, err
		}
		switch {
		case epoch == h.epoch && lsn == h.Offset():
			h.addSubscriberLocked(s)
			return first, nil, false, nil
		case epoch == h.epoch && lsn < h.Offset() && lsn >= h.retainedSince && !h.refetchAfter(lsn):
			var missed []retainedTxn
			for _, rt := range h.retained {
				if rt.lsn > lsn {
					missed = append(missed, rt)
				}
			}
			h.addSubscriberLocked(s)
			for len(missed) > 0 {
				n, bytes := 0, 0
				for n < len(missed) && n < maxChangesPerSend && bytes < maxBytesPerSend {
					bytes += missed[n].size()
					n++
				}
				part := missed[:n]
				missed = missed[n:]
				if m, ok := s.changesFor(h.offsetString(part[len(part)-1].lsn), part); ok {
					first = append(first, m)
				}
			}
			return first, nil, false, nil
		default:
			first = append(first, Refetch{Type: TypeRefetch, Reason: "offset " + offset + " is not retained"})
		}
	}
	if snap, err = h.encodedSnapshotLocked(s.tablesKey, tables); err != nil {
		return nil, nil, false, err
	}
	h.addSubscriberLocked(s)
	return first, snap, true, nil
}

// encodedSnapshotLocked returns the encoded snapshot pages of tables (whose
// sorted names make key), encoding them only if no client of the same tables
// took them at the current offset.
func (h *Hub) encodedSnapshotLocked(key string, tables []string) ([][]byte, error) {
	if at := h.offsetString(h.Offset()); h.snapshots == nil || h.snapshotsAt != at {
		h.snapshots, h.snapshotsAt = map[string][][]byte{}, at
	}
	if pages, ok := h.snapshots[key]; ok {
		return pages, nil
	}
	msgs := h.snapshotLocked(tables)
	pages := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		data, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode snapshot: %w", err)
		}
		pages = append(pages, data)
	}
	h.snapshots[key] = pages
	return pages, nil
}

func (h *Hub) snapshotLocked(tables []string) []any {
	const page = 1000
	offset := h.offsetString(h.Offset())
	var out []any
	for _, n := range sortedStrings(tables) {
		t := h.tables[n]
		if t.overflow {
			continue // served from the mirror by the caller
		}
		keys := t.sortedKeys()
		for start := 0; start == 0 || start < len(keys); start += page {
			part := keys[start:min(start+page, len(keys))]
			rows := make([]Row, len(part))
			for i, k := range part {
				rows[i] = Row{Key: k, Values: t.rows[k].json}
			}
			out = append(out, Snapshot{Type: TypeSnapshot, Offset: offset, Table: n, Rows: rows, Last: start+page >= len(keys)})
		}
	}
	return out
}

func (h *Hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	h.clients.Store(int64(len(h.subs)))
}

func (h *Hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.close(1001, "agent stopping")
	}
}

// errUnknownTable means a request named a table that is not replicated.
var errUnknownTable = errors.New("unknown table")

// errNotCaptured means a request named a configured table of which nothing
// has been captured yet (the agent has just started): the client should
// retry shortly.
var errNotCaptured = errors.New("not captured yet; retry shortly")

// missingLocked explains why the hub has no state for table.
func (h *Hub) missingLocked(table string) error {
	if h.configured[table] {
		return fmt.Errorf("table %q: %w", table, errNotCaptured)
	}
	return fmt.Errorf("%w %q", errUnknownTable, table)
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// tableInfo describes a table's newest schema version.
func (h *Hub) tableInfo(rel *store.Relation) TableInfo {
	ti := TableInfo{Name: rel.TableName(), Columns: make([]ColumnInfo, len(rel.Columns)), Key: []string{}, dir: rel.DirName()}
	for i, c := range rel.Columns {
		ti.Columns[i] = ColumnInfo{Name: c.Name, Type: h.types.TypeName(c.TypeOID)}
	}
	rel.KeyOf(func(i int) { ti.Key = append(ti.Key, rel.Columns[i].Name) })
	return ti
}

// refetchAfter reports whether a refetch marker follows lsn.
func (h *Hub) refetchAfter(lsn store.LSN) bool {
	for _, rt := range h.retained {
		if rt.lsn > lsn && rt.refetch {
			return true
		}
	}
	return false
}

// size estimates a retained transaction's encoded size.
func (rt *retainedTxn) size() int {
	n := 64
	for i := range rt.changes {
		n += rt.changes[i].size()
	}
	return n
}

// known returns nil when the hub has seen the table, and otherwise why not.
func (h *Hub) known(table string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tables[table] != nil {
		return nil
	}
	return h.missingLocked(table)
}

// relation returns the newest schema version of a table.
func (h *Hub) relation(table string) *store.Relation {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.tables[table]; t != nil {
		return t.rel
	}
	return nil
}

// overflowed reports whether a table is served from its mirror.
func (h *Hub) overflowed(table string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tables[table]
	return t != nil && t.overflow
}

// mirrorSnapshot sends the rows of a table too large for memory from its
// mirror's latest version, a page at a time as the files are read, in the
// files' order (clients order the rows themselves); clients that ask for
// the same version at the same offset share the encoded pages. The mirror
// may trail or lead the client's offset by a flush; the changes that
// follow are whole rows by key, so the client converges on the current
// rows either way. It stops at the first page send refuses.
func (h *Hub) mirrorSnapshot(ctx context.Context, table, offset string, send func([]byte) bool) error {
	ms, err := h.scanMirror(ctx, table, travelTo{})
	if err != nil {
		return err
	}
	const pageRows = 1000
	var at position
	for {
		id := fmt.Sprintf("%s\x00%d\x00%s\x00%d.%d", ms.rel.DirName(), ms.snapVersion, offset, at.file, at.row)
		p, err := h.mirrorReads.page(id, func() (p encodedPage, err error) {
			err = h.mirrorReads.work(context.WithoutCancel(ctx), func() error {
				p, err = h.encodeMirrorPage(ctx, ms, table, offset, at, pageRows)
				return err
			})
			return p, err
		})
		if err != nil {
			return err
		}
		if !send(p.data) || !p.more {
			return nil
		}
		at = p.next
	}
}

// encodeMirrorPage makes the snapshot page of a mirror from a position.
// The page is shared by the clients that ask for it meanwhile, so it is
// made whatever becomes of the request that asked first.
func (h *Hub) encodeMirrorPage(ctx context.Context, ms *mirrorScan, table, offset string, at position, pageRows int) (encodedPage, error) {
	rows := []Row{}
	next, err := ms.scan(context.WithoutCancel(ctx), at, func(kr keyedRow) bool {
		if len(rows) == pageRows {
			return false
		}
		rows = append(rows, ms.render(kr))
		return true
	})
	if err != nil {
		return encodedPage{}, err
	}
	more := next.file < len(ms.files)
	data, err := json.Marshal(Snapshot{Type: TypeSnapshot, Offset: offset, Table: table, Rows: rows, Last: !more})
	return encodedPage{data: data, next: next, more: more}, err
}

// mirrorTables returns which of the given tables are served from mirrors.
func (h *Hub) mirrorTables(tables []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, n := range tables {
		if t := h.tables[n]; t != nil && t.overflow {
			out = append(out, n)
		}
	}
	return out
}
