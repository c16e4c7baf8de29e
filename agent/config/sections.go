package config

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lakeside/lakeside/agent/internal/live"
	"github.com/lakeside/lakeside/uploader"
)

// HTTPOff is the http.listen value that disables the HTTP server.
const HTTPOff = "off"

// minVacuumRetention is the shortest delta.vacuum_retention accepted.
const minVacuumRetention = time.Hour

// minTargetFileSize is the smallest delta.target_file_size accepted.
const minTargetFileSize = 1 << 20

// validate checks the delta section and fills its tables directory, by
// default below the state directory stateDir.
func (d *Delta) validate(p *configParser, stateDir *string) error {
	if !p.isSet(&d.TablesDir) {
		d.TablesDir = filepath.Join(*stateDir, "tables")
	}
	if d.TablesDir == "" {
		return p.fieldErrorf(&d.TablesDir, "must not be empty (remove the key to use <%s>/tables)", p.path(stateDir))
	}
	d.TablesDir = filepath.Clean(d.TablesDir)
	if d.VacuumRetention < minVacuumRetention {
		return p.fieldErrorf(&d.VacuumRetention, "%s is shorter than %s: readers and time travel need the files of recent versions", d.VacuumRetention, minVacuumRetention)
	}
	if d.TargetFileSize < minTargetFileSize {
		return p.fieldErrorf(&d.TargetFileSize, "%d bytes is smaller than 1MiB: compaction writes files about that size (128MiB by default)", d.TargetFileSize)
	}
	return nil
}

// Defaults of the replica section, applied when replication is on.
const (
	defaultReplicaPollInterval = 10 * time.Second
	defaultReplicaMaxBackoff   = time.Minute
	defaultReplicaConcurrency  = 4
)

// validateReplica checks the replica section and fills its defaults when
// replication is on. It is a function, not a method, because the section's
// type belongs to the uploader.
func validateReplica(p *configParser, r *uploader.Config) error {
	if r.URL == "" {
		if p.isSet(&r.Site) || p.isSet(&r.Endpoint) || p.isSet(&r.MaxBacklog) {
			return p.fieldErrorf(&r.URL, "is required when the replica section is used (s3://bucket/prefix or file:///path)")
		}
		return nil
	}
	if r.PollInterval == 0 {
		r.PollInterval = defaultReplicaPollInterval
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = defaultReplicaMaxBackoff
	}
	if r.Concurrency == 0 {
		r.Concurrency = defaultReplicaConcurrency
	}
	if err := r.Validate(); err != nil {
		// The uploader's errors quote no value, and the URL is never
		// quoted: it may hold a secret.
		switch {
		case errors.Is(err, uploader.ErrURLCredentials):
			return p.fieldErrorf(&r.URL, "must not hold credentials (the part before \"@\"), which the agent would not use and which would show in logs and status: write s3://bucket/prefix and set %s and %s, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment",
				p.path(&r.AccessKeyID), p.path(&r.SecretAccessKey))
		case errors.Is(err, uploader.ErrURLQuery):
			return p.fieldErrorf(&r.URL, "must not have a query string or fragment (\"?\" or \"#\"), which the agent would not use and which would show in logs and status: write s3://bucket/prefix and set the other replica keys")
		case errors.Is(err, uploader.ErrURLScheme):
			scheme, _, _ := strings.Cut(r.URL, ":")
			return p.fieldErrorf(&r.URL, "unsupported scheme %q (write s3://bucket/prefix or file:///path)", cutValue(scheme))
		case errors.Is(err, uploader.ErrURLSyntax):
			return p.fieldErrorf(&r.URL, "is not a valid URL (write s3://bucket/prefix or file:///path)")
		case errors.Is(err, uploader.ErrStallTimeout):
			return p.fieldErrorf(&r.StallTimeout, "%s is under 1s: a request would be cancelled while it is only slow (the default is 30s)", r.StallTimeout)
		case errors.Is(err, uploader.ErrSite):
			return p.fieldErrorf(&r.Site, "%q is not a valid name (use a name without a slash, backslash, control character or surrounding space, other than \".\" and \"..\", e.g. branch-17)", cutValue(r.Site))
		case errors.Is(err, uploader.ErrLayout):
			return p.fieldErrorf(&r.Layout, "%q is not a layout (write site, each site's own tables under <url>/<site>/, or fleet, every site's rows in shared tables under <url>/)", cutValue(r.Layout))
		case errors.Is(err, uploader.ErrFleetInterval):
			return p.fieldErrorf(&r.FleetInterval, "%s is negative (the default is %s)", r.FleetInterval, uploader.DefaultFleetInterval)
		}
		return p.fieldErrorf(&r.URL, "%v", err)
	}
	return nil
}

// validate checks the http section: an address the server can listen on,
// with a port from 1 to 65535, and a token of at least live.MinTokenLength
// characters whenever it is reachable from the network.
func (h *HTTP) validate(p *configParser) error {
	for _, host := range h.AllowedHosts {
		if !isHostName(host) {
			return p.fieldErrorf(&h.AllowedHosts, "%q is not a host name or address (write it without scheme or port, e.g. branch-17.example or 10.0.0.5)", cutValue(host))
		}
	}
	if h.Listen == HTTPOff {
		return nil
	}
	if err := live.CheckListen(live.Config{Listen: h.Listen, Token: h.Token}); err != nil {
		switch {
		case errors.Is(err, live.ErrBadPort):
			return p.fieldErrorf(&h.Listen, "%q has no valid port (use a port from 1 to 65535, e.g. 127.0.0.1:8080)", cutValue(h.Listen))
		case errors.Is(err, live.ErrTokenRequired):
			return p.fieldErrorf(&h.Listen, "%q is reachable from the network, so %s is required (set a random token of at least %d characters, e.g. from openssl rand -hex 32, or listen on 127.0.0.1)", cutValue(h.Listen), p.path(&h.Token), live.MinTokenLength)
		case errors.Is(err, live.ErrWeakToken):
			// Never quote the token, not even cut.
			return p.fieldErrorf(&h.Token, "is too short for %s %q, which is reachable from the network (use a random token of at least %d characters, not counting whitespace around them, e.g. from openssl rand -hex 32)", p.path(&h.Listen), cutValue(h.Listen), live.MinTokenLength)
		}
		return p.fieldErrorf(&h.Listen, "%q is not a host:port address (e.g. 127.0.0.1:8080, or off)", cutValue(h.Listen))
	}
	return nil
}

// isHostName reports whether s is an IP address or a DNS name.
func isHostName(s string) bool {
	if net.ParseIP(strings.Trim(s, "[]")) != nil {
		return true
	}
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// maxValueBytes is the most bytes of a value an error message quotes.
const maxValueBytes = 64

// cutValue shortens a value from the file for an error message, so that a
// value of any length gives an error of a few lines at most. Every message
// that quotes a value from the file quotes it through cutValue. The value
// is cut at a character boundary and marked with an ellipsis.
func cutValue(s string) string {
	if len(s) <= maxValueBytes {
		return s
	}
	i := maxValueBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
