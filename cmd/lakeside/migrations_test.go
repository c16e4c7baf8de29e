package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// migrationSeeds are the seeds TestRandomMigrations runs by default:
// between them, their sequences take every kind of step.
// LAKESIDE_MIGRATION_SEEDS (comma-separated) runs others.
var migrationSeeds = []uint64{2, 13}

// migrationSteps is how many migrations one seed runs.
const migrationSteps = 24

// TestRandomMigrations runs a random sequence of migrations on one table,
// chosen by a seed: columns added (with a constant, a volatile or no
// default), dropped, renamed and retyped, alone or with rows changed in
// the same transaction, values rewritten with their type kept, migrations
// rolled back (whole, or to a savepoint), VACUUM FULL, the key's type
// changed, the key replaced or dropped (REPLICA IDENTITY FULL), the table
// renamed, truncated, dropped and created again, `lakeside resync`, and
// SIGKILLs of the agent, while a writer inserts, updates and deletes rows.
// After each step the mirror equals PostgreSQL column by column under the
// table's current names, and at the end the changelog holds each change
// once. Even seeds decode with the smallest logical_decoding_work_mem.
func TestRandomMigrations(t *testing.T) {
	t.Parallel()
	seeds := migrationSeeds
	if s := os.Getenv("LAKESIDE_MIGRATION_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("LAKESIDE_MIGRATION_SEEDS: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { runMigrations(t, seed) })
	}
}

// migratedTable is what the test knows of the table's shape in
// PostgreSQL.
type migratedTable struct {
	name string
	// extra are the columns besides id and s, with their types.
	extra  []migratedColumn
	idType string
	// key is the primary key's columns, empty for none (REPLICA
	// IDENTITY FULL).
	key      string
	nextName int
}

type migratedColumn struct{ name, typ string }

func (m *migratedTable) newName() string {
	m.nextName++
	return fmt.Sprintf("c%d", m.nextName)
}

// query selects the table's columns, in the order of columns.
func (m *migratedTable) query() (string, []string) {
	cols := []string{"id", "s"}
	for _, c := range m.extra {
		cols = append(cols, c.name)
	}
	return fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), m.name), cols
}

const migratedDDL = `CREATE TABLE %s (id int4 PRIMARY KEY, s int8 NOT NULL, c1 int4, c2 text)`

// newMigratedTable returns the shape migratedDDL creates, naming new
// columns after the nextName-th.
func newMigratedTable(nextName int) *migratedTable {
	return &migratedTable{name: "chaos", extra: []migratedColumn{{"c1", "int4"}, {"c2", "text"}}, idType: "int4", key: "id", nextName: nextName}
}

