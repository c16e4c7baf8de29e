package uploader

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config is the replica section of the agent's configuration. Its yaml
// tags are the section's keys; the config tag "size" tells the agent's
// parser that a value is written as a byte size such as 10GiB, and the tag
// reload:"live" that a running agent takes a new value on at once.
type Config struct {
	// URL is "s3://bucket/prefix" or "file:///path". It holds no
	// credentials: a user name or password in it is refused (see
	// ErrURLCredentials), so it may be shown in logs and status.
	URL string `yaml:"url"`
	// Site names the branch; tables go to <url>/<site>/<table>/, or in
	// the fleet layout it is the value of the fleet tables' _site column.
	Site string `yaml:"site"`
	// Layout is "site" (the default: the site's own tables under
	// <url>/<site>/) or "fleet" (every site commits into shared tables
	// <url>/<table>/, in a partition of its own; docs/fleet.md).
	Layout string `yaml:"layout"`
	// FleetInterval is the least time between two fleet commits of one
	// table (the fleet layout); zero means DefaultFleetInterval.
	FleetInterval time.Duration `yaml:"fleet_interval"`
	// Endpoint, Region, AccessKeyID and SecretAccessKey configure S3; empty
	// credentials fall back to AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN, an empty region to AWS_REGION, then us-east-1.
	Endpoint        string `yaml:"endpoint"`
	Region          string `yaml:"region"`
	AccessKeyID     string `yaml:"access_key_id"`
	SecretAccessKey string `yaml:"secret_access_key"`
	// MaxBacklog is the local disk budget in bytes of data not yet
	// uploaded; when reached the agent stops reading from PostgreSQL.
	// Zero means no budget.
	MaxBacklog int64 `yaml:"max_backlog" config:"size"`
	// MaxBytesPerSecond limits upload bandwidth; zero means unlimited.
	MaxBytesPerSecond int64 `yaml:"max_bytes_per_second" config:"size" reload:"live"`
	// PollInterval is how often local tables are checked for new versions
	// when no notification arrives; zero means 10s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// MaxBackoff caps the wait between attempts while the remote is
	// unreachable; zero means one minute.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// Concurrency is the number of files uploaded at once; zero means 4.
	Concurrency int `yaml:"concurrency"`
	// StallTimeout is how long a request to S3 may go without a byte of
	// it moving before it is cancelled and retried; zero means 30s.
	StallTimeout time.Duration `yaml:"stall_timeout"`
}

// Errors of Validate, which wraps them with the key at fault. Their text
// never quotes a value, so that a caller may print it as it is and add the
// value, shortened, where it helps.
var (
	// ErrURLCredentials means the URL holds a user name or password
	// (s3://KEY:SECRET@bucket). They would not be used, and the URL is
	// shown in logs and status: credentials belong in AccessKeyID and
	// SecretAccessKey, or the environment.
	ErrURLCredentials = errors.New("must not hold credentials")
	// ErrURLQuery means the URL has a query string or a fragment, which
	// nothing reads (a secret put there would show in logs and status).
	ErrURLQuery = errors.New("must not have a query string or fragment")
	// ErrURLSyntax means the URL does not parse.
	ErrURLSyntax = errors.New("not a valid URL")
	// ErrStallTimeout means the stall timeout is under a second, which
	// would cancel requests that are only slow.
	ErrStallTimeout = errors.New("must be at least 1s")
	// ErrURLScheme means the URL's scheme is neither s3 nor file.
	ErrURLScheme = errors.New("unsupported scheme (want s3 or file)")
	// ErrSite means Site is empty or not a single path element.
	ErrSite = errors.New("not a valid site name")
	// ErrLayout means Layout is neither "site" nor "fleet".
	ErrLayout = errors.New(`must be "site" or "fleet"`)
	// ErrFleetInterval means FleetInterval is negative.
	ErrFleetInterval = errors.New("must not be negative")
)

// Layouts of a replica (Config.Layout).
const (
	LayoutSite  = "site"
	LayoutFleet = "fleet"
)

// DefaultFleetInterval is the least time between two fleet commits of a
// table when Config.FleetInterval is zero: with many sites, one commit per
// site and table every half minute keeps a fleet table's commits few and
// each site's wait for the others short (TestBenchFleetCommits).
const DefaultFleetInterval = 30 * time.Second

// Validate checks the URL and the site name. Its errors never quote the URL,
// which may hold a secret.
func (c *Config) Validate() error {
	if hasUserinfo(c.URL) {
		return fmt.Errorf("replica url: %w", ErrURLCredentials)
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// A *url.Error quotes the whole URL; its cause does not.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("replica url: %w: %w", ErrURLSyntax, err)
	}
	if u.User != nil {
		return fmt.Errorf("replica url: %w", ErrURLCredentials)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(c.URL, "#") {
		return fmt.Errorf("replica url: %w", ErrURLQuery)
	}
	switch u.Scheme {
	case "s3":
		if u.Host == "" {
			return errors.New("replica url: s3 url has no bucket")
		}
	case "file":
		if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
			return errors.New("replica url: file url must be file:///absolute/path")
		}
	default:
		return fmt.Errorf("replica url: %w", ErrURLScheme)
	}
	if c.Site == "" || strings.ContainsAny(c.Site, "/\\") || c.Site == "." || c.Site == ".." {
		return fmt.Errorf("replica site: %w", ErrSite)
	}
	if c.Layout != "" && c.Layout != LayoutSite && c.Layout != LayoutFleet {
		return fmt.Errorf("replica layout: %w", ErrLayout)
	}
	if c.Site != strings.TrimSpace(c.Site) || strings.ContainsAny(c.Site, "\x00\n\r\t") {
		return fmt.Errorf("replica site: %w", ErrSite)
	}
	if c.FleetInterval < 0 {
		return fmt.Errorf("replica fleet_interval: %w", ErrFleetInterval)
	}
	if c.MaxBacklog < 0 || c.MaxBytesPerSecond < 0 || c.Concurrency < 0 {
		return errors.New("replica: max_backlog, max_bytes_per_second and concurrency must not be negative")
	}
	if c.StallTimeout != 0 && c.StallTimeout < time.Second {
		return fmt.Errorf("replica stall_timeout: %w", ErrStallTimeout)
	}
	return nil
}

// Fleet reports whether the replica holds fleet tables.
func (c *Config) Fleet() bool { return c.Layout == LayoutFleet }

// Target identifies the remote location (URL, site and layout). The upload
// state is kept per target, so a changed URL, site or layout starts
// replication over.
func (c *Config) Target() string {
	if c.Fleet() {
		return "fleet:" + strings.TrimRight(c.URL, "/") + "#" + c.Site
	}
	return strings.TrimRight(c.URL, "/") + "/" + c.Site
}

// hasUserinfo reports whether the authority of rawURL (between "//" and the
// path, query or fragment) holds an "@", that is a user name or password.
// It reads the text itself, so that a URL which does not parse is refused
// before any error could quote it.
func hasUserinfo(rawURL string) bool {
	_, rest, ok := strings.Cut(rawURL, "//")
	if !ok {
		return false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "@")
}
