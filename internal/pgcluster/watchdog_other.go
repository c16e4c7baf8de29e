//go:build !unix

package pgcluster

// watchdog does nothing here: Options.StopWithProcess is for Unix.
type watchdog struct{}

// startWatchdog starts no watchdog.
func (c *Cluster) startWatchdog() (*watchdog, error) { return nil, nil }

// release does nothing.
func (w *watchdog) release() {}
