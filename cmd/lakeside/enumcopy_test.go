package main

import (
	"fmt"
	"testing"
	"time"
)

// TestEnumRenamesWithAColumnDefault renames a value of an enum that a
// column added with a default holds, several times a few seconds apart
// with an update between, under an enum owned by a role that does not own
// the table: each rename has the table copied again, and each copy ends
// (it used to redo its first chunk for ever, the stream's schema version
// holding the default's old text), so that a resync of another table
// ends too, and both mirrors equal PostgreSQL.
func TestEnumRenamesWithAColumnDefault(t *testing.T) {
	t.Parallel()
	// Roles are the whole server's: a PostgreSQL of its own.
	e := newE2EAlone(t, []string{"public.t", "public.other"}, "")
	e.exec(`CREATE ROLE enum_owner`,
		`CREATE TYPE mood AS ENUM ('a', 'b')`,
		`ALTER TYPE mood OWNER TO enum_owner`,
		`CREATE TABLE t (id int PRIMARY KEY, v text)`,
		`INSERT INTO t SELECT g, 'v' FROM generate_series(1, 200) g`,
		`ALTER TABLE t ADD COLUMN m mood DEFAULT 'b'`,
		`CREATE TABLE other (id int PRIMARY KEY, v text)`,
		`INSERT INTO other SELECT g, 'o' FROM generate_series(1, 50) g`)
	d := e.start()
	waitState(t, e, d, "streaming")
	e.waitApplied(d)
	labels := []string{"b", "b1", "b", "b1", "c1"}
	for i := 1; i < len(labels); i++ {
		renamed := time.Now()
		e.exec(`SET ROLE enum_owner`,
			fmt.Sprintf(`ALTER TYPE mood RENAME VALUE '%s' TO '%s'`, labels[i-1], labels[i]),
			`RESET ROLE`)
		if i == 3 {
			e.exec(`UPDATE t SET v = 'u' WHERE id = 1`)
		}
		waitBackfilledSince(t, e, d, "public.t", renamed)
	}
	out, stderr, code := e.lakeside("resync", "--config", e.configPath, "public.other")
	if code != 0 {
		t.Fatalf("resync of another table: exit %d\n%s%s", code, out, stderr)
	}
	e.waitApplied(d)
	e.compareMirror(t, "public.t", `SELECT id, v, m::text FROM t`, "id", "v", "m")
	e.compareMirror(t, "public.other", `SELECT id, v FROM other`, "id", "v")
	e.stop(d)
}
