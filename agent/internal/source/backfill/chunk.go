package backfill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lakeside/lakeside/store"
)

// describe describes the published columns of the table oid, as
// captured as table, the way the stream does (Catalog).
func (b *Backfiller) describe(ctx context.Context, oid uint32, table string) (*store.Relation, error) {
	rows, err := b.catalogRows(ctx, oid)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", table, err)
	}
	return b.cfg.Catalog.Relation(ctx, b.conn, rows, oid, table)
}

// catalogRows runs the catalog's query of the table oid.
func (b *Backfiller) catalogRows(ctx context.Context, oid uint32) ([][][]byte, error) {
	results, err := b.conn.PgConn().Exec(ctx, b.cfg.Catalog.Query(oid)).ReadAll()
	if err != nil {
		return nil, err
	}
	return results[0].Rows, nil
}

// sameCatalogRows reports whether two results of the catalog's query are
// the same.
func sameCatalogRows(a, b [][][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y [][]byte) bool {
		return slices.EqualFunc(x, y, func(v, w []byte) bool { return (v == nil) == (w == nil) && bytes.Equal(v, w) })
	})
}

// copiedChunk is a chunk whose rows are copied and handed to the stream,
// and whose transaction stays open until its high watermark is written.
type copiedChunk struct {
	win *Window
	// next is the progress recorded once the chunk is queued.
	next *store.Backfill
}

