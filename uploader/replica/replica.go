// Package replica opens the uploader backend named by a replica URL:
// s3://bucket/prefix through package uploader/s3, file:///path through
// package uploader/file. The returned client is rooted at <url>/<site>/,
// or at <url>/ in the fleet layout.
package replica

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/s3"
)

// Open returns the client for cfg, which must be valid (see
// uploader.Config.Validate). transport, when not nil, is the HTTP transport
// under the retry layer of an S3 client (tests use it to inject faults).
func Open(cfg uploader.Config, transport http.RoundTripper) (uploader.ReplicaClient, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("replica url: %w", err)
	}
	site := cfg.Site
	if cfg.Fleet() {
		site = ""
	}
	switch u.Scheme {
	case "file":
		return file.New(filepath.Join(filepath.FromSlash(u.Path), site))
	default: // s3, checked by Validate
		prefix := strings.Trim(u.Path, "/")
		if prefix != "" {
			prefix += "/"
		}
		region := cfg.Region
		if region == "" {
			region = os.Getenv("AWS_REGION")
		}
		endpoint := cfg.Endpoint
		if endpoint == "" {
			endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
		}
		if endpoint == "" {
			endpoint = os.Getenv("AWS_ENDPOINT_URL")
		}
		return s3.New(s3.Config{
			Endpoint:        endpoint,
			Region:          region,
			AccessKeyID:     cfg.AccessKeyID,
			SecretAccessKey: cfg.SecretAccessKey,
			Bucket:          u.Host,
			Prefix:          strings.TrimSuffix(prefix+site, "/"),
			Transport:       transport,
			Deadlines:       deadlines(cfg.StallTimeout),
		})
	}
}

// OpenRoot returns the client for cfg rooted at the URL itself, whatever
// the layout: where the layout marker (uploader.LayoutMarker) lives.
func OpenRoot(cfg uploader.Config, transport http.RoundTripper) (uploader.ReplicaClient, error) {
	cfg.Layout = uploader.LayoutFleet
	return Open(cfg, transport)
}

// deadlines returns the S3 deadlines of replica.stall_timeout (zero: the
// default).
func deadlines(stall time.Duration) s3.Deadlines {
	d := s3.DefaultDeadlines()
	if stall > 0 {
		d.Stall = stall
	}
	return d
}
