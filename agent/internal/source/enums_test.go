package source

import (
	"bytes"
	"testing"
	"time"
)

// TestEnumValueRenamedIsCopied renames values of enum types a captured
// table's columns hold, directly, in an array, through a domain and in a
// composite type: each rename asks for a copy of the table, from a
// truncate. A value added, or one renamed in an enum the table does not
// use, asks for nothing.
func TestEnumValueRenamedIsCopied(t *testing.T) {
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
