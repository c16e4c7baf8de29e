//go:build chaos

package main

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestChaosLong is make chaos: the harness of TestChaos at length, in two
// scenarios from one printed seed (LAKESIDE_CHAOS_SEED replays one):
// 100 faults, some 60 of them SIGKILLs, among every other kind; then every
// kind in turn, spaced out. The workload's writers pause between transactions:
// at full speed two of them write the WAL of 20,000-row transactions
// faster than any drain bound (some 18 GB in a run of 80 faults). It
// prints the harness's table, a row per scenario.
func TestChaosLong(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LAKESIDE_CHAOS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LAKESIDE_CHAOS_SEED: %v", err)
		}
		seed = n
	}
	// Kills weigh ten in seventeen: some sixty in a hundred faults.
	kills := []string{"sigkill", "sigkill", "sigkill", "sigkill", "sigkill-at-log", "sigkill-at-log", "sigkill-at-log", "sigkill-at-log"}
	plans := []chaosPlan{
		{name: "kills", seed: seed, faults: 100, every: 1500 * time.Millisecond, pause: 20 * time.Millisecond, kinds: append(kills, chaosKinds...)},
		{name: "every", seed: seed + 1, faults: 36, every: 3 * time.Second, pause: 10 * time.Millisecond, kinds: chaosKinds},
	}
	var rows []chaosResult
	for _, p := range plans {
		rows = append(rows, runChaos(t, p))
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Println(r)
	}
}