func runMigrations(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	e := newE2E(t, []string{"public.chaos"})
	e.exec(fmt.Sprintf(migratedDDL, "chaos"), `INSERT INTO chaos SELECT g, g, g, 'v' || g FROM generate_series(1, 500) g`)
	m := newMigratedTable(2)
	if seed%2 == 0 {
		// PostgreSQL streams the larger steps' transactions while they
		// run: schema versions come from transactions in progress.
		e.setSourceKey("logical_decoding_work_mem", "64KiB")
	}
	d := e.start()
	waitState(t, e, d, "streaming")

	// The writer changes rows by id and s only, which every step keeps,
	// in the table under the name it has now; it pauses while the mirror
	// is compared. Its statements fail while a step holds the table or
	// the table is gone: those are not counted.
	var (
		writeMu sync.Mutex
		name    atomic.Value
		writes  atomic.Int64
		nextID  atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	name.Store(m.name)
	nextID.Store(100000)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := e.connect()
		defer conn.Close(context.Background())
		wrng := rand.New(rand.NewPCG(seed, seed+1))
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			writeMu.Lock()
			table := name.Load().(string)
			var err error
			switch r := wrng.IntN(10); {
			case r < 5:
				_, err = conn.Exec(context.Background(), `UPDATE `+table+` SET s = s + 1 WHERE id = $1`, 1+wrng.IntN(600))
			case r < 8:
				_, err = conn.Exec(context.Background(), `INSERT INTO `+table+` (id, s) VALUES ($1, 0)`, nextID.Add(1))
			default:
				_, err = conn.Exec(context.Background(), `DELETE FROM `+table+` WHERE id = $1`, 1+wrng.IntN(600))
			}
			writeMu.Unlock()
			if err == nil {
				writes.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log:\n%s", d.log())
		}
	})

	kills := 0
	steps := []struct {
		name string
		run  func() []string
	}{
		{"add a column with a constant default", func() []string {
			c := migratedColumn{m.newName(), "int4"}
			def := "7"
			if rng.IntN(2) == 0 {
				c.typ, def = "text", "'x'"
			}
			m.extra = append(m.extra, c)
			return []string{fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s %s DEFAULT %s`, m.name, c.name, c.typ, def)}
		}},
		{"add a column with a volatile default", func() []string {
			c := migratedColumn{m.newName(), "int8"}
			m.extra = append(m.extra, c)
			return []string{fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s int8 DEFAULT (random() * 1000)::int8`, m.name, c.name)}
		}},
		{"add a column and fill some rows", func() []string {
			c := migratedColumn{m.newName(), "int4"}
			m.extra = append(m.extra, c)
			return []string{
				fmt.Sprintf(`ALTER TABLE %s ADD COLUMN %s int4`, m.name, c.name),
				fmt.Sprintf(`UPDATE %s SET %s = id %% 1000 WHERE id %% 3 = 0`, m.name, c.name)}
		}},
		{"add, fill and rename a column in one transaction", func() []string {
			c := migratedColumn{m.newName(), "int4"}
			first := m.newName()
			m.extra = append(m.extra, c)
			return []string{fmt.Sprintf(`ALTER TABLE %[1]s ADD COLUMN %[2]s int4; UPDATE %[1]s SET %[2]s = id * 2 WHERE id %% 5 = 0; ALTER TABLE %[1]s RENAME COLUMN %[2]s TO %[3]s`,
				m.name, first, c.name)}
		}},
		{"insert rows and change a column's type in one transaction", func() []string {
			i := slices.IndexFunc(m.extra, func(c migratedColumn) bool { return c.typ == "int4" })
			if i < 0 {
				return nil
			}
			c := &m.extra[i]
			c.typ = "int8"
			last := nextID.Add(50)
			return []string{fmt.Sprintf(`INSERT INTO %[1]s (id, s, %[2]s) SELECT g, g, g FROM generate_series(%[3]d, %[4]d) g; ALTER TABLE %[1]s ALTER COLUMN %[2]s TYPE int8`,
				m.name, c.name, last-49, last)}
		}},
		{"drop a column", func() []string {
			if len(m.extra) == 0 {
				return nil
			}
			i := rng.IntN(len(m.extra))
			c := m.extra[i]
			m.extra = slices.Delete(m.extra, i, i+1)
			return []string{fmt.Sprintf(`ALTER TABLE %s DROP COLUMN %s`, m.name, c.name)}
		}},
		{"rename a column", func() []string {
			if len(m.extra) == 0 {
				return nil
			}
			c := &m.extra[rng.IntN(len(m.extra))]
			old := c.name
			c.name = m.newName()
			return []string{fmt.Sprintf(`ALTER TABLE %s RENAME COLUMN %s TO %s`, m.name, old, c.name)}
		}},
		{"change a column's type", func() []string {
			if len(m.extra) == 0 {
				return nil
			}
			c := &m.extra[rng.IntN(len(m.extra))]
			to, using := "int8", ""
			switch c.typ {
			case "int4":
				if rng.IntN(2) == 0 {
					to = "text"
				}
			case "int8":
				to = "int4"
			case "text":
				// A text default ('x') has no cast to int4.
				to, using = "int4", fmt.Sprintf(" USING length(%s), ALTER COLUMN %s DROP DEFAULT", c.name, c.name)
			}
			c.typ = to
			return []string{fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN %s TYPE %s%s`, m.name, c.name, to, using)}
		}},
		{"rewrite a column's values, its type kept", func() []string {
			if len(m.extra) == 0 {
				return nil
			}
			c := m.extra[rng.IntN(len(m.extra))]
			using := c.name + " + 1"
			if c.typ == "text" {
				using = "upper(" + c.name + ")"
			}
			return []string{fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s`, m.name, c.name, c.typ, using)}
		}},
		{"roll a migration back", func() []string {
			gone := m.newName()
			if rng.IntN(2) == 0 {
				return []string{fmt.Sprintf(`BEGIN; ALTER TABLE %[1]s ADD COLUMN %[2]s int4; UPDATE %[1]s SET %[2]s = id, s = s + 1; ROLLBACK`, m.name, gone)}
			}
			// Back to a savepoint, then on to another column.
			c := migratedColumn{m.newName(), "int4"}
			m.extra = append(m.extra, c)
			return []string{fmt.Sprintf(`BEGIN; SAVEPOINT before; ALTER TABLE %[1]s ADD COLUMN %[2]s int8; UPDATE %[1]s SET %[2]s = id; ROLLBACK TO SAVEPOINT before; `+
				`ALTER TABLE %[1]s ADD COLUMN %[3]s int4; UPDATE %[1]s SET %[3]s = id %% 7 WHERE id %% 2 = 0; COMMIT`, m.name, gone, c.name)}
		}},
		{"reclaim the table's space (VACUUM FULL)", func() []string {
			return []string{`VACUUM FULL ` + m.name}
		}},
		{"widen the key's type", func() []string {
			if m.idType != "int4" {
				return nil
			}
			m.idType = "int8"
			return []string{fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN id TYPE int8`, m.name)}
		}},
		{"replace the primary key", func() []string {
			old := m.key
			m.key = map[string]string{"id": "id, s", "id, s": "id", "": "id"}[old]
			if old == "" {
				return []string{fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY (%s), REPLICA IDENTITY DEFAULT`, m.name, m.key)}
			}
			return []string{fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s, ADD PRIMARY KEY (%s)`, m.name, primaryKeyName(t, e, m.name), m.key)}
		}},
		{"drop the primary key for a full replica identity", func() []string {
			if m.key == "" {
				return nil
			}
			m.key = ""
			return []string{fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s, REPLICA IDENTITY FULL`, m.name, primaryKeyName(t, e, m.name))}
		}},
		{"rename the table", func() []string {
			old := m.name
			m.name = map[string]string{"chaos": "chaos_renamed", "chaos_renamed": "chaos"}[old]
			return []string{fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, old, m.name)}
		}},
		{"truncate and load", func() []string {
			return []string{
				fmt.Sprintf(`TRUNCATE %s`, m.name),
				fmt.Sprintf(`INSERT INTO %s (id, s) SELECT g, g FROM generate_series(1, 300) g`, m.name)}
		}},
		{"update many rows", func() []string {
			return []string{fmt.Sprintf(`UPDATE %s SET s = s + 1000 WHERE id %% 7 = 0`, m.name)}
		}},
		{"drop the table and create it again", func() []string {
			old := m.name
			*m = *newMigratedTable(m.nextName)
			return []string{
				fmt.Sprintf(`DROP TABLE %s`, old),
				fmt.Sprintf(migratedDDL, "chaos"),
				`INSERT INTO chaos SELECT g, g, g, 'w' || g FROM generate_series(1, 400) g`}
		}},
		{"resync", func() []string {
			if m.key == "" {
				// A table without a key is copied while no
				// transaction changes it: the copy starts over after
				// one that does.
				writeMu.Lock()
				defer writeMu.Unlock()
			}
			if out, errOut, code := e.lakeside("resync", "--config", e.configPath, "public.chaos"); code != 0 {
				t.Fatalf("resync exited %d: %s%s", code, out, errOut)
			}
			return nil
		}},
		{"kill the agent", func() []string {
			e.sigkill(d, kills)
			kills++
			d = e.start()
			waitState(t, e, d, "streaming")
			return nil
		}},
	}
	for i := range migrationSteps {
		s := steps[rng.IntN(len(steps))]
		since := writes.Load()
		// A step's statements run between the writer's, each in a
		// transaction of its own, but the rename, whose table the
		// writer must follow.
		sqls := s.run()
		for _, sql := range sqls {
			if strings.Contains(sql, " RENAME TO ") || strings.HasPrefix(sql, "DROP TABLE") {
				writeMu.Lock()
				e.exec(sql)
				name.Store(m.name)
				writeMu.Unlock()
				continue
			}
			e.exec(sql)
		}
		name.Store(m.name)
		// Let the writer change rows after the step, then compare.
		for deadline := time.Now().Add(10 * time.Second); writes.Load() < since+20 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		query, cols := m.query()
		func() {
			writeMu.Lock()
			defer writeMu.Unlock()
			e.eventually(t, fmt.Sprintf("step %d (%s: %s)", i, s.name, strings.Join(sqls, "; ")), func() error {
				return e.mirrorDiff("public.chaos", query, cols...)
			})
		}()
		t.Logf("step %d: %s: %s", i, s.name, strings.Join(sqls, "; "))
	}
	if writes.Load() == 0 {
		t.Fatal("the writer changed no row")
	}

	// Each change is in the changelog once: no two of its rows share a
	// transaction and a position in it, through the kills.
	seen := map[[2]int64]string{}
	for _, r := range e.deltaRows("public.chaos_changes") {
		k := [2]int64{r["_lsn"].(int64), r["_seq"].(int64)}
		if op, ok := seen[k]; ok {
			t.Fatalf("the changelog holds change %d of the transaction ending at %d twice (%s, then %v)", k[1], k[0], op, r["_op"])
		}
		seen[k] = r["_op"].(string)
	}
	var streamed int64
	if err := e.conn.QueryRow(context.Background(), `SELECT coalesce(sum(stream_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = $1`, e.slot).Scan(&streamed); err != nil {
		t.Fatal(err)
	}
	e.stop(d)
	t.Logf("seed %d: %d writes, %d kills, %d changelog rows, %d transactions streamed while they ran", seed, writes.Load(), kills, len(seen), streamed)
}

// primaryKeyName returns the name of table's primary key constraint.
func primaryKeyName(t *testing.T, e *e2e, table string) string {
	t.Helper()
	var name string
	if err := e.conn.QueryRow(context.Background(),
		`SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, table).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
