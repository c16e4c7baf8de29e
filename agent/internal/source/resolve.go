package source

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/lakeside/lakeside/store"
)

// resolveTypes replaces, in a schema version's columns, the types that
// capture reads as another: a domain by its base type (and the base's
// type modifier, when the column has none of its own), an array of a
// domain by the array of its base type, and an array of a type pgtype does
// not know (an enum, a composite, citext, hstore) by text[], whose
// elements are the text PostgreSQL prints. The values are the same text
// either way; the Delta column gets the base type, or array<string>,
// instead of one string per value. known reports the types pgtype knows.
func resolveTypes(ctx context.Context, conn *pgx.Conn, cols []store.Column, known func(oid uint32) bool) error {
	for range 8 { // a domain over a domain over ...
		var oids []uint32
		for _, c := range cols {
			if !known(c.TypeOID) {
				oids = append(oids, c.TypeOID)
			}
		}
		if len(oids) == 0 {
			return nil
		}
		rows, err := conn.Query(ctx, `
			SELECT t.oid, t.typtype::text, t.typbasetype, t.typtypmod, t.typelem, coalesce(e.typtype::text, ''),
			       coalesce(b.typarray, 0)
			FROM pg_type t
			LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
			LEFT JOIN pg_type b ON b.oid = e.typbasetype
			WHERE t.oid = ANY ($1)`, oids)
		if err != nil {
			return fmt.Errorf("read column types: %w", err)
		}
		type typeRow struct {
			typtype   string
			base      uint32
			typmod    int32
			elem      uint32
			elemType  string
			baseArray uint32
		}
		found := map[uint32]typeRow{}
		for rows.Next() {
			var oid uint32
			var r typeRow
			if err := rows.Scan(&oid, &r.typtype, &r.base, &r.typmod, &r.elem, &r.elemType, &r.baseArray); err != nil {
				rows.Close()
				return fmt.Errorf("read column types: %w", err)
			}
			found[oid] = r
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read column types: %w", err)
		}
		changed := false
		for i := range cols {
			c := &cols[i]
			r, ok := found[c.TypeOID]
			switch {
			case !ok:
			case r.typtype == "d":
				c.TypeOID, changed = r.base, true
				if c.TypeMod < 0 {
					c.TypeMod = r.typmod
				}
			case r.elem != 0 && r.elemType == "d" && r.baseArray != 0:
				c.TypeOID, changed = r.baseArray, true
			case r.elem != 0 && !known(r.elem):
				c.TypeOID, changed = pgtype.TextArrayOID, true
			}
		}
		if !changed {
			return nil
		}
	}
	return nil
}
