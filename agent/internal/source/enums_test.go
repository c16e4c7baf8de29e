package source

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lakeside/lakeside/store"
)

// TestEnumValueRenamedIsCopied renames values of enum types a captured
// table's columns hold, directly, in an array, through a domain and in a
// composite type: each rename asks for a copy of the table, from a
// truncate. A value added, or one renamed in an enum the table does not
// use, asks for nothing.
func TestEnumValueRenamedIsCopied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	logs := h.recordLog()
	h.exec(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`, `CREATE TYPE level AS ENUM ('low', 'high')`,
		`CREATE TYPE size AS ENUM ('s', 'l')`, `CREATE DOMAIN fit AS size`,
		`CREATE TYPE hue AS ENUM ('red', 'blue')`, `CREATE TYPE paint AS (h hue, coats int)`,
		`CREATE TYPE unused AS ENUM ('x')`,
		`CREATE TABLE items (id int8 PRIMARY KEY, m mood, ls level[], f fit, p paint)`,
		`INSERT INTO items VALUES (1, 'ok', '{low,high}', 's', '(red,2)')`)
	h.cfg.Tables = []Table{{"public", "items"}}
	h.cfg.WatchInterval = 100 * time.Millisecond
	calls := h.recordBackfills()
	h.start()
	h.waitStreaming()
	h.waitXid(h.xid(`INSERT INTO items (id) VALUES (2)`))
	// A rename before the watcher's first look would be its baseline.
	h.waitFor("the watcher's first look at the labels", func(r *store.Reader) bool {
		l, err := r.EnumLabels()
		return err == nil && len(l) > 0
	})
	const renamed = "an enum value of a captured table's column was renamed"
	for n, sqls := range [][]string{
		{`ALTER TYPE mood ADD VALUE 'meh'`, `ALTER TYPE unused RENAME VALUE 'x' TO 'y'`, `ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'`},
		{`ALTER TYPE level RENAME VALUE 'low' TO 'lo'`},
		{`ALTER TYPE size RENAME VALUE 'l' TO 'large'`},
		{`ALTER TYPE hue RENAME VALUE 'red' TO 'crimson'`},
	} {
		h.exec(sqls...)
		if got := h.waitBackfill(calls); got.reason != ReasonEnumRenamed {
			t.Fatalf("%s: a copy asked for with reason %q, want %q", sqls, got.reason, ReasonEnumRenamed)
		}
		logs.wait(t, renamed)
		logs.mu.Lock()
		warned := bytes.Count(logs.buf.Bytes(), []byte(renamed))
		logs.mu.Unlock()
		if warned != n+1 {
			t.Fatalf("%s: the log says %d times that a value was renamed, want %d", sqls, warned, n+1)
		}
	}
}

// TestEnumValueRenamedWhileStoppedIsCopied renames an enum value while
// capture is stopped: the labels the state file records tell the rename
// at the next start, which asks for a copy of the table once. Starts with
// the labels unchanged, the first of them with none recorded, ask for
// nothing.
func TestEnumValueRenamedWhileStoppedIsCopied(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`, `CREATE TABLE items (id int8 PRIMARY KEY, m mood)`,
		`CREATE TABLE plain (id int8 PRIMARY KEY)`, `INSERT INTO items VALUES (1, 'ok')`)
	var oid, plainOID uint32
	if err := h.conn.QueryRow(context.Background(), `SELECT 'items'::regclass::oid, 'plain'::regclass::oid`).Scan(&oid, &plainOID); err != nil {
		t.Fatal(err)
	}
	h.cfg.Tables = []Table{{"public", "items"}, {"public", "plain"}}
	h.cfg.WatchInterval = 50 * time.Millisecond
	calls := h.recordBackfills()
	labels := func(r *store.Reader) map[uint32][]string {
		l, err := r.EnumLabels()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// session runs capture until the watcher has recorded the labels
	// want holds, and has looked at the tables a few times more.
	session := func(want string) {
		t.Helper()
		h.start()
		h.waitStreaming()
		h.waitFor("the enum labels "+want+" recorded", func(r *store.Reader) bool {
			l := labels(r)
			return len(l) == 1 && len(l[oid]) == 3 && strings.HasSuffix(l[oid][1], "="+want)
		})
		time.Sleep(20 * h.cfg.WatchInterval)
		if err := h.stop(); err != nil {
			t.Fatal(err)
		}
	}
	noCopy := func(when string) {
		t.Helper()
		select {
		case c := <-calls:
			t.Fatalf("%s: a copy of %s asked for (%s)", when, c.table, c.reason)
		default:
		}
	}
	session("ok")
	noCopy("the first start, no labels recorded")
	session("ok")
	noCopy("a restart, the labels unchanged")
	h.exec(`ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`)
	session("fine")
	select {
	case got := <-calls:
		if got.reason != ReasonEnumRenamed || got.oid != oid {
			t.Fatalf("after a rename while stopped: a copy of table %d asked for with reason %q, want %d with %q", got.oid, got.reason, oid, ReasonEnumRenamed)
		}
	default:
		t.Fatal("after a rename while stopped: no copy asked for")
	}
	noCopy("after a rename while stopped, a second copy")
	session("fine")
	noCopy("a restart after the copy was asked for")
}
