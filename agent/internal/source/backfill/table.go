package backfill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/store"
)

// keyColumn is a column the rows are paged by, with the type its values
// are cast to in the chunk's query.
type keyColumn struct{ name, typ string }

// copyTable copies one table, chunk after chunk, from the progress rec
// records.
func (b *Backfiller) copyTable(ctx context.Context, rec *store.Backfill) error {
	i := slices.IndexFunc(b.tables, func(c Table) bool { return c.OID == rec.OID })
	if i < 0 {
		return fmt.Errorf("backfill of table %d: not captured in this session", rec.OID)
	}
	t := b.tables[i].Name
	log := b.log.With("table", t)
	rel, err := b.describe(ctx, rec.OID, t)
	if err != nil {
		return fmt.Errorf("backfill %s: %w", t, err)
	}
	keys, err := b.keyColumns(ctx, rel)
	if err != nil {
		return fmt.Errorf("backfill %s: %w", t, err)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	prog := *rec
	switch {
	case len(keys) == 0 && (prog.Chunks > 0 || !prog.Truncate):
		// Without a key the rows queued cannot be told from those
		// changed meanwhile: the copy starts over, after a truncate.
		prog.Page, prog.Rows, prog.Chunks, prog.Truncate = 0, 0, 0, true
	case prog.After != nil && prog.Key != nil && !slices.Equal(prog.Key, names):
		// The last key queued is a value of another key: where the
		// copy stopped is not known by the new one.
		log.Warn("backfill starts over: the table's key changed", "was", prog.Key, "now", names)
		prog.After, prog.Key, prog.Rows, prog.Chunks, prog.Truncate = nil, nil, 0, 0, true
	}
	from := time.Now()
	tracked := b.stream.StartTracking(rec.OID, names)
	defer b.stream.StopTracking()
	var since store.LSN
	select {
	case since = <-tracked:
	case <-ctx.Done():
		return nil
	}
	// A transaction the stream received before it began tracking must
	// be visible to the first chunk's copy: under synchronous
	// replication it is only once acknowledged.
	for deadline := time.Now().Add(10 * time.Second); b.cfg.Capture.Confirmed() < since && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	how := "by key " + strings.Join(names, ", ")
	if len(keys) == 0 {
		how = "by ctid ranges (no primary key or replica identity index)"
	}
	// Running before the log says so, done after: what the log shows
	// between the two lines saw the copy running.
	b.cfg.Capture.Note(&prog, true, 0)
	log.Info("backfill started", "reason", prog.Reason, "rows_queued", prog.Rows, "chunk_rows", b.cfg.ChunkRows, "order", how)
	b.again = false
	// A pool of the copy's own, let go when the copy ends: what it holds,
	// and what the writer gives back after, is left to the garbage
	// collector.
	b.chunks = nil
	if !b.cfg.Off.ChunkMemory {
		b.chunks = newChunkPool()
		defer func() { b.chunks = nil }()
	}
	b.rowBytes, b.narrow = 0, false
	// A chunk is copied again after 100 ms, doubling to 5 s while it
	// must be again.
	again := backoff.New(backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Factor: 2})
	lastLog := time.Now()
	var redone, replaced, restarts int64
	// inARow counts the chunks copied again, and the copy's starts over,
	// since the last chunk queued.
	inARow := 0
	// held is a chunk copied whose high watermark is not written yet;
	// early says why the chunk after the last one queued is to be
	// copied again, found before it was copied.
	var held *copiedChunk
	var early string
	defer func() {
		if held != nil {
			b.drop(ctx, held)
		}
	}()
	for {
		select {
		case req := <-b.cfg.Requests:
			req.Done <- b.resync(ctx, req)
		default:
		}
		if b.again {
			return errResyncAgain
		}
		if held == nil && early == "" {
			var err error
			if held, early, err = b.copyChunk(ctx, t, &prog, keys, nil); err != nil {
				return err
			}
		}
		var res Result
		var next *store.Backfill
		if early != "" {
			res.Redo, early = early, ""
		} else {
			c := held
			held = nil
			var err error
			if res, held, early, err = b.handOver(ctx, t, c, keys); err != nil {
				return err
			}
			next = c.next
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case res.Restart != "":
			restarts++
			log.Warn("backfill starts over", "why", res.Restart, "times", restarts)
			if restarts == RestartsToReport {
				log.Error("a table without a key cannot be copied while transactions keep changing it: its copy starts over after each",
					"times", restarts, "fix", fmt.Sprintf("give the table a primary key (ALTER TABLE %[1]s ADD PRIMARY KEY (...)) or a replica identity index (ALTER TABLE %[1]s REPLICA IDENTITY USING INDEX ...), or pause its writes until the copy is done", t))
			}
			prog.Page, prog.Rows, prog.Chunks, prog.Truncate = 0, 0, 0, true
			b.cfg.Capture.Note(&prog, true, restarts)
			redone++
		}
		if !res.Queued {
			inARow++
		}
		if (!res.Queued || res.Restart != "") && max(inARow, int(restarts)) >= redosBeforeGivingWay {
			others, err := b.othersPending(rec.OID)
			if err != nil {
				return err
			}
			if others {
				log.Warn("backfill gives way to the other tables' copies, and resumes after them",
					"chunks_copied_again_in_a_row", inARow, "starts_over", restarts, "why", cmp.Or(res.Redo, res.Restart))
				if b.gaveWay == nil {
					b.gaveWay = map[uint32]bool{}
				}
				b.gaveWay[rec.OID] = true
				return errGaveWay
			}
		}
		if !res.Queued {
			wait := again.Next()
			if res.Redo != "" {
				log.Info("backfill copies a chunk again", "why", res.Redo, "backoff", wait.String())
				redone++
			}
			if backoff.Sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		again.Reset()
		inARow = 0
		prog = *next
		replaced += int64(res.Replaced)
		if prog.Done {
			// The next table is chosen from the state file: it
			// must record this one done first.
			if err := b.cfg.Capture.Sync(ctx); err != nil {
				return err
			}
			log.Info("backfill done", "reason", prog.Reason, "rows", prog.Rows, "chunks", prog.Chunks,
				"rows_left_to_changes", replaced, "chunks_copied_again", redone, "seconds", time.Since(from).Round(time.Millisecond).Seconds())
			b.cfg.Capture.Note(&prog, true, restarts)
			return nil
		}
		b.cfg.Capture.Note(&prog, true, restarts)
		if time.Since(lastLog) >= backfillLogEvery {
			lastLog = time.Now()
			log.Info("backfill progress", "rows", prog.Rows, "chunks", prog.Chunks, "rows_left_to_changes", replaced, "chunks_copied_again", redone)
		}
		if b.limiter != nil && res.Rows > 0 {
			if err := b.limiter.WaitN(ctx, min(res.Rows, b.limiter.Burst())); err != nil {
				return nil
			}
		}
	}
}

// keyColumns returns the columns a table's rows are paged by: the columns
// that identify a row (store.Relation.KeyColumns: the primary key, or the
// replica identity index), with their types; none for a table without
// either, copied by ctid ranges.
func (b *Backfiller) keyColumns(ctx context.Context, rel *store.Relation) ([]keyColumn, error) {
	var keys []keyColumn
	for _, name := range keyNames(rel) {
		var typ string
		err := b.conn.QueryRow(ctx, `SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1 AND attname = $2`,
			rel.Key.OID, name).Scan(&typ)
		if err != nil {
			return nil, fmt.Errorf("read the type of %s: %w", name, err)
		}
		keys = append(keys, keyColumn{name: name, typ: typ})
	}
	return keys, nil
}

// keyNames returns the names of the columns a table's rows are paged by
// (see keyColumns), none for a table copied by ctid ranges.
func keyNames(rel *store.Relation) []string {
	if rel.Multiset() {
		return nil
	}
	var names []string
	for _, i := range rel.KeyColumns() {
		names = append(names, rel.Columns[i].Name)
	}
	return names
}

// errKeyChanged ends a copy paged by a key the table no longer has: it
// starts over, by the new one.
var errKeyChanged = errors.New("the table's key changed")
