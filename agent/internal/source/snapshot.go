package source

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/internal/source/backfill"
	"github.com/lakeside/lakeside/agent/internal/typemap"
	"github.com/lakeside/lakeside/store"
)

// snapshotChunk is the number of rows spooled per write during the snapshot;
// a write of wide rows holds fewer, up to snapshotChunkBytes of COPY text.
const (
	snapshotChunk      = 2048
	snapshotChunkBytes = 4 << 20
)

// relationFromCatalog describes the published columns of the table oid
// the way a pgoutput Relation message does, as captured as table, so that
// the snapshot's rows and the stream's share one schema version when
// nothing changed, and the catalog watcher describes a change of schema as
// the stream would.
func relationFromCatalog(ctx context.Context, conn *pgx.Conn, oid uint32, table string, at store.LSN, known func(uint32) bool) (*store.Relation, error) {
	rows, err := catalogRows(ctx, conn, oid)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", table, err)
	}
	return relationFromRows(ctx, conn, rows, oid, table, at, known)
}

// catalogQuery returns the query of the catalog rows that describe the
// table oid, a row per published column in order, as text that
// relationFromRows reads. The OID is a literal, so that the query can join
// a list of statements sent at once (package backfill's chunks).
func catalogQuery(oid uint32) string {
	return `SELECT n.nspname, c.relname, c.relreplident::text, a.attname, a.atttypid, a.atttypmod,
		       ` + replicaIdentitySQL("c", "a") + `,
		       a.attnum = ANY (SELECT unnest(i.indkey) FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
		       a.attndims, a.attnum, t.storage,
		       CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END, t.stamp, t.keystamp
		FROM pg_class c
		CROSS JOIN LATERAL (SELECT ` + tableStateSQL("c") + `) t(storage, stamp, keystamp)
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		WHERE c.oid = ` + strconv.FormatUint(uint64(oid), 10) + `
		ORDER BY a.attnum`
}

// catalogRows runs catalogQuery.
func catalogRows(ctx context.Context, conn *pgx.Conn, oid uint32) ([][][]byte, error) {
	results, err := conn.PgConn().Exec(ctx, catalogQuery(oid)).ReadAll()
	if err != nil {
		return nil, err
	}
	return results[0].Rows, nil
}

