// Package s3 is the uploader backend for S3 and S3-compatible servers such as
// MinIO, built on minio-go.
//
// # Retries
//
// There is one retry policy: HTTP requests go through a
// go-retryablehttp client (connection errors, 429 and 5xx responses are
// retried with capped exponential backoff and full jitter, honouring
// Retry-After), and minio-go's own retry loop is disabled by setting
// minio.Options.MaxRetries to 1. 4xx answers such as 412 Precondition Failed
// are never retried. A failure left after the retries is returned to the
// uploader, which treats the remote as offline and backs off between passes.
// Each attempt runs under deadlines (deadline.go): one whose bytes stop
// moving, or that goes slower than a minimum rate, is cancelled and fails
// with uploader.ErrStalled, and is retried like a connection error.
//
// # Integrity
//
// Every put and part carries its SHA-256 as the signed x-amz-content-sha256
// payload hash (minio-go's streaming signature is turned off so the real
// digest is signed), and Content-MD5 when the body has an MD5. The server
// recomputes them and rejects a body that does not match (BadDigest / XAmzContentSHA256Mismatch), which this
// package reports as uploader.ErrChecksumMismatch.
//
// # Conditional writes
//
// Puts with IfNoneMatch send If-None-Match: * on PutObject and on
// CompleteMultipartUpload (through minio.Core, because minio-go's high-level
// PutObject does not pass it to the completion request).
package s3

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lakeside/lakeside/internal/backoff"
	"github.com/lakeside/lakeside/uploader"
)

// Config configures a Client.
type Config struct {
	// Endpoint is the server, as a URL ("http://127.0.0.1:9000") or a host
	// with an optional port (HTTPS then). Empty means AWS S3 in Region.
	Endpoint string
	// Region defaults to us-east-1.
	Region string
	// AccessKeyID, SecretAccessKey and SessionToken are the credentials;
	// when AccessKeyID is empty they come from the AWS_* environment
	// variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Bucket and Prefix locate the replica root; Prefix has no leading or
	// trailing slash and may be empty.
	Bucket string
	Prefix string
	// PathStyle forces path-style requests; it is implied when Endpoint is
	// set, because S3-compatible servers rarely have wildcard DNS.
	PathStyle bool
	// Retry is the HTTP retry policy; the zero value uses DefaultRetry.
	Retry RetryPolicy
	// Transport is the underlying HTTP transport (tests wrap it); nil uses
	// a clone of http.DefaultTransport.
	Transport http.RoundTripper
	// Deadlines bound each attempt of a request; the zero value uses
	// DefaultDeadlines.
	Deadlines Deadlines
}

// RetryPolicy is the capped exponential backoff of HTTP retries.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// MinWait is the first backoff; each retry doubles it up to MaxWait.
	// The actual wait is drawn uniformly between MinWait and the doubled
	// value (full jitter), or a server's Retry-After when longer.
	MinWait time.Duration
	MaxWait time.Duration
}

// DefaultRetry returns the retry policy used when Config.Retry is zero: four
// retries, waits from 200ms up to 5s.
func DefaultRetry() RetryPolicy {
	return RetryPolicy{MaxRetries: 4, MinWait: 200 * time.Millisecond, MaxWait: 5 * time.Second}
}

// Client is an S3 replica. It implements uploader.ReplicaClient and
// uploader.MultipartClient.
type Client struct {
	core   *minio.Core
	bucket string
	prefix string
}

// New returns a client for cfg. It does not contact the server.
func New(cfg Config) (*Client, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 replica: no bucket")
	}
	endpoint, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		endpoint = cfg.Endpoint
		if strings.Contains(endpoint, "://") {
			u, err := url.Parse(endpoint)
			if err != nil {
				return nil, fmt.Errorf("s3 replica: endpoint: %w", err)
			}
			endpoint, secure = u.Host, u.Scheme == "https"
		}
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	var creds *credentials.Credentials
	if cfg.AccessKeyID != "" {
		creds = credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	} else {
		creds = credentials.NewEnvAWS()
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle || cfg.Endpoint != "" {
		lookup = minio.BucketLookupPath
	}
	core, err := minio.NewCore(endpoint, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		Transport:    newRetryTransport(cfg.Transport, cfg.Retry, cfg.Deadlines),
		// One retry policy: retryablehttp's. MaxRetries 1 means a single
		// attempt in minio-go.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 replica: %w", err)
	}
	return &Client{core: core, bucket: cfg.Bucket, prefix: strings.Trim(cfg.Prefix, "/")}, nil
}

// idleConnsPerHost is how many idle connections to the server are kept:
// more than the uploader's requests in flight at once.
const idleConnsPerHost = 64

// newRetryTransport wraps base, each of whose attempts runs under
// deadlines, in a go-retryablehttp round tripper with policy.
func newRetryTransport(base http.RoundTripper, policy RetryPolicy, deadlines Deadlines) http.RoundTripper {
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// The uploader's workers, its commits and its deletes go to one
		// host at once: keep their connections open between requests
		// (net/http keeps 2 per host by default and closes the rest).
		t.MaxIdleConnsPerHost = idleConnsPerHost
		base = t
	}
	if policy == (RetryPolicy{}) {
		policy = DefaultRetry()
	}
	if deadlines == (Deadlines{}) {
		deadlines = DefaultDeadlines()
	}
	base = deadlineTransport{next: base, d: deadlines}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: base}
	rc.Logger = nil
	rc.RetryMax = policy.MaxRetries
	rc.RetryWaitMin = policy.MinWait
	rc.RetryWaitMax = policy.MaxWait
	rc.Backoff = jitterBackoff
	rc.CheckRetry = retryPolicy
	// Hand the last response to minio-go so it can read the S3 error.
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return replayTransport{next: &retryablehttp.RoundTripper{Client: rc}}
}