// copyChunk copies the chunk after prog, between its low watermark and
// its transaction left open for the high one. With prev, prev's high
// watermark is written in the same round trip as the chunk's low one. It
// returns the chunk, or why it is to be copied again (the table's columns
// changed), or an error; prev's high watermark is written in the first
// two cases.
func (b *Backfiller) copyChunk(ctx context.Context, t string, prog *store.Backfill, keys []keyColumn, prev *copiedChunk) (*copiedChunk, string, error) {
	// The table's columns as the chunk before it read them; the chunk's
	// first round trip reads them again, and a change is seen there.
	// A chunk that truncates first reads them before: the stream
	// queues the truncate with them at the low watermark.
	rel := b.rel
	if rel == nil || rel.Key.OID != prog.OID || prog.Truncate {
		rows, err := b.catalogRows(ctx, prog.OID)
		if err != nil {
			return nil, "", fmt.Errorf("backfill %s: describe the table: %w", t, err)
		}
		if rel, err = b.cfg.Catalog.Relation(ctx, b.conn, rows, prog.OID, t); err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
		b.rel, b.catalog = rel, rows
	}
	limit := b.chunkLimit()
	mem := b.memory()
	cr := newChunkReader(b.cfg.Catalog, rel, limit, mem)
	next := *prog
	next.After = nil
	var query string
	cols := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	from := "SELECT " + strings.Join(cols, ", ") + " FROM " + pgx.Identifier{rel.Schema, rel.Name}.Sanitize()
	if len(keys) > 0 {
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = k.name
		}
		if cr.keyPos = KeyPositions(rel, names); cr.keyPos == nil || !slices.Equal(keyNames(rel), names) {
			// The copy starts again, and reads the key anew.
			b.rel, b.catalog = nil, nil
			return nil, "", fmt.Errorf("backfill %s: %w (paged by %s, now %s)", t, errKeyChanged, strings.Join(names, ", "), strings.Join(keyNames(rel), ", "))
		}
		next.Key = names
		cr.maxBytes = MaxChunkBytes
		var err error
		if query, err = keysetQuery(from, keys, prog.After, limit); err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
	} else {
		var pages, leaves int64
		// The pages of the table, or of its largest partition (a
		// range of ctids selects rows in every partition).
		err := b.conn.QueryRow(ctx, `SELECT coalesce(max(pg_relation_size(relid)), pg_relation_size($1)) / current_setting('block_size')::int,
			       count(*) FROM pg_partition_tree($1) WHERE isleaf`, prog.OID).Scan(&pages, &leaves)
		if err != nil {
			return nil, "", fmt.Errorf("backfill %s: %w", t, err)
		}
		span := max(1, int64(limit)/(maxTuplesPerPage*max(1, leaves)))
		end := prog.Page + uint64(span)
		query = fmt.Sprintf("%s WHERE ctid >= '(%d,0)'::tid AND ctid < '(%d,0)'::tid", from, prog.Page, end)
		next.Page = end
		next.Done = int64(end) >= pages
	}
	b.chunk++
	win := &Window{ID: fmt.Sprintf("%s-%d", b.nonce, b.chunk), OID: prog.OID, Rel: rel,
		Truncate: prog.Truncate, Result: make(chan Result, 1)}
	b.stream.Open(win)
	// Until the chunk is handed over, its transaction is rolled back
	// and its window withdrawn on the way out.
	handed := false
	defer func() {
		if !handed {
			b.drop(ctx, &copiedChunk{win: win})
		}
	}()
	// prev's high watermark, the snapshot, the columns and the low
	// watermark, in one round trip: the chunk's transaction stays open
	// for the COPY, and is committed with its own high watermark.
	sql, skip := "", 0
	if prev != nil {
		high, err := highSQL(prev.win)
		if err != nil {
			return nil, "", err
		}
		sql, skip = high+"; ", highStatements
	}
	low, err := watermarkSQL(win, "low")
	if err != nil {
		return nil, "", err
	}
	sql += "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pg_current_snapshot()::text; " + b.cfg.Catalog.Query(prog.OID) + "; " + low
	results, changed, err := b.beginAndCopy(ctx, sql, "COPY ("+query+") TO STDOUT", skip, cr)
	if err != nil {
		return nil, "", fmt.Errorf("backfill %s: %w", t, err)
	}
	if changed {
		// Read by the columns they had: the next try reads them anew.
		b.rel, b.catalog = nil, nil
		return nil, "the table's columns changed", nil
	}
	snap, err := ParseSnapshot(string(results[skip+1][0][0]))
	if err != nil {
		return nil, "", fmt.Errorf("backfill %s: %w", t, err)
	}
	if len(cr.partial) > 0 {
		return nil, "", fmt.Errorf("backfill %s: COPY ended inside a row", t)
	}
	if err := b.cfg.Failpoints.fail("backfill-copied"); err != nil {
		return nil, "", err
	}
	if len(keys) > 0 {
		next.After = cr.lastKey()
		next.Done = len(cr.rows) < limit && cr.dropped == 0
		if next.After == nil {
			next.After = prog.After
		}
	}
	b.noteRowBytes(cr, t)
	mem.keep(cr)
	b.stream.Update(func() {
		win.Snap, win.Rows, win.Keys, win.Prog, win.Ready = snap, cr.rows, cr.keys, &next, true
		win.Recycle = b.recycler(mem)
	})
	handed = true
	return &copiedChunk{win: win, next: &next}, "", nil
}

