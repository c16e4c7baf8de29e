package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// queryThenCopy runs sql, statements ending with one COPY … TO STDOUT, as
// one simple query: one round trip where running the statements and then
// the COPY (PgConn.Exec, PgConn.CopyTo) takes two. It returns the rows of
// each statement before the COPY (a row is its values as text, nil for a
// null). When the COPY's data begins, it calls to with those rows; to
// returns where the data goes (io.Discard for none), or an error, which
// ends the query. An error of PostgreSQL's is returned with the rows read
// before it. On any other error the connection is closed: it was in the
// middle of a query.
//
// A backfill's chunk begins with statements that write the watermarks
// and take the chunk's snapshot. Sent on their own, they are a round trip
// the backfiller waits out for each chunk, on cores it shares with
// PostgreSQL and the applier; sent with the COPY, they are not.
//
// A performance trick, measured by TestBenchBackfill; switched off by
// Config.Off.ChunkQuery (LAKESIDE_TUNING_OFF=chunkquery for the agent),
// which runs the statements and then the COPY.
func queryThenCopy(ctx context.Context, conn *pgconn.PgConn, sql string, to func(rows [][][][]byte) (io.Writer, error)) ([][][][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// PgConn.ReceiveMessage would watch ctx for each message, a row of
	// the COPY each: the connection's deadline is set once instead.
	stop := context.AfterFunc(ctx, func() { conn.Conn().SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(err error) ([][][][]byte, error) {
		conn.Conn().Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	conn.Frontend().SendQuery(&pgproto3.Query{String: sql})
	if err := conn.Frontend().Flush(); err != nil {
		return fail(fmt.Errorf("send query: %w", err))
	}
	var results [][][][]byte
	var rows [][][]byte
	var w io.Writer
	var pgErr error
	for {
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			return fail(err)
		}
		switch msg := msg.(type) {
		case *pgproto3.DataRow:
			row := make([][]byte, len(msg.Values))
			for i, v := range msg.Values {
				if v != nil {
					row[i] = bytes.Clone(v)
				}
			}
			rows = append(rows, row)
		case *pgproto3.CommandComplete:
			if w == nil {
				results, rows = append(results, rows), nil
			}
		case *pgproto3.CopyOutResponse:
			if w, err = to(results); err != nil {
				return fail(err)
			}
			if w == nil {
				return fail(errors.New("no writer for the COPY"))
			}
		case *pgproto3.CopyData:
			if _, err := w.Write(msg.Data); err != nil {
				return fail(err)
			}
		case *pgproto3.ErrorResponse:
			pgErr = pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.ReadyForQuery:
			return results, pgErr
		}
	}
}
