package applier

import (
	"fmt"

	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/delta"
)

// Change data feed. With Config.ChangeDataFeed the mirror's configuration
// sets delta.enableChangeDataFeed (a new mirror at its creation, an
// existing one in its next commit: Applier.commit), and a merge that
// rewrites committed files (a remove of a file whose rows are partly kept)
// writes change data files under _change_data/ holding, for every key the
// flush changed, the difference between the mirror's row before and after:
// insert (no row before), delete (no row after), or update_preimage and
// update_postimage (both). A key change in PostgreSQL is a delete of the
// old key and an insert of the new one. With soft delete the rows are the
// table's, _deleted included: a delete is an update of _deleted from
// false to true, an insert of a soft-deleted key one from true to false.
// A multiset mirror writes an insert or a delete per copy gained or lost
// (with soft delete, a copy lost is an update of its _deleted).
//
// No change data file is written where the add and remove actions are the
// changes, as the protocol allows: a flush that only adds files (inserts
// into new files), and a truncate, whose removes are its deletes and whose
// adds the rows inserted after it. Nor by a REWRITE or the column mapping
// upgrade, whose actions have dataChange false. A rewrite that changes no
// row still writes an empty change data file, so that readers do not read
// its remove and add as deletes and inserts.
//
// The appender runs with the change data feed only in a mirror without
// committed files (the initial snapshot or backfill of a new table): then
// its files hold only the flush's rows and no committed file is rewritten,
// so the commit only adds files. Elsewhere its files could hold rows copied
// from a committed file, and a merge over them would not tell the flush's
// inserts from the mirror's rows, so inserts are merged.

// changeFeed writes the change data files of one merge.
type changeFeed struct {
	m *mirror
	a *Applier
	w *delta.DataWriter
	// buf buffers rows for w (see nextRow).
	buf   []delta.Row
	files []*delta.AddCDC
	// rows counts the change rows written.
	rows int64
}

// change writes one change row: data column values (Unchanged as null),
// the _deleted value with soft delete, and the change type.
func (c *changeFeed) change(data []any, deleted bool, typ string) error {
	m := c.m
	if c.w != nil && c.w.NumRows()+int64(len(c.buf)) >= c.a.cfg.TargetFileRows {
		if err := c.close(); err != nil {
			return err
		}
	}
	if err := c.open(); err != nil {
		return err
	}
	n := len(m.schema.Fields)
	var row delta.Row
	c.buf, row = nextRow(c.buf, n+1)
	for i, v := range data {
		if i < len(m.dataPos) && m.dataPos[i] >= 0 {
			if v == typemap.Unchanged {
				v = nil
			}
			row[m.dataPos[i]] = v
		}
	}
	if m.delIdx >= 0 {
		row[m.delIdx] = deleted
	}
	row[n] = typ
	c.rows++
	if len(c.buf) >= 1024 {
		if err := c.w.Write(c.buf); err != nil {
			return fmt.Errorf("mirror %s: change data: %w", m.name, err)
		}
		c.buf = c.buf[:0]
	}
	return nil
}

func (c *changeFeed) open() error {
	if c.w != nil {
		return nil
	}
	w, err := delta.NewChangeDataWriter(c.m.t.Path(), c.m.schema, nil, nil, c.a.writeOptions(0))
	if err != nil {
		return fmt.Errorf("mirror %s: change data: %w", c.m.name, err)
	}
	c.w = w
	return nil
}

// close writes the buffered rows and closes the file being written.
func (c *changeFeed) close() error {
	if c.w == nil {
		return nil
	}
	w := c.w
	c.w = nil
	if len(c.buf) > 0 {
		if err := w.Write(c.buf); err != nil {
			w.Abort()
			return fmt.Errorf("mirror %s: change data: %w", c.m.name, err)
		}
		c.buf = c.buf[:0]
	}
	add, err := w.Close()
	if err != nil {
		return fmt.Errorf("mirror %s: change data: %w", c.m.name, err)
	}
	c.files = append(c.files, delta.CDCOf(add))
	return nil
}

// finish closes the last file and returns the cdc actions of the merge:
// at least one (an empty file when no row changed).
func (c *changeFeed) finish() ([]*delta.AddCDC, error) {
	if len(c.files) == 0 {
		if err := c.open(); err != nil {
			return nil, err
		}
	}
	if err := c.close(); err != nil {
		return nil, err
	}
	return c.files, nil
}

// abort deletes the file being written. Closed files of a merge that is
// not committed are orphans no commit refers to, which vacuum deletes.
func (c *changeFeed) abort() {
	if c.w != nil {
		c.w.Abort()
		c.w = nil
	}
}

// imageRow is a row of a key before or after a merge.
type imageRow struct {
	data    []any
	deleted bool
}

// diff writes the changes of a key whose rows were before and are after
// the merge (see the comment at the top).
func (c *changeFeed) diff(before []baseRow, after []imageRow) error {
	if c.m.multiset {
		return c.diffMultiset(before, after)
	}
	var b, a *imageRow
	if len(before) > 0 {
		b = &imageRow{data: before[0].data, deleted: before[0].deleted}
	}
	if len(after) > 0 {
		a = &after[0]
	}
	switch {
	case b == nil && a == nil:
	case b == nil:
		if err := c.change(a.data, a.deleted, delta.ChangeInsert); err != nil {
			return err
		}
	case a == nil:
		if err := c.change(b.data, b.deleted, delta.ChangeDelete); err != nil {
			return err
		}
	case b.deleted && a.deleted:
		// A soft-deleted row that stays so.
	default:
		if err := c.change(b.data, b.deleted, delta.ChangeUpdatePreimage); err != nil {
			return err
		}
		if err := c.change(a.data, a.deleted, delta.ChangeUpdatePostimage); err != nil {
			return err
		}
	}
	// A key holds one row; should it hold more, they are gained or lost.
	for i := 1; i < len(before); i++ {
		if err := c.change(before[i].data, before[i].deleted, delta.ChangeDelete); err != nil {
			return err
		}
	}
	for i := 1; i < len(after); i++ {
		if err := c.change(after[i].data, after[i].deleted, delta.ChangeInsert); err != nil {
			return err
		}
	}
	return nil
}

// diffMultiset writes the changes of a multiset key: the copies of one
// row gained or lost.
func (c *changeFeed) diffMultiset(before []baseRow, after []imageRow) error {
	var liveBefore, liveAfter int
	var row []any
	for _, b := range before {
		if !b.deleted {
			liveBefore++
			row = b.data
		}
	}
	for _, a := range after {
		if !a.deleted {
			liveAfter++
			row = a.data
		}
	}
	for i := liveBefore; i < liveAfter; i++ {
		if err := c.change(row, false, delta.ChangeInsert); err != nil {
			return err
		}
	}
	for i := liveAfter; i < liveBefore; i++ {
		if c.m.soft {
			if err := c.change(row, false, delta.ChangeUpdatePreimage); err != nil {
				return err
			}
			if err := c.change(row, true, delta.ChangeUpdatePostimage); err != nil {
				return err
			}
			continue
		}
		if err := c.change(row, false, delta.ChangeDelete); err != nil {
			return err
		}
	}
	return nil
}