// beginAndCopy runs a chunk's statements, sql, and then its COPY, copySQL,
// into cr: as one query (queryThenCopy), or in two round trips with
// Config.Off.ChunkQuery. It returns the statements' rows, the first
// skip of them those of the chunk before, and whether the table's columns
// are other than those the chunk is read by (b.catalog): the COPY's data
// is then dropped, or its COPY failed for a column gone.
func (b *Backfiller) beginAndCopy(ctx context.Context, sql, copySQL string, skip int, cr io.Writer) (results [][][][]byte, changed bool, err error) {
	// began checks the rows of the statements that begin the chunk, and
	// reports whether the columns are those it is read by.
	began := func(results [][][][]byte) (same bool, err error) {
		if len(results) != skip+4 || len(results[skip+1]) != 1 || len(results[skip+1][0]) != 1 {
			return false, errors.New("unexpected results")
		}
		return sameCatalogRows(results[skip+2], b.catalog), nil
	}
	if b.cfg.Off.ChunkQuery {
		res, err := b.conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil {
			return nil, false, fmt.Errorf("begin the chunk: %w", err)
		}
		for _, r := range res {
			results = append(results, r.Rows)
		}
		same, err := began(results)
		if err != nil {
			return nil, false, fmt.Errorf("begin the chunk: %w", err)
		}
		if !same {
			return results, true, nil
		}
		if _, err := b.conn.PgConn().CopyTo(ctx, cr, copySQL); err != nil {
			if !columnGone(err) {
				return nil, false, fmt.Errorf("copy: %w", err)
			}
			return results, true, nil
		}
		return results, false, nil
	}
	results, err = queryThenCopy(ctx, b.conn.PgConn(), sql+"; "+copySQL, func(results [][][][]byte) (io.Writer, error) {
		same, err := began(results)
		switch {
		case err != nil:
			return nil, err
		case !same:
			return io.Discard, nil
		}
		return cr, nil
	})
	if len(results) < skip+4 {
		if err == nil {
			err = errors.New("unexpected results")
		}
		return nil, false, fmt.Errorf("begin the chunk: %w", err)
	}
	results = results[:skip+4]
	same, berr := began(results)
	switch {
	case berr != nil:
		return nil, false, fmt.Errorf("begin the chunk: %w", berr)
	case !same || columnGone(err):
		return results, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("copy: %w", err)
	}
	return results, false, nil
}

// columnGone reports whether err is PostgreSQL's of a column that does
// not exist: a chunk's COPY names a column that was dropped or renamed
// after its statements read the table's columns, and before the COPY took
// the table's lock.
func columnGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703"
}

// handOver writes c's high watermark and returns what the stream did with
// the chunk. Unless c is the last chunk, or the copy is paced, the same
// round trip begins the chunk after it, which is copied while the stream
// handles c: handOver returns it once the stream has queued c (or why it
// is to be copied again), and drops it otherwise.
func (b *Backfiller) handOver(ctx context.Context, t string, c *copiedChunk, keys []keyColumn) (Result, *copiedChunk, string, error) {
	var after *copiedChunk
	var redo string
	if c.next.Done || b.limiter != nil {
		if err := b.emitHigh(ctx, c.win); err != nil {
			return Result{}, nil, "", b.settle(ctx, c, err)
		}
	} else {
		prog := *c.next
		prog.Truncate = false
		var err error
		if after, redo, err = b.copyChunk(ctx, t, &prog, keys, c); err != nil {
			return Result{}, nil, "", b.settle(ctx, c, err)
		}
	}
	var res Result
	select {
	case res = <-c.win.Result:
	case <-ctx.Done():
		b.drop(ctx, c)
		if after != nil {
			b.drop(ctx, after)
		}
		return Result{}, nil, "", nil
	}
	if !res.Queued {
		if after != nil {
			b.drop(ctx, after)
		}
		return res, nil, "", nil
	}
	if after != nil {
		// Copied before the stream counted c's rows.
		b.stream.Update(func() { after.next.Rows, after.next.Chunks = c.next.Rows, c.next.Chunks })
	}
	return res, after, redo, nil
}

// drop ends a chunk that is not handed over: its transaction is rolled
// back and its window withdrawn. It reports whether the stream had taken
// the window already (its high watermark was written).
func (b *Backfiller) drop(ctx context.Context, c *copiedChunk) (taken bool) {
	b.conn.PgConn().Exec(context.WithoutCancel(ctx), "ROLLBACK").Close()
	return !b.stream.Withdraw(c.win)
}

// settle ends, after err, a chunk whose high watermark may have been
// written. If the stream has taken it, its result is waited for, and a
// chunk queued is made durable first, so that the copy resumes after it.
func (b *Backfiller) settle(ctx context.Context, c *copiedChunk, err error) error {
	if !b.drop(ctx, c) {
		return err
	}
	select {
	case res := <-c.win.Result:
		if res.Queued {
			if serr := b.cfg.Capture.Sync(ctx); serr != nil {
				return serr
			}
		}
	case <-ctx.Done():
	}
	return err
}

