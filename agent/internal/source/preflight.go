package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Check is the outcome of one preflight check.
type Check struct {
	// Name says what was checked, e.g. "wal_level is logical".
	Name string
	OK   bool
	// Problem says what is wrong when the check failed.
	Problem string
	// Fix is the SQL (or action) that makes the check pass.
	Fix string
}

// String formats the check as one line, with the fix when it failed.
func (c Check) String() string {
	if c.OK {
		return "✓ " + c.Name
	}
	s := "✗ " + c.Name + ": " + c.Problem
	if c.Fix != "" {
		s += "\n    fix: " + c.Fix
	}
	return s
}

// PreflightError lists the failed checks.
type PreflightError struct{ Failed []Check }

func (e *PreflightError) Error() string {
	lines := make([]string, len(e.Failed))
	for i, c := range e.Failed {
		lines[i] = c.String()
	}
	return "preflight failed:\n" + strings.Join(lines, "\n")
}

// Preflight checks that PostgreSQL is ready for capture: logical WAL, a role
// that may replicate, free slots, and tables that exist, can be read, and
// identify their rows. It never changes anything.
func Preflight(ctx context.Context, conn *pgx.Conn, cfg Config) ([]Check, error) {
	var checks []Check
	add := func(c Check) { checks = append(checks, c) }

	var version int
	var walLevel, role string
	var canReplicate, superuser bool
	var maxSlots, usedSlots, maxSenders int
	var slotExists bool
	err := conn.QueryRow(ctx, `
		SELECT current_setting('server_version_num')::int,
		       current_setting('wal_level'),
		       current_user,
		       r.rolreplication, r.rolsuper,
		       current_setting('max_replication_slots')::int,
		       (SELECT count(*) FROM pg_replication_slots)::int,
		       current_setting('max_wal_senders')::int,
		       EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)
		FROM pg_roles r WHERE r.rolname = current_user`, cfg.Slot).
		Scan(&version, &walLevel, &role, &canReplicate, &superuser, &maxSlots, &usedSlots, &maxSenders, &slotExists)
	if err != nil {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	quotedRole := pgx.Identifier{role}.Sanitize()

	add(Check{Name: "PostgreSQL 14 or newer", OK: version >= 140000,
		Problem: "server version " + strconv.Itoa(version) + " cannot stream large transactions (pgoutput protocol 2)",
		Fix:     "upgrade PostgreSQL to 14 or newer"})
	add(Check{Name: "wal_level is logical", OK: walLevel == "logical",
		Problem: "wal_level is " + walLevel,
		Fix:     "ALTER SYSTEM SET wal_level = logical; -- then restart PostgreSQL"})
	add(Check{Name: "role " + role + " may replicate", OK: canReplicate || superuser,
		Problem: "the role has neither REPLICATION nor SUPERUSER",
		Fix:     "ALTER ROLE " + quotedRole + " WITH REPLICATION;"})
	add(Check{Name: "a replication slot is free", OK: slotExists || usedSlots < maxSlots,
		Problem: fmt.Sprintf("all %d replication slots are in use", maxSlots),
		Fix:     "ALTER SYSTEM SET max_replication_slots = " + strconv.Itoa(maxSlots+4) + "; -- then restart PostgreSQL"})
	add(Check{Name: "WAL senders are allowed", OK: maxSenders > 0,
		Problem: "max_wal_senders is 0",
		Fix:     "ALTER SYSTEM SET max_wal_senders = 10; -- then restart PostgreSQL"})

	for _, t := range cfg.Tables {
		checks = append(checks, checkTable(ctx, conn, t, quotedRole)...)
	}
	c, err := checkPartitionRoot(ctx, conn, cfg)
	if err != nil {
		return nil, err
	}
	if c != nil {
		add(*c)
	}
	return checks, nil
}

// checkPartitionRoot checks that an existing publication publishes the
// changes of a configured partitioned table as the table's own
// (publish_via_partition_root), not as its partitions', which are not
// captured. It returns nil when no configured table is partitioned or the
// publication does not exist yet (the agent creates it so).
func checkPartitionRoot(ctx context.Context, conn *pgx.Conn, cfg Config) (*Check, error) {
	var roots []string
	for _, t := range cfg.Tables {
		var partitioned bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'p')`, t.Schema, t.Name).Scan(&partitioned)
		if err != nil {
			return nil, fmt.Errorf("preflight: %w", err)
		}
		if partitioned {
			roots = append(roots, t.String())
		}
	}
	if len(roots) == 0 {
		return nil, nil
	}
	var viaRoot *bool
	err := conn.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&viaRoot)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	return &Check{Name: "publication " + cfg.Publication + " publishes partitioned tables as a whole", OK: viaRoot != nil && *viaRoot,
		Problem: "publish_via_partition_root is off, so the changes of " + strings.Join(roots, ", ") + " would come as their partitions'",
		Fix:     "ALTER PUBLICATION " + pub + " SET (publish_via_partition_root = true);"}, nil
}

// checkTable checks that a table exists, can be read, and identifies its rows.
func checkTable(ctx context.Context, conn *pgx.Conn, t Table, quotedRole string) []Check {
	var identity string
	var hasPK, canSelect bool
	err := conn.QueryRow(ctx, `
		SELECT c.relreplident::text,
		       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
		       has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).
		Scan(&identity, &hasPK, &canSelect)
	if errors.Is(err, pgx.ErrNoRows) {
		return []Check{{Name: "table " + t.String() + " exists", Problem: "no such table in this database",
			Fix: "create the table, or correct source.tables (names are case-sensitive, as in pg_class)"}}
	}
	if err != nil {
		return []Check{{Name: "table " + t.String() + " exists", Problem: err.Error()}}
	}
	checks := []Check{{Name: "table " + t.String() + " exists", OK: true}}
	checks = append(checks, Check{Name: "table " + t.String() + " can be read", OK: canSelect,
		Problem: "the role lacks SELECT, needed for the initial snapshot",
		Fix:     "GRANT SELECT ON " + t.Quoted() + " TO " + quotedRole + ";"})
	ok := identity == "f" || identity == "i" || (identity == "d" && hasPK)
	problem := "no primary key, so updates and deletes cannot be matched to rows"
	if identity == "n" {
		problem = "REPLICA IDENTITY NOTHING, so updates and deletes cannot be matched to rows"
	}
	checks = append(checks, Check{Name: "table " + t.String() + " identifies its rows", OK: ok,
		Problem: problem,
		Fix:     "ALTER TABLE " + t.Quoted() + " ADD PRIMARY KEY (…); -- or: ALTER TABLE " + t.Quoted() + " REPLICA IDENTITY FULL;"})
	return checks
}

// failed returns the checks that did not pass.
func failed(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}
