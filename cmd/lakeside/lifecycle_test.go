package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/internal/pgtest"
)

// lifecycleTables are the tables TestDatabaseLifecycle changes, each by
// one step of a migration, while the agent runs throughout.
const lifecycleTables = `
	CREATE TABLE add_default (id int4 PRIMARY KEY, v text);
	CREATE TABLE add_volatile (id int4 PRIMARY KEY, v text);
	CREATE TABLE key_type (id int4 PRIMARY KEY, v text);
	CREATE TABLE key_using (id int4 PRIMARY KEY, v text);
	CREATE TABLE col_type (id int4 PRIMARY KEY, a int4);
	CREATE TABLE col_using (id int4 PRIMARY KEY, c text);
	CREATE TABLE col_same (id int4 PRIMARY KEY, c text);
	CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
	CREATE TABLE enum_renamed (id int4 PRIMARY KEY, m mood);
	CREATE TABLE col_rename (id int4 PRIMARY KEY, c text);
	CREATE TABLE new_key (id int4 PRIMARY KEY, code text NOT NULL, v int4);
	CREATE TABLE renamed (id int4 PRIMARY KEY, v text);
	CREATE TABLE recreated (id int4 PRIMARY KEY, v text);
	CREATE TABLE no_key (who text, what int4);
	ALTER TABLE no_key REPLICA IDENTITY FULL;
	CREATE TABLE late (id int4 PRIMARY KEY, v text);
	CREATE TABLE steady (id int8 PRIMARY KEY, n int8);
	CREATE TABLE parted (id int4 PRIMARY KEY, v text) PARTITION BY RANGE (id);
	CREATE TABLE parted_low PARTITION OF parted FOR VALUES FROM (MINVALUE) TO (100);
	CREATE TABLE parted_mid PARTITION OF parted FOR VALUES FROM (100) TO (200);
	INSERT INTO parted SELECT g, 'v' || g FROM generate_series(1, 199) g;
	INSERT INTO add_default SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO add_volatile SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO key_type SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO key_using SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO col_type SELECT g, g FROM generate_series(1, 200) g;
	INSERT INTO col_using SELECT g, repeat('x', g % 17) FROM generate_series(1, 200) g;
	INSERT INTO enum_renamed SELECT g, (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood FROM generate_series(1, 200) g;
	INSERT INTO col_same SELECT g, 's' || g FROM generate_series(1, 200) g;
	INSERT INTO col_rename SELECT g, 'c' || g FROM generate_series(1, 200) g;
	INSERT INTO new_key SELECT g, 'k' || g, g FROM generate_series(1, 200) g;
	INSERT INTO renamed SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO recreated SELECT g, 'v' || g FROM generate_series(1, 200) g;
	INSERT INTO no_key SELECT 'w' || (g % 7), g % 3 FROM generate_series(1, 200) g;
	INSERT INTO late SELECT g, 'late' || g FROM generate_series(1, 5000) g;`

