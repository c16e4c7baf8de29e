package applier

import (
	"context"
	"fmt"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/store"
)

// The changelog table "<schema>.<table>_changes" is an append-only record of
// every change. Its columns are the table's data columns (the row after the
// change; the row before it for a delete) followed by:
//
//	_op          string     insert, update, delete, truncate, or snapshot for a row
//	                        copied by the initial snapshot or a backfill
//	_lsn         long       end LSN of the source transaction
//	_xid         long       source transaction id
//	_commit_ts   timestamp  commit time of the source transaction
//	_seq         long       position of the change in its transaction, from 1
//	_before      struct     the row before an update or delete, as far as the
//	                        replica identity gives it (key columns only by
//	                        default, every column with REPLICA IDENTITY FULL);
//	                        null when PostgreSQL sent no old row
//	_unchanged   array<string>  the columns of an update whose unchanged TOAST
//	                        value PostgreSQL did not send: they are null in
//	                        this row but not null in the table
//	_replaced    array<string>  the columns of this row whose value is stored
//	                        other than PostgreSQL holds it (replaced.go);
//	                        null when none
//	_commit_date date       the UTC date of _commit_ts, the partition column
//
// A truncate is one row with null data columns. Columns added later (new
// source columns) are appended to the schema and to _before.
var changelogMeta = []*delta.StructField{
	delta.NewField(colOp, delta.TypeString, false),
	delta.NewField(colLSN, delta.TypeLong, false),
	delta.NewField(colXid, delta.TypeLong, false),
	delta.NewField(colCommitTS, delta.TypeTimestamp, false),
	delta.NewField(colSeq, delta.TypeLong, false),
}

// changelog writes one source table's changelog.
type changelog struct {
	*deltaTable
	cols *columns
	// source is the source table's name (store.Relation.TableName).
	source string

	// Positions of the columns in the schema and in _before.
	dataPos, beforePos                                                         []int
	beforeLen                                                                  int
	opIdx, lsnIdx, xidIdx, tsIdx, seqIdx, beforeIdx, unchIdx, replIdx, dateIdx int

	// The open writers of this flush, by partition (days since the epoch),
	// their buffered rows and the files already closed. cur is the one
	// the writer method returned last, of partition curDay.
	writers map[int32]*clWriter
	cur     *clWriter
	curDay  int32
	adds    []delta.Action
	rows    int64
	// closer closes full files in the background.
	closer closer

	// txn holds the values every row of the transaction being added
	// shares, converted to the row's interface values once.
	txn txnValues
	// ops holds the values of the _op column, by store.Op, and opText
	// their text, for the rows written as queued (addInsert).
	ops    [store.OpSnapshot + 1]any
	opText [store.OpSnapshot + 1][]byte
}

// txnValues are the changelog values of one transaction's rows.
type txnValues struct {
	// endLSN identifies the transaction (zero before the first).
	endLSN             store.LSN
	lsn, xid, ts, date any
	day                int32
}

// values returns the values of h's rows.
func (c *changelog) values(h *store.TxnHeader) *txnValues {
	if c.txn.endLSN != h.EndLSN || c.txn.lsn == nil {
		day := delta.DaysSinceEpoch(h.CommitTime.UTC())
		c.txn = txnValues{endLSN: h.EndLSN, lsn: int64(h.EndLSN), xid: int64(h.Xid), ts: h.CommitTime,
			date: delta.DateFromDays(day), day: day}
	}
	return &c.txn
}

// op returns the _op value of op.
func (c *changelog) op(op store.Op) any {
	if int(op) >= len(c.ops) {
		return op.String()
	}
	if c.ops[op] == nil {
		c.ops[op] = op.String()
	}
	return c.ops[op]
}

type clWriter struct {
	w *delta.DataWriter
	// rows are the rows not yet given to w (see nextRow).
	rows []delta.Row
}

func changelogSchema(cols *columns) *delta.StructType {
	st := delta.NewStructType(cols.fields()...)
	for _, f := range changelogMeta {
		g := *f
		st.Fields = append(st.Fields, &g)
	}
	st.Fields = append(st.Fields,
		delta.NewField(colBefore, delta.NewStructType(cols.fields()...), true),
		delta.NewField(colUnchanged, &delta.ArrayType{ElementType: delta.TypeString, ContainsNull: false}, true),
		replacedField(),
		delta.NewField(colCommitDate, delta.TypeDate, true))
	return st
}