// retryPolicy is go-retryablehttp's default (connection errors, 429, 5xx),
// and also retries a 409 to a put: S3 answers ConditionalRequestConflict
// when a conditional put meets a conflicting request for the same key in
// flight, and asks for the put to be sent again, which then either lands
// or fails its condition.
func retryPolicy(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if err == nil && resp != nil && resp.StatusCode == http.StatusConflict && resp.Request != nil &&
		(resp.Request.Method == http.MethodPut || resp.Request.Method == http.MethodPost) {
		return ctx.Err() == nil, ctx.Err()
	}
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// jitterBackoff is capped exponential backoff with full jitter; a longer
// Retry-After from a 429 or 503 wins (still capped).
func jitterBackoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			return min(time.Duration(s)*time.Second, maxWait)
		}
	}
	return backoff.Policy{Min: minWait, Max: maxWait, Factor: 2, Jitter: backoff.Full}.Delay(attempt)
}

// Type returns "s3".
func (c *Client) Type() string { return "s3" }

func (c *Client) object(key string) string {
	if c.prefix == "" {
		return key
	}
	return c.prefix + "/" + key
}

// PutObject stores body under key in one request.
func (c *Client) PutObject(ctx context.Context, key string, body uploader.Body, opts uploader.PutOptions) error {
	ctx = withReopen(ctx, body.Reopen, body.Size)
	po := minio.PutObjectOptions{DisableContentSha256: true, DisableMultipart: true}
	if opts.IfNoneMatch {
		po.SetMatchETagExcept("*")
	}
	_, err := c.core.PutObject(ctx, c.bucket, c.object(key), body.R, body.Size,
		base64.StdEncoding.EncodeToString(body.MD5), hex.EncodeToString(body.SHA256), po)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, mapError(err))
	}
	return nil
}

// GetObject opens the object at key.
func (c *Client) GetObject(ctx context.Context, key string) (io.ReadCloser, error) {
	r, _, _, err := c.core.GetObject(ctx, c.bucket, c.object(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, mapError(err))
	}
	return r, nil
}

// DeleteObject removes the object at key; S3 answers a delete of a missing
// key with success.
func (c *Client) DeleteObject(ctx context.Context, key string) error {
	if err := c.core.RemoveObject(ctx, c.bucket, c.object(key), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete %s: %w", key, mapError(err))
	}
	return nil
}

// CreateMultipartUpload starts a multipart upload of key.
func (c *Client) CreateMultipartUpload(ctx context.Context, key string) (string, error) {
	id, err := c.core.NewMultipartUpload(ctx, c.bucket, c.object(key), minio.PutObjectOptions{})
	if err != nil {
		return "", fmt.Errorf("create multipart upload %s: %w", key, mapError(err))
	}
	return id, nil
}

// UploadPart uploads one part.
func (c *Client) UploadPart(ctx context.Context, key, uploadID string, number int, body uploader.Body) (string, error) {
	ctx = withReopen(ctx, body.Reopen, body.Size)
	p, err := c.core.PutObjectPart(ctx, c.bucket, c.object(key), uploadID, number, body.R, body.Size, minio.PutObjectPartOptions{
		Md5Base64:            base64.StdEncoding.EncodeToString(body.MD5),
		Sha256Hex:            hex.EncodeToString(body.SHA256),
		DisableContentSha256: true,
	})
	if err != nil {
		return "", fmt.Errorf("upload part %d of %s: %w", number, key, mapError(err))
	}
	return p.ETag, nil
}

// CompleteMultipartUpload assembles the parts of an upload.
func (c *Client) CompleteMultipartUpload(ctx context.Context, key, uploadID string, parts []uploader.Part, opts uploader.PutOptions) error {
	cp := make([]minio.CompletePart, len(parts))
	for i, p := range parts {
		cp[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
	}
	var po minio.PutObjectOptions
	if opts.IfNoneMatch {
		po.SetMatchETagExcept("*")
	}
	if _, err := c.core.CompleteMultipartUpload(ctx, c.bucket, c.object(key), uploadID, cp, po); err != nil {
		return fmt.Errorf("complete multipart upload %s: %w", key, mapError(err))
	}
	return nil
}

// AbortMultipartUpload discards an upload.
func (c *Client) AbortMultipartUpload(ctx context.Context, key, uploadID string) error {
	if err := c.core.AbortMultipartUpload(ctx, c.bucket, c.object(key), uploadID); err != nil {
		return fmt.Errorf("abort multipart upload %s: %w", key, mapError(err))
	}
	return nil
}

// mapError turns S3 error codes into the uploader's sentinel errors, keeping
// the original error in the chain.
func mapError(err error) error {
	resp := minio.ToErrorResponse(err)
	var sentinel error
	switch {
	case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
		sentinel = uploader.ErrPreconditionFailed
	case resp.Code == "NoSuchKey" || (resp.StatusCode == http.StatusNotFound && resp.Code != "NoSuchUpload" && resp.Code != "NoSuchBucket"):
		sentinel = uploader.ErrNotFound
	case resp.Code == "NoSuchUpload":
		sentinel = uploader.ErrNoSuchUpload
	case resp.Code == "BadDigest" || resp.Code == "XAmzContentSHA256Mismatch" || resp.Code == "InvalidDigest":
		sentinel = uploader.ErrChecksumMismatch
	}
	if sentinel == nil {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
