// Package file is the uploader backend for a directory, such as a mounted
// network share. Objects are files under the root; a put writes a temporary
// file in the destination directory, verifies its SHA-256 against the one
// given, fsyncs it, and then publishes it with a hard link (which fails when
// the name exists, emulating If-None-Match: *) or a rename, and fsyncs the
// directory.
package file

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lakeside/lakeside/uploader"
)

// Client stores objects as files under a root directory. It implements
// uploader.ReplicaClient.
type Client struct {
	root string
}

// New returns a client rooted at dir, which is created when missing.
func New(dir string) (*Client, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("file replica: %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("file replica: %w", err)
	}
	return &Client{root: dir}, nil
}

// Type returns "file".
func (c *Client) Type() string { return "file" }

// Root returns the root directory.
func (c *Client) Root() string { return c.root }

// localPath maps a key to a path under the root, refusing keys that would
// escape it.
func (c *Client) localPath(key string) (string, error) {
	clean := path.Clean("/" + key)
	if key == "" || strings.HasSuffix(key, "/") || clean != "/"+key {
		return "", fmt.Errorf("file replica: invalid key %q", key)
	}
	return filepath.Join(c.root, filepath.FromSlash(key)), nil
}

// PutObject writes body to key; see the package documentation.
func (c *Client) PutObject(ctx context.Context, key string, body uploader.Body, opts uploader.PutOptions) error {
	dst, err := c.localPath(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("file replica: %w", err)
	}
	if opts.IfNoneMatch {
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("put %s: %w", key, uploader.ErrPreconditionFailed)
		}
	}
	tmp, err := createTemp(dir, filepath.Base(dst))
	if err != nil {
		return fmt.Errorf("file replica: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), contextReader{ctx, body.R})
	if err == nil && n != body.Size {
		err = fmt.Errorf("wrote %d bytes, want %d", n, body.Size)
	}
	if err == nil && body.SHA256 != nil && !bytes.Equal(h.Sum(nil), body.SHA256) {
		err = fmt.Errorf("%w: sha256 %s", uploader.ErrChecksumMismatch, hex.EncodeToString(h.Sum(nil)))
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if opts.IfNoneMatch {
		if err := os.Link(tmp.Name(), dst); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("put %s: %w", key, uploader.ErrPreconditionFailed)
			}
			return fmt.Errorf("put %s: %w", key, err)
		}
	} else if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// GetObject opens the file of key.
func (c *Client) GetObject(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := c.localPath(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, uploader.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return f, nil
}

// DeleteObject removes the file of key; a missing file is not an error.
func (c *Client) DeleteObject(ctx context.Context, key string) error {
	p, err := c.localPath(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// createTemp creates a hidden temporary file next to the destination.
func createTemp(dir, base string) (*os.File, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(b[:])), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// contextReader stops reading once ctx is done.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (r contextReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
