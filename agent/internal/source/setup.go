package source

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/store"
)

// FatalError is an error that retrying cannot fix: the operator must act.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }

func fatalf(format string, args ...any) error {
	return &FatalError{Err: fmt.Errorf(format, args...)}
}

// IsFatal reports whether err needs the operator rather than a retry.
func IsFatal(err error) bool {
	var f *FatalError
	return errors.As(err, &f)
}

// slotInfo is what pg_replication_slots says about the configured slot.
type slotInfo struct {
	exists         bool
	plugin         string
	database       string
	active         bool
	confirmedFlush store.LSN
	// walStatus is pg_replication_slots.wal_status: "lost" when PostgreSQL
	// invalidated the slot (max_slot_wal_keep_size).
	walStatus string
}

func readSlot(ctx context.Context, conn *pgx.Conn, name string) (slotInfo, error) {
	var s slotInfo
	var plugin, database, confirmed, walStatus *string
	err := conn.QueryRow(ctx, `
		SELECT plugin, database, active, confirmed_flush_lsn::text, wal_status
		FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &database, &s.active, &confirmed, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read slot %s: %w", name, err)
	}
	s.exists = true
	if plugin != nil {
		s.plugin = *plugin
	}
	if database != nil {
		s.database = *database
	}
	if walStatus != nil {
		s.walStatus = *walStatus
	}
	if confirmed != nil {
		l, err := pglogrepl.ParseLSN(*confirmed)
		if err != nil {
			return s, fmt.Errorf("read slot %s: %w", name, err)
		}
		s.confirmedFlush = store.LSN(l)
	}
	return s, nil
}

// ensurePublication creates the publication when it is missing and adds any
// configured table it lacks.
func ensurePublication(ctx context.Context, conn *pgx.Conn, cfg Config) (created bool, added []Table, err error) {
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&exists); err != nil {
		return false, nil, fmt.Errorf("read publication: %w", err)
	}
	if !exists {
		names := make([]string, len(cfg.Tables))
		for i, t := range cfg.Tables {
			names[i] = t.Quoted()
		}
		// A partitioned table's changes come as the table's own, not
		// as its partitions'.
		sql := "CREATE PUBLICATION " + pub + " FOR TABLE " + strings.Join(names, ", ") + " WITH (publish_via_partition_root = true)"
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false, nil, fatalf("create publication: %w (run as the tables' owner: %s;)", err, sql)
		}
		return true, nil, nil
	}
	for _, t := range cfg.Tables {
		// The table itself is a member (a partitioned table's
		// partitions are listed in pg_publication_tables instead of it
		// without publish_via_partition_root), or every table is.
		var in bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_publication p
			JOIN pg_class c ON true JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE p.pubname = $1 AND n.nspname = $2 AND c.relname = $3
			  AND (p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = c.oid)))`,
			cfg.Publication, t.Schema, t.Name).Scan(&in)
		if err != nil {
			return false, nil, fmt.Errorf("read publication: %w", err)
		}
		if in {
			continue
		}
		sql := "ALTER PUBLICATION " + pub + " ADD TABLE " + t.Quoted()
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false, nil, fatalf("add %s to publication: %w (run as the table's owner: %s;)", t, err, sql)
		}
		added = append(added, t)
	}
	return false, added, nil
}

// dropSlotSQL is the fix offered when a slot must be dropped by hand.
func dropSlotSQL(slot string) string {
	return "SELECT pg_drop_replication_slot('" + strings.ReplaceAll(slot, "'", "''") + "');"
}
