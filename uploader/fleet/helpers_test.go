package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/internal/s3test"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/file"
	"github.com/lakeside/lakeside/uploader/fleet"
	"github.com/lakeside/lakeside/uploader/s3"
)

// eachStore runs fn against a directory and against a real S3 server.
func eachStore(t *testing.T, fn func(t *testing.T, newStore func(t *testing.T) fleet.Store)) {
	eachClient(t, func(t *testing.T, newClient func(t *testing.T) uploader.ReplicaClient) {
		fn(t, func(t *testing.T) fleet.Store { return uploader.FleetStore(newClient(t)) })
	})
}

// eachClient runs fn against a directory and against a real S3 server,
// given as the replica client a fleet.Store adapts, for tests that reach
// around the store (to delete what log expiry would).
func eachClient(t *testing.T, fn func(t *testing.T, newClient func(t *testing.T) uploader.ReplicaClient)) {
	t.Run("file", func(t *testing.T) {
		fn(t, func(t *testing.T) uploader.ReplicaClient {
			c, err := file.New(filepath.Join(t.TempDir(), "fleet"))
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		fn(t, func(t *testing.T) uploader.ReplicaClient {
			c, err := s3.New(s3.Config{Endpoint: srv.Endpoint(), Region: s3test.Region, AccessKeyID: s3test.AccessKey,
				SecretAccessKey: s3test.SecretKey, Bucket: srv.NewBucket(), Prefix: "fleet",
				Retry: s3.RetryPolicy{MaxRetries: 2, MinWait: 10e6, MaxWait: 50e6}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		})
	})
}

// fleetSchema returns the protocol and metaData of a fleet table of the
// columns _site, id and v, with column mapping.
func fleetSchema(t *testing.T) (*delta.Protocol, *delta.Metadata) {
	t.Helper()
	st := delta.NewStructType(delta.NewField(fleet.SiteColumn, delta.TypeString, true),
		delta.NewField("id", delta.TypeLong, true), delta.NewField("v", delta.TypeString, true))
	md, err := delta.NewMetadata(st, []string{fleet.SiteColumn}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	proto, md, err := delta.EnableColumnMapping(delta.DefaultProtocol(), md)
	if err != nil {
		t.Fatal(err)
	}
	return proto, md
}

// addColumn returns a schema change that adds the column name, or nothing
// when the table has it.
func addColumn(name string) func(*delta.Metadata, *delta.Protocol) (*delta.Metadata, *delta.Protocol, error) {
	return func(md *delta.Metadata, p *delta.Protocol) (*delta.Metadata, *delta.Protocol, error) {
		st, err := md.Schema()
		if err != nil {
			return nil, nil, err
		}
		if f, _ := st.Field(name); f != nil {
			return nil, nil, nil
		}
		st = delta.NewStructType(append(append([]*delta.StructField(nil), st.Fields...), delta.NewField(name, delta.TypeLong, true))...)
		st, _, err = delta.AssignColumnIDs(st, md.MaxColumnID())
		if err != nil {
			return nil, nil, err
		}
		next, err := md.WithSchema(st)
		return next, p, err
	}
}

// faultyStore fails some puts of one site: before the put (nothing lands)
// or after it (it lands, but the site does not hear so).
type faultyStore struct {
	fleet.Store
	mu     sync.Mutex
	puts   int
	before func(n int) bool
	after  func(n int) bool
}

var errInjected = errors.New("injected: connection reset")

func (s *faultyStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	s.mu.Lock()
	s.puts++
	n := s.puts
	s.mu.Unlock()
	if s.before != nil && s.before(n) {
		return fmt.Errorf("put %s: %w", key, errInjected)
	}
	err := s.Store.PutIfAbsent(ctx, key, data)
	if err == nil && s.after != nil && s.after(n) {
		return fmt.Errorf("put %s: %w", key, errInjected)
	}
	return err
}

// time0 stamps commits the test copies out of a store.
var time0 = time.Unix(1_700_000_000, 0)

func ptr[T any](v T) *T { return &v }

func mapsEqual(a, b map[string]bool) bool { return maps.Equal(a, b) }
