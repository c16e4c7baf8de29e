package applier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/lakeside/lakeside/store"
)

// A transaction that kills the agent while it is applied (a value too
// large for its memory, a bug not known yet) would kill it again at every
// restart, for ever, and every table would stop with it. The crash-loop
// breaker ends that. While the applier works on part of the queue (reads
// it ahead, or flushes it: decodes, converts, writes and commits) it says
// so in a small file beside the state file (the crash record); the end of
// the work clears it, and so does a clean stop. Waiting between two
// slices read ahead is not work: an agent killed then (by an operator, a
// power cut) was not killed by what it read. A start that finds the
// record set knows the last run ended abnormally while it worked on that
// part. From then on the batches in that part hold one
// transaction each, so that the next abnormal exit names the transaction.
// A transaction held at MaxCrashExits abnormal exits in a row is
// quarantined: it is not decoded again, and each table it changes fails
// with ErrQuarantined, falling behind like any failing table (see
// failure.go) while every other table goes on. Nothing leaves the queue.
// A clean stop and start (after a fix) releases it: the record is gone, and
// the transaction is tried again. So does a resync of a table
// (Applier.Release), whose changes in the transaction are then passed
// over, since the copy that follows in the queue brings its rows as
// PostgreSQL holds them.
//
// The record is written without fsync, in one write to a file kept open:
// it must outlive the process, not the machine, and it is written twice a
// flush and twice a slice read ahead.

// MaxCrashExits is how many abnormal exits in a row, each while the same
// transaction was applied, quarantine it.
const MaxCrashExits = 3

// CrashRecordName is the name of the crash record in the state directory.
const CrashRecordName = "apply-crashes.json"

// ErrQuarantined is the failure of a table whose changes are in a
// quarantined transaction.
var ErrQuarantined = errors.New("transaction quarantined")

// crashRecord is the content of the crash record.
type crashRecord struct {
	// Applying is the part of the queue the applier holds now.
	Applying *queueRange `json:"applying,omitempty"`
	// Suspect is the part held at the last abnormal exit, and Exits how
	// many abnormal exits in a row held a part of it.
	Suspect *queueRange `json:"suspect,omitempty"`
	Exits   int         `json:"exits,omitempty"`
	// Quarantined are the transactions quarantined, until every table
	// holds them.
	Quarantined []quarantinedTxn `json:"quarantined,omitempty"`
}

// quarantinedTxn is a transaction held at MaxCrashExits abnormal exits in
// a row.
type quarantinedTxn struct {
	End   store.LSN `json:"end"`
	Exits int       `json:"exits"`
	// Released are the tables (schema.table) whose changes in it are
	// passed over.
	Released []string `json:"released,omitempty"`
}

// queueRange is the transactions of the queue that end after After and
// at or before Through; Single says that it is one transaction.
type queueRange struct {
	After   store.LSN `json:"after"`
	Through store.LSN `json:"through"`
	Single  bool      `json:"single,omitempty"`
}

// within reports whether r lies inside o.
func (r queueRange) within(o *queueRange) bool {
	return o != nil && r.After >= o.After && r.Through <= o.Through
}

// crashLoop keeps the crash record (Config.CrashRecord). Its methods are
// called by the applier's goroutine, but for Release.
type crashLoop struct {
	path string
	mu   sync.Mutex
	rec  crashRecord
	// written is the record as last written, f the file open for it and
	// size the file's length.
	written []byte
	f       *os.File
	size    int
}

// load reads the record a run before left, and turns what it held at an
// abnormal exit into the suspect part. It returns the record as it is now.
func (c *crashLoop) load() (crashRecord, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, err := os.ReadFile(c.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c.rec, nil
	case err != nil:
		return c.rec, fmt.Errorf("read crash record: %w", err)
	}
	c.written, c.size = bytes.TrimSpace(data), len(data)
	if len(c.written) == 0 {
		c.written = nil
		return c.rec, nil
	}
	var rec crashRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		// It is advisory: a record cut short by a crash as it was
		// written counts nothing.
		return c.rec, fmt.Errorf("read crash record %s: %w", c.path, err)
	}
	if held := rec.Applying; held != nil {
		exits := 1
		if held.within(rec.Suspect) {
			exits = rec.Exits + 1
		}
		rec.Applying, rec.Suspect, rec.Exits = nil, held, exits
		if held.Single && exits >= MaxCrashExits {
			rec.Quarantined = append(rec.Quarantined, quarantinedTxn{End: held.Through, Exits: exits})
			rec.Suspect, rec.Exits = nil, 0
		}
	}
	c.rec = rec
	return c.rec, c.writeLocked()
}

// hold records that the applier holds r of the queue now.
func (c *crashLoop) hold(r queueRange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec.Applying = &r
	c.writeLocked()
}

// settle records that the applier holds nothing of the queue now, tables
// not behind are at through and every table at applied: a suspect part
// they passed is forgotten, and a quarantined one once every table passed
// it.
func (c *crashLoop) settle(through, applied store.LSN) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec.Applying = nil
	if s := c.rec.Suspect; s != nil && through >= s.Through {
		c.rec.Suspect, c.rec.Exits = nil, 0
	}
	c.rec.Quarantined = slices.DeleteFunc(c.rec.Quarantined, func(q quarantinedTxn) bool { return q.End <= applied })
	if len(c.rec.Quarantined) == 0 {
		c.rec.Quarantined = nil
	}
	c.writeLocked()
}

// narrow reports whether a batch that starts after from holds one
// transaction only: it starts in the suspect part, not quarantined.
func (c *crashLoop) narrow(from store.LSN) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rec.Suspect != nil && from < c.rec.Suspect.Through
}

