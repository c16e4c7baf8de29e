package pgtest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lakeside/lakeside/internal/pgcluster"
)

func TestStartNewDatabaseConn(t *testing.T) {
	c := Start(t, map[string]string{"max_connections": "30"}, map[string]string{"max_connections": "40"})

	admin := Conn(t, c.DSN("postgres"))
	var maxConns, walLevel string
	if err := admin.QueryRow(t.Context(), "SELECT current_setting('max_connections'), current_setting('wal_level')").Scan(&maxConns, &walLevel); err != nil {
		t.Fatal(err)
	}
	if maxConns != "40" || walLevel != "logical" {
		t.Fatalf("max_connections=%s wal_level=%s, want 40 and logical", maxConns, walLevel)
	}

	db1, db2 := NewDatabase(t, c), NewDatabase(t, c)
	if db1 == db2 {
		t.Fatalf("NewDatabase returned %q twice", db1)
	}
	conn := Conn(t, c.TCPDSN(db1))
	var got string
	if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != db1 {
		t.Fatalf("current_database = %q, want %q", got, db1)
	}
}

func TestNewDatabaseCleanup(t *testing.T) {
	c := Start(t)
	admin := Conn(t, c.DSN("postgres"))

	var db string
	t.Run("with slots", func(t *testing.T) {
		// Registered before NewDatabase so that it runs after the drop: the
		// drop must cope with a walsender still streaming from a slot.
		var repl *pgconn.PgConn
		t.Cleanup(func() {
			if repl != nil {
				_ = repl.Close(context.Background())
			}
		})
		db = NewDatabase(t, c)
		if err := c.Exec(t.Context(), db, `
			CREATE TABLE t (id int PRIMARY KEY);
			CREATE PUBLICATION p FOR ALL TABLES;`); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(t.Context(), db, `SELECT pg_create_logical_replication_slot('idle', 'pgoutput')`); err != nil {
			t.Fatal(err)
		}
		// An active slot: a walsender streaming from it.
		var err error
		repl, err = pgconn.Connect(t.Context(), c.DSN(db)+" replication=database")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pglogrepl.CreateReplicationSlot(t.Context(), repl, "busy", "pgoutput", pglogrepl.CreateReplicationSlotOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pglogrepl.StartReplication(t.Context(), repl, "busy", 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'p'"},
		}); err != nil {
			t.Fatal(err)
		}
	})

	var n int
	if err := admin.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM pg_database WHERE datname = $1) + (SELECT count(*) FROM pg_replication_slots)", db).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s or its slots survived cleanup (%d left)", db, n)
	}

	t.Run("cluster gone", func(t *testing.T) {
		NewDatabase(t, c)
		if err := c.StopServer(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if err := c.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestDatabaseName(t *testing.T) {
	for in, prefix := range map[string]string{
		"TestFoo":                             "testfoo_",
		"TestFoo/sub case#01":                 "testfoo_sub_case_01_",
		"123":                                 "db_123_",
		"///":                                 "db_",
		strings.Repeat("TestLong", 20):        strings.Repeat("testlong", 5) + "_",
		"TestÜmlaut/Ä":                        "test_mlaut_",
		"Test__Double--Sep":                   "test_double_sep_",
		"TestTrailing/":                       "testtrailing_",
		"TestCase/" + strings.Repeat("x", 50): "testcase_" + strings.Repeat("x", 31) + "_",
	} {
		got := databaseName(in)
		if !strings.HasPrefix(got, prefix) || len(got) != len(prefix)+8 || len(got) > 63 {
			t.Errorf("databaseName(%q) = %q, want prefix %q plus 8 hex digits", in, got, prefix)
		}
	}
	if first, second := databaseName("TestX"), databaseName("TestX"); first == second {
		t.Error("databaseName is not unique")
	}
}

var shared = NewShared()

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }

// TestShared has tests running side by side share one cluster, each in a
// database of its own, with room for their slots and walsenders.
func TestShared(t *testing.T) {
	clusters := make([]*pgcluster.Cluster, 3)
	t.Run("group", func(t *testing.T) {
		for i := range clusters {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				c := shared.Cluster(t)
				clusters[i] = c
				db := NewDatabase(t, c)
				conn := Conn(t, c.DSN(db))
				var slots, senders string
				if err := conn.QueryRow(t.Context(), "SELECT current_setting('max_replication_slots'), current_setting('max_wal_senders')").Scan(&slots, &senders); err != nil {
					t.Fatal(err)
				}
				if slots != "64" || senders != "64" {
					t.Errorf("max_replication_slots=%s max_wal_senders=%s, want 64", slots, senders)
				}
				if err := c.Exec(t.Context(), db, `SELECT pg_create_logical_replication_slot('`+db+`', 'pgoutput')`); err != nil {
					t.Fatalf("a slot named after the database %s: %v", db, err)
				}
			})
		}
	})
	if clusters[0] == nil || clusters[0] != clusters[1] || clusters[1] != clusters[2] {
		t.Fatalf("the tests got clusters %p, %p and %p, want one", clusters[0], clusters[1], clusters[2])
	}
	// The tests' databases went with their slots.
	var n int
	admin := Conn(t, clusters[0].DSN("postgres"))
	if err := admin.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE 'testshared%') + (SELECT count(*) FROM pg_replication_slots)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d databases or slots of the tests left on the shared cluster", n)
	}
}
