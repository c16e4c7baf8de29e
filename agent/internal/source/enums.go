package source

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// An enum value renamed (ALTER TYPE … RENAME VALUE) changes what every row
// holding it prints, and PostgreSQL sends no change for those rows: the
// catalog watcher notices the rename among the labels of the enum types a
// captured table's values hold, and has the table copied again
// (ReasonEnumRenamed). A value added changes no row, and asks for nothing.

// enumLabelsSQL returns the SQL of the labels of the enum types whose
// values the table whose pg_class row is class holds, through domains,
// arrays, ranges and composite types: "oid=label" texts in the order of
// their pg_enum OIDs.
func enumLabelsSQL(class string) string {
	return `coalesce((
		WITH RECURSIVE ty(oid) AS (
			SELECT ea.atttypid FROM pg_attribute ea WHERE ea.attrelid = ` + class + `.oid AND ea.attnum > 0 AND NOT ea.attisdropped
			UNION
			SELECT n.oid FROM ty JOIN pg_type et ON et.oid = ty.oid
			CROSS JOIN LATERAL (
				SELECT et.typbasetype WHERE et.typtype = 'd'
				UNION ALL SELECT et.typelem WHERE et.typcategory = 'A' AND et.typelem <> 0
				UNION ALL SELECT rg.rngsubtype FROM pg_range rg WHERE rg.rngtypid = et.oid OR rg.rngmultitypid = et.oid
				UNION ALL SELECT ca.atttypid FROM pg_attribute ca WHERE et.typtype = 'c' AND ca.attrelid = et.typrelid AND ca.attnum > 0 AND NOT ca.attisdropped
			) n(oid))
		SELECT array_agg(e.oid::text || '=' || e.enumlabel ORDER BY e.oid) FROM pg_enum e WHERE e.enumtypid IN (SELECT oid FROM ty)
	), '{}')`
}

// renamedLabel returns a label of was (enumLabelsSQL's) that now, a later
// look, names otherwise, with its new name.
func renamedLabel(was, now []string) (old, renamed string, ok bool) {
	labels := make(map[string]string, len(was))
	for _, l := range was {
		oid, label, _ := strings.Cut(l, "=")
		labels[oid] = label
	}
	for _, l := range now {
		oid, label, _ := strings.Cut(l, "=")
		if before, seen := labels[oid]; seen && before != label {
			return before, label, true
		}
	}
	return "", "", false
}

// enums acts on labels, the labels of the enum types whose values t's
// table holds as this look found them: a label renamed since the labels
// the watcher last acted on for the same table, in this session or as the
// state file records them (a rename while capture was stopped), asks for
// a copy of the table. Labels that differ from those are recorded once
// the copy is asked for: a crash in between asks again at the next start.
// The first look at a table with no record only records its labels.
func (w *watcher) enums(ctx context.Context, t *watched, labels []string) error {
	switch {
	case t.enumsOf == t.oid:
		if slices.Equal(t.enums, labels) {
			return nil
		}
		if old, renamed, ok := renamedLabel(t.enums, labels); ok {
			w.s.log.Warn("an enum value of a captured table's column was renamed, and PostgreSQL sends no change for the rows that hold it; the table is copied again",
				"table", t.configured.String(), "oid", t.oid, "value", old, "now", renamed)
			w.s.noteTable(t.identity, func(s *TableStatus) {
				s.Event, s.EventTime = fmt.Sprintf("enum value %q renamed to %q; copied again", old, renamed), time.Now()
			})
			if _, err := w.askCopy(ctx, t.identity, t.oid, ReasonEnumRenamed); err != nil {
				return err
			}
		}
	case t.enumsOf == 0 && len(labels) == 0:
		// A table whose values hold no enum has no record.
		t.enums, t.enumsOf = labels, t.oid
		return nil
	}
	rec := map[uint32][]string{t.oid: labels}
	if t.enumsOf != t.oid && t.enumsOf != 0 {
		// The generation before a re-creation: its record goes.
		rec[t.enumsOf] = nil
	}
	if err := w.s.writer.send(writeOp{kind: opEnumLabels, enumLabels: rec}); err != nil {
		return err
	}
	t.enums, t.enumsOf = labels, t.oid
	return nil
}
