package agent

import (
	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/live"
)

// Reload takes on the live keys of cfg (the upload bandwidth limit and the
// HTTP token; the log level belongs to whoever made the logger) and returns
// every key that differs from the configuration in effect. Keys that need a
// restart keep their running values, so a later reload reports them again.
// A configuration the running agent cannot take (a token removed while the
// server listens beyond loopback) is refused whole.
func (a *Agent) Reload(cfg *config.Config) ([]config.Change, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	effective := a.effective
	if effective == nil {
		effective = a.cfg
	}
	changes := config.Diff(effective, cfg)
	if cfg.HTTP.Token != effective.HTTP.Token && a.cfg.HTTP.Listen != config.HTTPOff {
		if err := live.CheckListen(live.Config{Listen: a.cfg.HTTP.Listen, Token: cfg.HTTP.Token}); err != nil {
			return nil, err
		}
	}
	// Take on the fields tagged reload:"live", where each acts; a test keeps
	// this list and the tags in step.
	next := *effective
	next.Log.Level = cfg.Log.Level
	if next.Replica.MaxBytesPerSecond != cfg.Replica.MaxBytesPerSecond {
		next.Replica.MaxBytesPerSecond = cfg.Replica.MaxBytesPerSecond
		if a.limiter != nil {
			setBandwidth(a.limiter, cfg.Replica.MaxBytesPerSecond)
		}
	}
	if next.HTTP.Token != cfg.HTTP.Token {
		next.HTTP.Token = cfg.HTTP.Token
		if a.server != nil {
			a.server.SetToken(cfg.HTTP.Token)
		}
	}
	a.effective = &next
	return changes, nil
}

// newBandwidthLimiter returns the upload limiter for bytesPerSecond (zero:
// unlimited). The agent always has one, so that a reload can set a limit.
func newBandwidthLimiter(bytesPerSecond int64) *rate.Limiter {
	l := rate.NewLimiter(rate.Inf, 1<<20)
	setBandwidth(l, bytesPerSecond)
	return l
}

// setBandwidth changes l to bytesPerSecond, with a burst of a tenth of a
// second's worth (between 32 KiB and 1 MiB) so that the limit holds over
// short spans too.
func setBandwidth(l *rate.Limiter, bytesPerSecond int64) {
	if bytesPerSecond <= 0 {
		l.SetLimit(rate.Inf)
		return
	}
	l.SetBurst(int(min(max(bytesPerSecond/10, 32<<10), 1<<20)))
	l.SetLimit(rate.Limit(bytesPerSecond))
}