// openChangelog opens the changelog of the table whose mirror's directory
// is dir.
func (a *Applier) openChangelog(ctx context.Context, dir string, cols *columns) (*changelog, error) {
	dt, _, err := a.openTable(ctx, dir+store.ChangelogSuffix, KindChangelog, func() (*delta.StructType, []string, map[string]string) {
		return changelogSchema(cols), []string{colCommitDate}, nil
	})
	if err != nil {
		return nil, err
	}
	cols.addExisting(dt.schema)
	c := &changelog{deltaTable: dt, cols: cols, writers: map[int32]*clWriter{}}
	for op := range c.opText {
		c.opText[op] = []byte(store.Op(op).String())
	}
	return c, nil
}

// replacedField is the changelog's _replaced column.
func replacedField() *delta.StructField {
	return delta.NewField(colReplaced, &delta.ArrayType{ElementType: delta.TypeString, ContainsNull: false}, true)
}

// layout lays the schema out again when the columns changed (a changelog
// created before _replaced gets it then), and computes positions.
func (c *changelog) layout() error {
	if c.epoch != c.cols.epoch || len(c.dataPos) == 0 {
		if err := c.setSchema(changelogSchema(c.cols)); err != nil {
			return err
		}
		c.epoch = c.cols.epoch
	}
	f, idx := c.schema.Field(colBefore)
	before := f.Type.(*delta.StructType)
	c.dataPos = positions(c.schema, c.cols.cols)
	c.beforePos = positions(before, c.cols.cols)
	c.beforeLen = len(before.Fields)
	c.beforeIdx = idx
	_, c.opIdx = c.schema.Field(colOp)
	_, c.lsnIdx = c.schema.Field(colLSN)
	_, c.xidIdx = c.schema.Field(colXid)
	_, c.tsIdx = c.schema.Field(colCommitTS)
	_, c.seqIdx = c.schema.Field(colSeq)
	_, c.unchIdx = c.schema.Field(colUnchanged)
	_, c.replIdx = c.schema.Field(colReplaced)
	_, c.dateIdx = c.schema.Field(colCommitDate)
	return nil
}

// ensureColumns closes the open writers and lays the schema out again when
// the data columns changed since the writers were opened.
func (c *changelog) ensureColumns() error {
	if c.epoch == c.cols.epoch && len(c.dataPos) == len(c.cols.cols) {
		return nil
	}
	if err := c.write(); err != nil {
		return err
	}
	return c.layout()
}

// writer returns the open writer of the partition of a transaction's
// rows, opening it if needed for a file expected to get expectRows rows
// (see Applier.writeOptions).
func (c *changelog) writer(a *Applier, tv *txnValues, expectRows int64) (*clWriter, error) {
	if c.cur != nil && c.curDay == tv.day {
		return c.cur, nil
	}
	if w := c.writers[tv.day]; w != nil {
		c.cur, c.curDay = w, tv.day
		return w, nil
	}
	dw, err := delta.NewDataWriter(c.t.Path(), c.schema, []string{colCommitDate},
		map[string]any{colCommitDate: tv.date}, a.writeOptions(expectRows))
	if err != nil {
		return nil, fmt.Errorf("changelog %s: %w", c.name, err)
	}
	w := &clWriter{w: dw}
	c.writers[tv.day] = w
	c.cur, c.curDay = w, tv.day
	return w, nil
}

// addInsert appends an insert or a copied row (op) of schema version m, as
// queued, writing its values into the columns without converting them to
// Go values (see putter).
func (c *changelog) addInsert(a *Applier, h *store.TxnHeader, seq int64, op store.Op, m *relMapping, vals []store.Value) error {
	if err := c.ensureColumns(); err != nil {
		return err
	}
	tv := c.values(h)
	w, err := c.writer(a, tv, changesAhead(h, seq))
	if err != nil {
		return err
	}
	b, err := startRow(w.w, &w.rows)
	if err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	m.onAdder.putRow(m, vals, b, c.dataPos)
	if r := m.replacedIn(c.cols.cols, vals); r != nil {
		b.Value(c.replIdx, r.names)
		a.noteReplaced(c.source, r)
	}
	b.Bytes(c.opIdx, c.opText[op])
	b.Int(c.lsnIdx, int64(h.EndLSN))
	b.Int(c.xidIdx, int64(h.Xid))
	b.Timestamp(c.tsIdx, h.CommitTime.UnixMicro())
	b.Int(c.seqIdx, seq)
	// The other data columns, _before and _unchanged are null; the
	// file's partition holds _commit_date.
	if err := b.End(); err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	c.rows++
	if w.w.NumRows() >= a.cfg.TargetFileRows {
		return c.closeWriter(tv.day)
	}
	return nil
}

