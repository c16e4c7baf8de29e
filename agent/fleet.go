package agent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/lakeside/lakeside/store"
	"github.com/lakeside/lakeside/uploader"
)

// FleetScratchDir is the directory under state_dir where files are
// translated for fleet tables before their upload.
const FleetScratchDir = "fleet"

// fleetOptions returns the uploader's options for the fleet layout: a new
// run id, recorded in the state file before any fleet put, and the runs
// recorded before it.
func (a *Agent) fleetOptions(db *store.DB) (*uploader.FleetOptions, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("fleet run id: %w", err)
	}
	run := hex.EncodeToString(b[:])
	past, err := uploader.RecordFleetRun(db, a.cfg.Replica.Target(), run)
	if err != nil {
		return nil, err
	}
	interval := a.cfg.Replica.FleetInterval
	if interval == 0 {
		interval = uploader.DefaultFleetInterval
	}
	return &uploader.FleetOptions{Site: a.cfg.Replica.Site, RunID: run, PastRuns: past, Interval: interval,
		ScratchDir: filepath.Join(a.cfg.StateDir, FleetScratchDir), EngineInfo: "lakeside/" + a.version}, nil
}
