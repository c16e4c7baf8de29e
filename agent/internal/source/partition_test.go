package source

import (
	"errors"
	"strings"
	"testing"
)

// TestPublicationOfPartitionsIsRefused starts on an existing publication
// that publishes a configured partitioned table as its partitions: the
// source refuses to start, and the check names the SQL that fixes it.
// Fixed so, it starts, and starts again on the same publication.
func TestPublicationOfPartitionsIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.exec(`CREATE TABLE meas (id int, at date, v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)`,
		`CREATE TABLE meas_p1 PARTITION OF meas FOR VALUES FROM ('2026-01-01') TO ('2026-07-01')`,
		`CREATE PUBLICATION lakeside_test FOR TABLE meas`)
	h.cfg.Tables = []Table{{"public", "meas"}}
	err := h.runUntilError()
	var pe *PreflightError
	if !errors.As(err, &pe) || !IsFatal(err) ||
		!strings.Contains(err.Error(), `ALTER PUBLICATION "lakeside_test" SET (publish_via_partition_root = true);`) {
		t.Fatalf("err = %v, want a fatal preflight error with the fix", err)
	}
	// Fixed as the check says, the source starts.
	h.exec(`ALTER PUBLICATION lakeside_test SET (publish_via_partition_root = true)`)
	h.start()
	h.waitStreaming()
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitStreaming()
}