// add appends one change.
func (c *changelog) add(a *Applier, h *store.TxnHeader, seq int64, rc *rowChange) error {
	if err := c.ensureColumns(); err != nil {
		return err
	}
	tv := c.values(h)
	day := tv.day
	w, err := c.writer(a, tv, changesAhead(h, seq))
	if err != nil {
		return err
	}
	var row delta.Row
	w.rows, row = nextRow(w.rows, len(c.schema.Fields))
	image := rc.newRow
	if rc.op == store.OpDelete {
		image = rc.oldRow
	}
	var unch []any
	for i, v := range image {
		if v == typemap.Unchanged {
			unch = append(unch, c.cols.cols[i].name)
			v = nil
		}
		if p := c.dataPos[i]; p >= 0 {
			row[p] = v
		}
	}
	if unch != nil {
		row[c.unchIdx] = unch
	}
	if rc.replaced != nil {
		row[c.replIdx] = rc.replaced.names
		a.noteReplaced(c.source, rc.replaced)
	}
	if rc.oldRow != nil && rc.op != store.OpInsert {
		before := make(delta.Row, c.beforeLen)
		for i, v := range rc.oldRow {
			if v == typemap.Unchanged {
				v = nil
			}
			if p := c.beforePos[i]; p >= 0 {
				before[p] = v
			}
		}
		row[c.beforeIdx] = before
	}
	row[c.opIdx] = c.op(rc.op)
	row[c.lsnIdx] = tv.lsn
	row[c.xidIdx] = tv.xid
	row[c.tsIdx] = tv.ts
	row[c.seqIdx] = seq
	row[c.dateIdx] = tv.date
	c.rows++
	if len(w.rows) >= 1024 {
		if err := w.w.Write(w.rows); err != nil {
			return fmt.Errorf("changelog %s: %w", c.name, err)
		}
		w.rows = w.rows[:0]
		if w.w.NumRows() >= a.cfg.TargetFileRows {
			if err := c.closeWriter(day); err != nil {
				return err
			}
		}
	}
	return nil
}

// closeWriter writes the buffered rows of a partition's writer and closes
// it in the background.
func (c *changelog) closeWriter(day int32) error {
	w := c.writers[day]
	delete(c.writers, day)
	if c.cur == w {
		c.cur = nil
	}
	if len(w.rows) > 0 {
		if err := w.w.Write(w.rows); err != nil {
			w.w.Abort()
			return fmt.Errorf("changelog %s: %w", c.name, err)
		}
	}
	err := c.closer.start(w.w, func(add *delta.Add, _ int64) { c.adds = append(c.adds, add) })
	if err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	return nil
}

// abort discards the writers of a failed flush.
func (c *changelog) abort() {
	for day, w := range c.writers {
		w.w.Abort()
		delete(c.writers, day)
	}
	c.cur = nil
	c.closer.abort()
	c.adds, c.rows = nil, 0
}

// write closes the flush's writers: the flush's data files are then all
// written, and adds holds them. It touches nothing but this table, so
// flush runs it alongside the other tables' (see writeData).
func (c *changelog) write() error {
	for day := range c.writers {
		if err := c.closeWriter(day); err != nil {
			return err
		}
	}
	if err := c.closer.wait(); err != nil {
		return fmt.Errorf("changelog %s: %w", c.name, err)
	}
	return nil
}

// commit commits the files write wrote.
func (c *changelog) commit(ctx context.Context, a *Applier, ci commitInfo) error {
	if err := a.fail("data-written", c.name); err != nil {
		return err
	}
	ci.operation = "WRITE"
	err := a.commit(ctx, c.deltaTable, c.adds, ci)
	c.adds, c.rows = nil, 0
	return err
}