// TestDatabaseLifecycle runs each step of the table against the
// real binary, with a writer keeping another table busy: after each step,
// with no restart and no operator action, the mirror equals PostgreSQL
// column by column under the names and types it has now, and the other
// table kept flowing.
func TestDatabaseLifecycle(t *testing.T) {
	t.Parallel()
	tables := []string{"public.add_default", "public.add_volatile", "public.key_type", "public.key_using", "public.col_type", "public.col_using", "public.col_same", "public.enum_renamed", "public.col_rename",
		"public.new_key", "public.renamed", "public.recreated", "public.no_key", "public.parted", "public.steady"}
	e := newE2E(t, tables)
	e.exec(lifecycleTables, `INSERT INTO steady VALUES (1, 0)`)
	d := e.start()
	e.waitApplied(d)

	// The writer updates steady's one row in its own transactions.
	var writes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := e.connect()
		defer conn.Close(context.Background())
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Exec(context.Background(), `UPDATE steady SET n = n + 1 WHERE id = 1`); err == nil {
				writes.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// flowing checks that steady's mirror reaches a value written after
	// the step began.
	flowing := func(t *testing.T, since int64) {
		t.Helper()
		e.eventually(t, "steady keeps flowing", func() error {
			for _, r := range e.deltaRows("public.steady") {
				if n, _ := r["n"].(int64); n > since {
					return nil
				}
			}
			return fmt.Errorf("steady's mirror is not past %d", since)
		})
	}
	steps := []struct {
		name  string
		sql   []string
		table string
		query string
		cols  []string
	}{
		{"add column with a constant default", []string{
			`ALTER TABLE add_default ADD COLUMN d int DEFAULT 7`},
			"add_default", `SELECT id, v, d FROM add_default`, []string{"id", "v", "d"}},
		{"add column with a volatile default", []string{
			`ALTER TABLE add_volatile ADD COLUMN r int DEFAULT (random() * 1000000)::int`},
			"add_volatile", `SELECT id, v, r FROM add_volatile`, []string{"id", "v", "r"}},
		{"key column type change", []string{
			`ALTER TABLE key_type ALTER COLUMN id TYPE bigint`,
			`INSERT INTO key_type VALUES (5000000000, 'big')`,
			`UPDATE key_type SET v = 'after' WHERE id IN (3, 5000000000)`,
			`DELETE FROM key_type WHERE id = 4`},
			"key_type", `SELECT id, v FROM key_type`, []string{"id", "v"}},
		{"key values rewritten (USING)", []string{
			`ALTER TABLE key_using ALTER COLUMN id TYPE int4 USING id + 1000`,
			`UPDATE key_using SET v = 'after' WHERE id = 1001`},
			"key_using", `SELECT id, v FROM key_using`, []string{"id", "v"}},
		{"non-key column type change", []string{
			`ALTER TABLE col_type ALTER COLUMN a TYPE bigint`,
			`UPDATE col_type SET a = a * 10000000000 WHERE id <= 3`},
			"col_type", `SELECT id, a FROM col_type`, []string{"id", "a"}},
		{"type change with a rewrite", []string{
			`ALTER TABLE col_using ALTER COLUMN c TYPE int USING length(c)`},
			"col_using", `SELECT id, c FROM col_using`, []string{"id", "c"}},
		{"values rewritten, type kept", []string{
			`ALTER TABLE col_same ALTER COLUMN c TYPE text USING upper(c)`},
			"col_same", `SELECT id, c FROM col_same`, []string{"id", "c"}},
		{"enum value renamed", []string{
			`ALTER TYPE mood RENAME VALUE 'ok' TO 'fine'`},
			"enum_renamed", `SELECT id, m::text FROM enum_renamed`, []string{"id", "m"}},
		{"column renamed", []string{
			`ALTER TABLE col_rename RENAME COLUMN c TO c2`,
			`UPDATE col_rename SET c2 = 'u' WHERE id = 1`},
			"col_rename", `SELECT id, c2 FROM col_rename`, []string{"id", "c2"}},
		{"primary key replaced", []string{
			`ALTER TABLE new_key DROP CONSTRAINT new_key_pkey`,
			`ALTER TABLE new_key ADD PRIMARY KEY (code)`,
			`UPDATE new_key SET v = -v WHERE code IN ('k1', 'k2')`,
			`DELETE FROM new_key WHERE code = 'k3'`,
			`UPDATE new_key SET id = 7 WHERE code = 'k8'`},
			"new_key", `SELECT id, code, v FROM new_key`, []string{"id", "code", "v"}},
		{"table renamed", []string{
			`ALTER TABLE renamed RENAME TO renamed2`,
			`UPDATE renamed2 SET v = 'after' WHERE id <= 10`,
			`DELETE FROM renamed2 WHERE id = 11`},
			"renamed", `SELECT id, v FROM renamed2`, []string{"id", "v"}},
		{"table dropped and created again", []string{
			`DROP TABLE recreated`,
			`CREATE TABLE recreated (id int4 PRIMARY KEY, v text)`,
			`INSERT INTO recreated SELECT g, 'new' || g FROM generate_series(1, 50) g`},
			"recreated", `SELECT id, v FROM recreated`, []string{"id", "v"}},
		{"table without a key: column added and dropped", []string{
			`ALTER TABLE no_key ADD COLUMN extra int DEFAULT 1`,
			`DELETE FROM no_key WHERE ctid = (SELECT min(ctid) FROM no_key WHERE who = 'w1')`,
			`UPDATE no_key SET what = 9 WHERE who = 'w2'`,
			`ALTER TABLE no_key DROP COLUMN what`,
			`DELETE FROM no_key WHERE ctid = (SELECT min(ctid) FROM no_key WHERE who = 'w3')`,
			`UPDATE no_key SET extra = 5 WHERE who = 'w4'`},
			"no_key", `SELECT who, extra FROM no_key`, []string{"who", "extra"}},
		{"partition attached with rows", []string{
			`CREATE TABLE parted_high (LIKE parted INCLUDING ALL)`,
			`INSERT INTO parted_high SELECT g, 'h' || g FROM generate_series(200, 299) g`,
			`ALTER TABLE parted ATTACH PARTITION parted_high FOR VALUES FROM (200) TO (MAXVALUE)`},
			"parted", `SELECT id, v FROM parted`, []string{"id", "v"}},
		{"partition detached", []string{
			`ALTER TABLE parted DETACH PARTITION parted_low`,
			`UPDATE parted SET v = 'after' WHERE id IN (150, 250)`},
			"parted", `SELECT id, v FROM parted`, []string{"id", "v"}},
		{"partition dropped", []string{
			`DROP TABLE parted_mid`},
			"parted", `SELECT id, v FROM parted`, []string{"id", "v"}},
		{"partitioned table: type change with a rewrite", []string{
			`ALTER TABLE parted ALTER COLUMN v TYPE varchar(40) USING 'p' || v`},
			"parted", `SELECT id, v FROM parted`, []string{"id", "v"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			since := writes.Load()
			e.exec(s.sql...)
			e.eventually(t, "mirror of "+s.table, func() error {
				return e.mirrorDiff("public."+s.table, s.query, s.cols...)
			})
			flowing(t, since)
		})
	}

	t.Run("changelog", func(t *testing.T) {
		// Every change of new_key once, in order, after the copy.
		ops := map[string]int{}
		for _, r := range e.deltaRows("public.new_key_changes") {
			ops[r["_op"].(string)]++
		}
		want := map[string]int{"snapshot": 200, "update": 3, "delete": 1}
		if !maps.Equal(ops, want) {
			t.Errorf("new_key's changelog holds %v, want %v", ops, want)
		}
		// The recreated table's history holds a truncate, then the new
		// generation's rows.
		var seq []string
		rows := e.deltaRows("public.recreated_changes")
		slices.SortStableFunc(rows, func(a, b map[string]any) int { return int(a["_lsn"].(int64) - b["_lsn"].(int64)) })
		for _, r := range rows {
			if op := r["_op"].(string); len(seq) == 0 || seq[len(seq)-1] != op {
				seq = append(seq, op)
			}
		}
		if !slices.Contains(seq, "truncate") || seq[len(seq)-1] == "truncate" {
			t.Errorf("recreated's changelog runs %v, want a truncate followed by the new rows", seq)
		}
	})

	t.Run("log and status say what happened", func(t *testing.T) {
		log := d.log()
		for _, want := range []string{"column type changed", "mirror rewritten", "column renamed", "the partitions of a captured table changed"} {
			if !strings.Contains(log, want) {
				t.Errorf("the log does not say %q", want)
			}
		}
	})

	t.Run("renamed table restarts under either name", func(t *testing.T) {
		dirs := e.tableDirs()
		e.stop(d)
		d = e.start()
		e.waitApplied(d)
		// check looks at the table the agent captures, under the
		// name it has now: asking the running agent, then reading
		// the stopped agent's state.
		checkFollows := func(when string) {
			out, stderr, code := e.lakeside("check", "--config", e.configPath)
			if code != 0 || !strings.Contains(out, "table public.renamed is captured under the name it has now, public.renamed2") ||
				!strings.Contains(out, "✓ table public.renamed2 exists") {
				t.Errorf("check %s: exit %d\n%s%s", when, code, out, stderr)
			}
		}
		checkFollows("while the agent runs")
		e.stop(d)
		checkFollows("while the agent is stopped")
		e.setSourceKey("tables", "["+strings.Replace(strings.Join(tables, ", "), "public.renamed", "public.renamed2", 1)+"]")
		d = e.start()
		e.exec(`UPDATE renamed2 SET v = 'restarted' WHERE id = 12`)
		e.waitApplied(d)
		if err := e.mirrorDiff("public.renamed", `SELECT id, v FROM renamed2`, "id", "v"); err != nil {
			t.Error(err)
		}
		if got := e.tableDirs(); !slices.Equal(got, dirs) {
			t.Errorf("table directories %v after the restarts, want %v", got, dirs)
		}
	})

	t.Run("table added to source.tables later", func(t *testing.T) {
		e.stop(d)
		e.setSourceKey("tables", "["+strings.Join(slices.Concat(tables, []string{"public.late"}), ", ")+"]")
		d = e.start()
		e.exec(`UPDATE late SET v = 'during' WHERE id % 100 = 0`, `DELETE FROM late WHERE id % 333 = 0`)
		e.eventually(t, "mirror of late", func() error {
			return e.mirrorDiff("public.late", `SELECT id, v FROM late`, "id", "v")
		})
	})
	e.stop(d)
}

// connect opens another connection to the test database.
func (e *e2e) connect() *pgx.Conn {
	return pgtest.Conn(e.t, e.dsn)
}

// eventually retries check until it succeeds, for up to a minute.
func (e *e2e) eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tableDirs returns the names of the Delta tables' directories, sorted.
func (e *e2e) tableDirs() []string {
	entries, err := os.ReadDir(filepath.Join(e.stateDir, "tables"))
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		if en.IsDir() && !strings.HasPrefix(en.Name(), ".") {
			out = append(out, en.Name())
		}
	}
	return out
}
