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
	// URL is "s3://bucket/prefix" or "file:///path".
	URL string `yaml:"url"`
	// Site names the branch; tables go to <url>/<site>/<table>/.
	Site string `yaml:"site"`
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
}

// Validate checks the URL scheme and the site name.
func (c *Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("replica url: %w", err)
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
		return fmt.Errorf("replica url: unsupported scheme %q (want s3 or file)", u.Scheme)
	}
	if c.Site == "" || strings.ContainsAny(c.Site, "/\\") || c.Site == "." || c.Site == ".." {
		return fmt.Errorf("replica site: %q is not a valid name", c.Site)
	}
	if c.MaxBacklog < 0 || c.MaxBytesPerSecond < 0 || c.Concurrency < 0 {
		return errors.New("replica: max_backlog, max_bytes_per_second and concurrency must not be negative")
	}
	return nil
}

// Target identifies the remote location (URL and site). The upload state is
// kept per target, so a changed URL or site starts replication over.
func (c *Config) Target() string {
	return strings.TrimRight(c.URL, "/") + "/" + c.Site
}
