package agent

import (
	"reflect"

	"golang.org/x/time/rate"

	"github.com/lakeside/lakeside/agent/internal/live"
)

// Change is one configuration key whose value differs between the running
// configuration and a newly read one.
type Change struct {
	// Key is the key's path in the file, e.g. "replica.max_bytes_per_second".
	Key string
	// Live says the running agent takes the new value on at once; any other
	// change waits for a restart.
	Live bool
}

// isLive reports whether a running agent takes on a new value of the
// configuration field f at once: its struct tag says reload:"live", and
// Reload applies it.
func isLive(f reflect.StructField) bool {
	return f.Tag.Get("reload") == "live"
}

// Diff lists the keys whose values differ between old and new, in the order
// of the configuration's sections. It never includes the values, which may
// be secrets.
func Diff(old, new *Config) []Change {
	var out []Change
	diffValues("", reflect.ValueOf(*old), reflect.ValueOf(*new), &out)
	return out
}

// diffValues walks two values of one struct type by their yaml keys.
func diffValues(prefix string, a, b reflect.Value, out *[]Change) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlKey(f)
		if name == "" {
			continue
		}
		key := prefix + name
		av, bv := a.Field(i), b.Field(i)
		if hasYAMLFields(f.Type) {
			diffValues(key+".", av, bv, out)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			*out = append(*out, Change{Key: key, Live: isLive(f)})
		}
	}
}

// hasYAMLFields reports whether t is a configuration section (a struct whose
// fields are keys) rather than a value such as a duration or a table name.
func hasYAMLFields(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("yaml") != "" {
			return true
		}
	}
	return false
}

// Reload takes on the live keys of cfg (the upload bandwidth limit and the
// HTTP token; the log level belongs to whoever made the logger) and returns
// every key that differs from the configuration in effect. Keys that need a
// restart keep their running values, so a later reload reports them again.
// A configuration the running agent cannot take (a token removed while the
// server listens beyond loopback) is refused whole.
func (a *Agent) Reload(cfg *Config) ([]Change, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	effective := a.effective
	if effective == nil {
		effective = a.cfg
	}
	changes := Diff(effective, cfg)
	if cfg.HTTP.Token != effective.HTTP.Token && a.cfg.HTTP.Listen != HTTPOff {
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