// relationFromRows describes the table oid from the rows of catalogQuery
// (see relationFromCatalog).
func relationFromRows(ctx context.Context, conn *pgx.Conn, rows [][][]byte, oid uint32, table string, at store.LSN, known func(uint32) bool) (*store.Relation, error) {
	rel := &store.Relation{Key: store.RelationKey{OID: oid, LSN: at}, Table: table}
	for _, row := range rows {
		if len(row) != 14 {
			return nil, fmt.Errorf("describe %s: catalog row of %d values, want 14", table, len(row))
		}
		col := store.Column{Name: string(row[3]), Key: string(row[6]) == "t", PrimaryKey: string(row[7]) == "t"}
		typ, err := strconv.ParseUint(string(row[4]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("describe %s: type of %s: %w", table, col.Name, err)
		}
		mod, err := strconv.ParseInt(string(row[5]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("describe %s: type modifier of %s: %w", table, col.Name, err)
		}
		dims, err := strconv.ParseInt(string(row[8]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("describe %s: dimensions of %s: %w", table, col.Name, err)
		}
		num, err := strconv.ParseInt(string(row[9]), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("describe %s: number of %s: %w", table, col.Name, err)
		}
		state, err := parseTableState(row[10], row[12], row[13])
		if err != nil {
			return nil, fmt.Errorf("describe %s: %w", table, err)
		}
		col.TypeOID, col.TypeMod, col.Dims, col.AttNum = uint32(typ), int32(mod), int(dims), int(num)
		if row[11] != nil {
			col.HasMissing, col.Missing = true, string(row[11])
		}
		rel.Schema, rel.Name = string(row[0]), string(row[1])
		state.setOn(rel)
		if len(row[2]) > 0 {
			rel.ReplicaIdentity = row[2][0]
		}
		rel.Columns = append(rel.Columns, col)
	}
	if len(rel.Columns) == 0 {
		return nil, fatalf("describe %s: table %d not found or has no columns", table, oid)
	}
	if err := resolveTypes(ctx, conn, rel.Columns, known); err != nil {
		return nil, fmt.Errorf("describe %s: %w", table, err)
	}
	return rel, nil
}

// copySnapshot copies every captured table inside the exported snapshot
// into the snapshot spool, then commits the spool as one transaction at the
// slot's consistent point, in the same write as the slot state done and a
// finished backfill record per table: a table with no record is copied by
// a backfill once it is configured (backfill.go).
func (s *Source) copySnapshot(ctx context.Context, conn *pgx.Conn, snapshotName string, done *store.SlotState, captured []*capturedTable, types *typemap.Map, rels map[uint32]*relationDecoder) error {
	at := done.ConsistentPoint
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
	if _, err := conn.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshotName, "'", "''")+"'"); err != nil {
		return fmt.Errorf("snapshot: use exported snapshot: %w", err)
	}
	var total int64
	start := time.Now()
	var copied []*store.Backfill
	for _, c := range captured {
		rel, err := relationFromCatalog(ctx, conn, c.oid, c.identity, at, types.Known)
		if err != nil {
			return err
		}
		// The table as the exported snapshot names it.
		t := Table{rel.Schema, rel.Name}
		if err := s.writer.send(writeOp{kind: opRelation, rel: rel}); err != nil {
			return err
		}
		rd := newRelationDecoder(types, rel, s.maxValue())
		rels[rel.Key.OID] = rd
		var estimate int64
		var partitioned bool
		err = conn.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint, relkind = 'p' FROM pg_class WHERE oid = $1`, rel.Key.OID).Scan(&estimate, &partitioned)
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", t, err)
		}
		cols := make([]string, len(rel.Columns))
		for i, c := range rel.Columns {
			cols[i] = pgx.Identifier{c.Name}.Sanitize()
		}
		cp := &copyReader{src: s, rd: rd, log: s.log.With("table", t.String()), estimate: estimate, started: time.Now(), lastLog: time.Now()}
		sql := "COPY " + t.Quoted() + " (" + strings.Join(cols, ", ") + ") TO STDOUT"
		if partitioned {
			// COPY reads a partitioned table only through a query.
			sql = "COPY (SELECT " + strings.Join(cols, ", ") + " FROM " + t.Quoted() + ") TO STDOUT"
		}
		if _, err := conn.PgConn().CopyTo(ctx, cp, sql); err != nil {
			return fmt.Errorf("snapshot %s: %w", t, err)
		}
		if err := cp.flush(); err != nil {
			return err
		}
		if len(cp.partial) > 0 {
			return fmt.Errorf("snapshot %s: COPY ended inside a row", t)
		}
		total += cp.rows
		s.log.Info("snapshot copied table", "table", t.String(), "rows", cp.rows, "seconds", time.Since(cp.started).Round(time.Millisecond).Seconds())
		copied = append(copied, &store.Backfill{OID: rel.Key.OID, Table: rel.Table, Reason: reasonSnapshot, Rows: cp.rows, Chunks: 1,
			Started: cp.started.UTC(), Finished: time.Now().UTC(), Done: true})
	}
	h := store.TxnHeader{CommitLSN: at, EndLSN: at, CommitTime: time.Now(), Snapshot: true}
	err := s.writer.send(writeOp{kind: opSpoolCommit, spool: store.SnapshotSpool, header: h, slot: done, backfills: copied, markCopies: true})
	if err != nil {
		return err
	}
	s.log.Info("initial snapshot complete", "rows", total, "seconds", time.Since(start).Round(time.Millisecond).Seconds(), "lsn", at.String())
	return nil
}

// copyReader receives COPY text output, decodes complete rows, and spools
// them in chunks. It logs progress every few seconds.
type copyReader struct {
	src     *Source
	rd      *relationDecoder
	log     *slog.Logger
	partial []byte
	slab    valueSlab
	lines   byteSlab
	batch   []store.Change
	// batchBytes is the COPY text of the rows in batch.
	batchBytes int
	rows       int64
	estimate   int64
	started    time.Time
	lastLog    time.Time
}

func (c *copyReader) Write(p []byte) (int, error) {
	if err := backfill.EachLine(&c.partial, p, c.row); err != nil {
		return 0, err
	}
	return len(p), nil
}

// row decodes one line of COPY text format.
func (c *copyReader) row(line []byte) error {
	vals, err := c.rd.decodeCopyRow(line, &c.slab, &c.lines, nil)
	if err != nil {
		return err
	}
	c.batch = append(c.batch, store.Change{Op: store.OpSnapshot, Relation: c.rd.rel.Key, New: vals})
	c.batchBytes += len(line)
	c.rows++
	c.src.changesReceived.Add(1)
	if len(c.batch) >= snapshotChunk || c.batchBytes >= snapshotChunkBytes {
		return c.flush()
	}
	return nil
}

func (c *copyReader) flush() error {
	c.src.beat(streamBeat)
	if len(c.batch) > 0 {
		if err := c.src.writer.send(writeOp{kind: opSpoolAppend, spool: store.SnapshotSpool, changes: c.batch}); err != nil {
			return err
		}
		c.batch, c.batchBytes = nil, 0
	}
	if time.Since(c.lastLog) >= 5*time.Second {
		c.lastLog = time.Now()
		elapsed := time.Since(c.started).Seconds()
		rate := float64(c.rows) / elapsed
		attrs := []any{"rows", c.rows, "rows_per_second", int64(rate)}
		if c.estimate > c.rows && rate > 0 {
			attrs = append(attrs, "eta_seconds", int64(float64(c.estimate-c.rows)/rate))
		}
		c.log.Info("snapshot progress", attrs...)
	}
	return nil
}

// decodeCopyRow decodes one line of COPY text format. When texts is not
// nil, it receives the text of each column (unescaped; nil for NULL), which
// shares the decoded values' memory.
func (rd *relationDecoder) decodeCopyRow(line []byte, slab *valueSlab, lines *byteSlab, texts [][]byte) ([]store.Value, error) {
	// The decoders may keep what they are given: give them a copy of the
	// row, not the COPY buffer.
	line = lines.clone(line)
	// Most rows have no backslash: their fields need no unescaping, and
	// are not scanned for one field by field.
	escaped := bytes.IndexByte(line, '\\') >= 0
	ncols := len(rd.cols)
	vals := slab.take(ncols)
	for i := 0; i < ncols; i++ {
		field := line
		if j := bytes.IndexByte(line, '\t'); j >= 0 {
			field, line = line[:j], line[j+1:]
		} else if i != ncols-1 {
			return nil, fmt.Errorf("copy %s: row with %d columns, want %d", rd.rel.QualifiedName(), i+1, ncols)
		} else {
			line = nil
		}
		if len(field) == 2 && field[0] == '\\' && field[1] == 'N' {
			if texts != nil {
				texts[i] = nil
			}
			// The slab's memory may hold a value of an earlier chunk
			// (backfill/tuning_chunk_memory.go).
			vals[i] = store.Value{}
			continue
		}
		if len(field) > rd.maxValue {
			// Its size as PostgreSQL sent it, escapes and all.
			if texts != nil {
				texts[i] = nil
			}
			vals[i] = store.Value{Kind: store.KindTooLarge, Int: int64(len(field))}
			continue
		}
		text := field
		if escaped {
			text = unescapeCopy(field)
		}
		if texts != nil {
			texts[i] = text
		}
		if err := rd.cols[i](&vals[i], text); err != nil {
			return nil, rd.columnError(i, field, err)
		}
	}
	if len(line) > 0 {
		return nil, fmt.Errorf("copy %s: row with more than %d columns", rd.rel.QualifiedName(), ncols)
	}
	return vals, nil
}

// unescapeCopy undoes COPY's text-format escaping. Fields without a
// backslash are returned as they are.
func unescapeCopy(f []byte) []byte {
	if bytes.IndexByte(f, '\\') < 0 {
		return f
	}
	out := make([]byte, 0, len(f))
	for i := 0; i < len(f); i++ {
		b := f[i]
		if b != '\\' || i+1 == len(f) {
			out = append(out, b)
			continue
		}
		i++
		switch c := f[i]; c {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			v, n := 0, 0
			for n < 2 && i+1 < len(f) && isHex(f[i+1]) {
				i++
				v = v*16 + hexVal(f[i])
				n++
			}
			if n == 0 {
				out = append(out, 'x')
			} else {
				out = append(out, byte(v))
			}
		default:
			if c >= '0' && c <= '7' {
				v := int(c - '0')
				for n := 1; n < 3 && i+1 < len(f) && f[i+1] >= '0' && f[i+1] <= '7'; n++ {
					i++
					v = v*8 + int(f[i]-'0')
				}
				out = append(out, byte(v))
			} else {
				out = append(out, c)
			}
		}
	}
	return out
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

func hexVal(b byte) int {
	switch {
	case b >= '0' && b <= '9':
		return int(b - '0')
	case b >= 'a' && b <= 'f':
		return int(b-'a') + 10
	}
	return int(b-'A') + 10
}
