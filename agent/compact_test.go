package agent

import "testing"

// TestParseCompactQuery checks that the control socket's compaction takes
// only table and dry_run=true or false, each at most once, and refuses
// anything else before writing.
func TestParseCompactQuery(t *testing.T) {
	type want struct {
		table  string
		dryRun bool
	}
	for raw, w := range map[string]want{
		"": {}, "dry_run=false": {}, "dry_run=true": {dryRun: true},
		"table=public.orders":                      {table: "public.orders"},
		"table=public.orders_changes&dry_run=true": {table: "public.orders_changes", dryRun: true},
		"dry_run=false&table=public.%25odd%20name": {table: "public.%odd name"},
	} {
		if table, dryRun, err := parseCompactQuery(raw); err != nil || table != w.table || dryRun != w.dryRun {
			t.Errorf("parseCompactQuery(%q) = %q, %v, %v; want %q, %v", raw, table, dryRun, err, w.table, w.dryRun)
		}
	}
	for _, raw := range []string{"dry_run=maybe", "dry_run=", "dry_run", "dry_run=1", "dry_run=True", "dry_run=true&dry_run=true",
		"dryrun=true", "dry_run=true&force=1", "dry_run=%zz", "table=", "table=a&table=b", "tables=public.orders"} {
		if table, dryRun, err := parseCompactQuery(raw); err == nil {
			t.Errorf("parseCompactQuery(%q) = %q, %v; want an error", raw, table, dryRun)
		}
	}
}