// watermarkSQL returns the statement that writes a watermark of the chunk
// into the WAL.
func watermarkSQL(win *Window, mark string) (string, error) {
	content, err := json.Marshal(Watermark{ID: win.ID, OID: win.OID, Mark: mark})
	if err != nil {
		return "", err
	}
	return "SELECT pg_logical_emit_message(false, " + quoteLiteral([]byte(Prefix)) + ", " + quoteLiteral(content) + ")", nil
}

// highStatements is the number of statements highSQL returns.
const highStatements = 6

// highSQL returns the statements that commit a chunk's transaction and
// write its high watermark, then flush the WAL up to it. A
// non-transactional message is decoded once the WAL holding it is
// flushed, which nothing else may do for a while (up to
// wal_writer_delay); a transaction with an xid flushes it at its commit
// (locally: a synchronous standby, which the agent may itself be, is not
// waited for). PostgreSQL 17's flush argument would do it without an xid.
func highSQL(win *Window) (string, error) {
	high, err := watermarkSQL(win, "high")
	if err != nil {
		return "", err
	}
	return "COMMIT; BEGIN; SET LOCAL synchronous_commit = local; " + high + "; SELECT pg_current_xact_id(); COMMIT", nil
}

// emitHigh writes the high watermark of the chunk (highSQL) in a round
// trip of its own.
func (b *Backfiller) emitHigh(ctx context.Context, win *Window) error {
	sql, err := highSQL(win)
	if err != nil {
		return err
	}
	if _, err := b.conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("backfill: write the high watermark: %w", err)
	}
	return nil
}

// keysetQuery returns the query of the limit rows after the key after
// (from the first row when after is nil), in key order. The key's values
// are literals cast to the columns' types: COPY takes no parameters.
func keysetQuery(from string, keys []keyColumn, after [][]byte, limit int) (string, error) {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = pgx.Identifier{k.name}.Sanitize()
	}
	order := strings.Join(names, ", ")
	q := from
	if after != nil {
		if len(after) != len(keys) {
			return "", fmt.Errorf("the last key copied has %d values, the key %d columns", len(after), len(keys))
		}
		lits := make([]string, len(keys))
		for i, k := range keys {
			lits[i] = "CAST(" + quoteLiteral(after[i]) + " AS " + k.typ + ")"
		}
		q += " WHERE (" + order + ") > (" + strings.Join(lits, ", ") + ")"
	}
	return fmt.Sprintf("%s ORDER BY %s LIMIT %d", q, order, limit), nil
}

// quoteLiteral quotes text as an SQL string literal, whatever
// standard_conforming_strings says (as PostgreSQL's quote_literal does).
func quoteLiteral(text []byte) string {
	q := "'" + strings.ReplaceAll(string(text), "'", "''") + "'"
	if bytes.IndexByte(text, '\\') >= 0 {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// chunkLimit returns how many rows the next chunk of the copy reads: the
// configured chunk rows, fewer when rows like the last chunk's would take
// more than MaxChunkBytes, and at most firstChunkRows before a chunk tells.
func (b *Backfiller) chunkLimit() int {
	rows := b.cfg.ChunkRows
	if b.rowBytes == 0 {
		return min(rows, firstChunkRows)
	}
	return max(1, min(rows, MaxChunkBytes/b.rowBytes))
}

// noteRowBytes takes the memory a row of the chunk cr read took, for the
// next chunk's limit, and logs it the first time the copy's chunks hold
// fewer rows than configured because of it.
func (b *Backfiller) noteRowBytes(cr *chunkReader, table string) {
	if len(cr.rows) == 0 {
		return
	}
	b.rowBytes = max(1, cr.memory()/len(cr.rows))
	if rows := b.chunkLimit(); rows < b.cfg.ChunkRows && !b.narrow {
		b.narrow = true
		b.log.Info("backfill chunks hold fewer rows than configured: the rows are wide", "table", table,
			"chunk_rows", rows, "bytes_per_row", b.rowBytes, "chunk_bytes", MaxChunkBytes)
	}
}