// anyQuarantined reports whether a transaction is quarantined.
func (c *crashLoop) anyQuarantined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.rec.Quarantined) > 0
}

// quarantined returns the quarantined transaction ending at end, or nil.
func (c *crashLoop) quarantined(end store.LSN) *quarantinedTxn {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.rec.Quarantined {
		if q := c.rec.Quarantined[i]; q.End == end {
			q.Released = slices.Clone(q.Released)
			return &q
		}
	}
	return nil
}

// release passes over table's changes in every quarantined transaction
// (all queued before a resync asked now); it reports whether there is one.
func (c *crashLoop) release(table string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.rec.Quarantined {
		if q := &c.rec.Quarantined[i]; !slices.Contains(q.Released, table) {
			q.Released = append(q.Released, table)
		}
	}
	c.writeLocked()
	return len(c.rec.Quarantined) > 0
}

// remove deletes the record: the agent stops cleanly.
func (c *crashLoop) remove() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec, c.written, c.size = crashRecord{}, nil, 0
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
	if err := os.Remove(c.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove crash record: %w", err)
	}
	return nil
}

// writeLocked writes the record when it changed, over the one before
// from the file's start, padded with spaces to the length of the longest
// written: one write to a file kept open, which a process killed meanwhile
// leaves whole (a machine that stops may leave it cut, and a record that
// does not parse counts nothing). An empty record is blank.
func (c *crashLoop) writeLocked() error {
	var data []byte
	if c.rec.Applying != nil || c.rec.Suspect != nil || len(c.rec.Quarantined) > 0 {
		data, _ = json.Marshal(c.rec)
	}
	if bytes.Equal(data, c.written) {
		return nil
	}
	c.written = data
	if c.f == nil {
		if data == nil && c.size == 0 {
			return nil
		}
		f, err := os.OpenFile(c.path, os.O_RDWR|os.O_CREATE, 0o640)
		if err != nil {
			return fmt.Errorf("write crash record: %w", err)
		}
		c.f = f
	}
	buf := data
	if len(buf) < c.size {
		buf = append(bytes.Clone(data), bytes.Repeat([]byte{' '}, c.size-len(data))...)
	}
	if _, err := c.f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("write crash record: %w", err)
	}
	c.size = max(c.size, len(buf))
	return nil
}

// Release passes over the changes of table ("schema.table") in the
// quarantined transaction, if there is one, and reports whether there is:
// a resync of the table, queued after it, brings its rows as PostgreSQL
// holds them. It is safe to call from any goroutine.
func (a *Applier) Release(table string) bool {
	if a.crash == nil {
		return false
	}
	if !a.crash.release(table) {
		return false
	}
	a.log.Warn("quarantined transaction released for a table: its changes in it are passed over, the resync copies its rows", "table", table)
	a.Notify()
	return true
}

// startCrashLoop reads the crash record at the applier's start and logs
// what it says.
func (a *Applier) startCrashLoop() {
	if a.cfg.CrashRecord == "" {
		return
	}
	a.crash = &crashLoop{path: a.cfg.CrashRecord}
	rec, err := a.crash.load()
	if err != nil {
		a.log.Warn("crash record not usable; starting without it", "err", err)
		return
	}
	for _, q := range rec.Quarantined {
		a.log.Error("transaction quarantined: the agent exited abnormally every time it applied it; its tables fall behind, the others go on",
			"transaction_end", q.End, "exits", q.Exits, "released", q.Released)
	}
	if s := rec.Suspect; s != nil {
		a.log.Warn("the last run ended abnormally while it applied these transactions; applying them one at a time",
			"after", s.After, "through", s.Through, "exits", rec.Exits)
	}
}

// holdBatch records the part of the queue the pending flush holds: from
// where its batch starts through upTo.
func (a *Applier) holdBatch(upTo store.LSN) {
	if a.crash == nil {
		return
	}
	a.crash.hold(queueRange{After: a.scan.base, Through: upTo, Single: a.scan.txns == 1 && upTo == a.scan.upTo})
}

// releaseBatch records that the applier holds nothing of the queue.
func (a *Applier) releaseBatch() {
	if a.crash != nil {
		a.crash.settle(a.through, a.Applied())
	}
}

// stopCrashLoop deletes the crash record at a clean stop.
func (a *Applier) stopCrashLoop() {
	if a.crash == nil {
		return
	}
	if err := a.crash.remove(); err != nil {
		a.log.Warn("crash record", "err", err)
	}
}

// quarantine fails, without decoding its values, every table that the
// quarantined transaction h changes and that does not hold it yet, but
// for the tables released.
func (a *Applier) quarantine(ctx context.Context, rels map[store.RelationKey]*store.Relation, h *store.TxnHeader, cur *store.TxnCursor, q *quarantinedTxn) error {
	return cur.ChunksWithoutValues(func(chs []store.Change) error {
		for i := range chs {
			rel := rels[chs[i].Relation]
			if rel == nil {
				return fmt.Errorf("%w: oid %d at %s", errNoRelation, chs[i].Relation.OID, chs[i].Relation.LSN)
			}
			if slices.Contains(q.Released, rel.TableName()) {
				continue
			}
			st := a.table(ctx, rels, rel)
			if st.held || st.failed() != nil {
				continue
			}
			if h.EndLSN > st.changelog.applied || h.EndLSN > st.mirror.applied {
				st.fail(fmt.Errorf("%w: the agent exited abnormally %d times in a row while it applied the transaction ending at %s (out of memory?); its changes stay queued; `lakeside resync %s`, or a restart once the cause is fixed, releases it",
					ErrQuarantined, q.Exits, h.EndLSN, rel.TableName()))
			}
		}
		return ctx.Err()
	})
}
