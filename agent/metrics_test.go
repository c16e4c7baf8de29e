package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestBacklogBudgetMetric checks lakeside_replica_max_backlog_bytes, which
// the replica backlog alert divides by: replica.max_backlog in bytes, and
// no series when capture has no budget.
func TestBacklogBudgetMetric(t *testing.T) {
	if g := backlogBudget(0); g != nil {
		t.Errorf("max_backlog 0 (no budget) exports a gauge")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(backlogBudget(10 << 30))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one series", families)
	}
	f := families[0]
	if f.GetName() != "lakeside_replica_max_backlog_bytes" || f.GetMetric()[0].GetGauge().GetValue() != 10<<30 {
		t.Errorf("gathered %v, want lakeside_replica_max_backlog_bytes %d", f, 10<<30)
	}
}
