package backfill

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lakeside/lakeside/internal/pgtest"
)

// shared is the cluster the package's tests share, each in a database of
// its own (pgtest.Shared).
var shared = pgtest.NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// TestQueryThenCopy runs statements and a COPY as one query against
// PostgreSQL: the statements' rows come back, nulls as nil, and the COPY's
// data goes where the callback says, as CopyTo writes it; an error of
// PostgreSQL's before or in the COPY comes back with the rows before it,
// and leaves the connection usable; a callback's error, a writer's error
// and a cancelled context end the query and close the connection.
func TestQueryThenCopy(t *testing.T) {
	c := shared.Cluster(t)
	dsn := c.DSN(pgtest.NewDatabase(t, c))
	ctx := context.Background()
	const copySQL = `COPY (SELECT g, CASE WHEN g % 3 = 0 THEN NULL ELSE 'r' || g END FROM generate_series(1, 20000) g) TO STDOUT`
	const statements = `BEGIN; SELECT 'a', NULL::text UNION ALL SELECT 'b', 'c'; SELECT 1 WHERE false; `
	var want bytes.Buffer
	if _, err := pgtest.Conn(t, dsn).PgConn().CopyTo(ctx, &want, copySQL); err != nil {
		t.Fatal(err)
	}

	conn := pgtest.Conn(t, dsn).PgConn()
	var got bytes.Buffer
	var seen [][][][]byte
	results, err := queryThenCopy(ctx, conn, statements+copySQL, func(rows [][][][]byte) (io.Writer, error) {
		seen = rows
		return &got, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantRows := [][][][]byte{nil, {{[]byte("a"), nil}, {[]byte("b"), []byte("c")}}, nil}
	if !sameResults(results, wantRows) || !sameResults(seen, wantRows) {
		t.Fatalf("the statements' rows: returned %q, given to the callback %q; want %q", results, seen, wantRows)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("the COPY wrote %d bytes, CopyTo %d", got.Len(), want.Len())
	}
	// The transaction the statements began is the connection's.
	if _, err := conn.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		t.Fatalf("the connection after the query: %v", err)
	}

	// Data the callback does not want is read and dropped.
	if _, err := queryThenCopy(ctx, conn, statements+copySQL, func([][][][]byte) (io.Writer, error) { return io.Discard, nil }); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "ROLLBACK").Close()

	// PostgreSQL's errors, in the COPY and before it.
	var pgErr *pgconn.PgError
	called := false
	results, err = queryThenCopy(ctx, conn, statements+`COPY (SELECT no_such_column FROM pg_class) TO STDOUT`, func([][][][]byte) (io.Writer, error) {
		called = true
		return io.Discard, nil
	})
	if !errors.As(err, &pgErr) || pgErr.Code != "42703" || called || !sameResults(results, wantRows) {
		t.Fatalf("a COPY of a column that does not exist: %v (callback called: %v), rows %q", err, called, results)
	}
	conn.Exec(ctx, "ROLLBACK").Close()
	results, err = queryThenCopy(ctx, conn, `SELECT 1; SELECT 1/0; `+copySQL, func([][][][]byte) (io.Writer, error) {
		called = true
		return io.Discard, nil
	})
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" || called || len(results) != 1 {
		t.Fatalf("a statement that fails before the COPY: %v (callback called: %v), rows %q", err, called, results)
	}
	if _, err := conn.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
		t.Fatalf("the connection after PostgreSQL's errors: %v", err)
	}

	// A callback's error, a writer's, a cancelled context.
	stop := errors.New("stop")
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for name, c := range map[string]struct {
		ctx  context.Context
		to   func([][][][]byte) (io.Writer, error)
		want error
	}{
		"callback": {ctx, func([][][][]byte) (io.Writer, error) { return nil, stop }, stop},
		"writer":   {ctx, func([][][][]byte) (io.Writer, error) { return failingWriter{stop}, nil }, stop},
		"context": {cctx, func([][][][]byte) (io.Writer, error) {
			cancel()
			return io.Discard, nil
		}, context.Canceled},
	} {
		conn := pgtest.Conn(t, dsn).PgConn()
		if _, err := queryThenCopy(c.ctx, conn, statements+copySQL, c.to); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", name, err, c.want)
		}
		if _, err := conn.Exec(ctx, "SELECT 1").ReadAll(); err == nil {
			t.Fatalf("%s: the connection answers after the query ended in the middle", name)
		}
	}
}

// sameResults reports whether two statements' rows are equal, nulls and
// empty texts told apart.
func sameResults(a, b [][][][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y [][][]byte) bool {
		return slices.EqualFunc(x, y, func(r, s [][]byte) bool {
			return slices.EqualFunc(r, s, func(v, w []byte) bool { return (v == nil) == (w == nil) && bytes.Equal(v, w) })
		})
	})
}

// failingWriter fails every write with err.
type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }
