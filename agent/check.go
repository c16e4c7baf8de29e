package agent

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lakeside/lakeside/agent/config"
	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/uploader"
	"github.com/lakeside/lakeside/uploader/replica"
)

// Check is the outcome of one of `lakeside check`'s checks.
type Check = source.Check

// minFreeBytes is the free space state_dir needs beyond the replication
// backlog budget: room for the queue and a few flushes of Delta files.
const minFreeBytes = 1 << 30

// replicaCheckTimeout bounds the replica checks, whose client retries.
const replicaCheckTimeout = 15 * time.Second

// CheckPostgres runs the capture preflight: the connection, then the
// server's settings, the role and the tables. An error means a check could
// not be made at all.
func CheckPostgres(ctx context.Context, cfg *config.Config) ([]Check, error) {
	scfg := sourceConfig(cfg, nil)
	conn, err := scfg.Connect(ctx)
	if err != nil {
		return []Check{{Name: "connect to PostgreSQL", Problem: err.Error(),
			Fix: "check source.dsn, that the server runs, and pg_hba.conf"}}, nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	renamed, err := followRenames(ctx, conn, cfg, &scfg)
	if err != nil {
		return nil, err
	}
	checks, err := source.Preflight(ctx, conn, scfg)
	if err != nil {
		return nil, err
	}
	return slices.Concat([]Check{{Name: "connect to PostgreSQL", OK: true}}, renamed, checks), nil
}

// followRenames puts, in place of each configured table that PostgreSQL
// calls by another name now, the name it has: the agent follows a captured
// table by its OID through renames, so the checks look at the table it
// captures. It returns a passed check per such table. When there is no
// state to say which tables are captured (the agent never ran), it
// changes nothing.
func followRenames(ctx context.Context, conn *pgx.Conn, cfg *config.Config, scfg *source.Config) ([]Check, error) {
	st, err := ReadStatus(ctx, cfg)
	if err != nil {
		return nil, nil
	}
	scfg.Tables = slices.Clone(scfg.Tables)
	var out []Check
	for i, t := range scfg.Tables {
		for _, c := range st.Captured {
			if c.Table != t.String() || c.OID == 0 {
				continue
			}
			now, exists, err := source.NameOf(ctx, conn, c.OID)
			if err != nil {
				return nil, fmt.Errorf("check: %w", err)
			}
			if exists && now != t {
				scfg.Tables[i] = now
				out = append(out, Check{Name: fmt.Sprintf("table %s is captured under the name it has now, %s (OID %d; update source.tables at leisure)", t, now, c.OID), OK: true})
			}
		}
	}
	return out, nil
}

// CheckStateDir checks that state_dir is writable and has room: at least
// 1 GiB free beyond replica.max_backlog, the budget of data waiting for the
// replica.
func CheckStateDir(cfg *config.Config) []Check {
	name := "state_dir " + cfg.StateDir + " is writable"
	dir := cfg.StateDir
	for {
		if _, err := os.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			break
		}
		dir = filepath.Dir(dir) // the agent creates state_dir on start
	}
	writable := Check{Name: name, OK: true}
	f, err := os.CreateTemp(dir, ".lakeside-check-*")
	if err != nil {
		writable = Check{Name: name, Problem: err.Error(),
			Fix: fmt.Sprintf("create it for the service's user: install -d -o lakeside -g lakeside -m 0750 %s", cfg.StateDir)}
	} else {
		f.Close()
		os.Remove(f.Name())
	}

	need := int64(minFreeBytes) + cfg.Replica.MaxBacklog
	space := Check{Name: fmt.Sprintf("state_dir has at least %s free", FormatBytes(need))}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		space.Problem = err.Error()
		space.Fix = "check that state_dir is on a mounted file system"
		return []Check{writable, space}
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	space.Name = fmt.Sprintf("state_dir has %s free (needs %s)", FormatBytes(free), FormatBytes(need))
	if free >= need {
		space.OK = true
	} else {
		space.Problem = "too little free space: the queue and the Delta tables waiting for the replica would fill the disk"
		space.Fix = "free space on that file system, move state_dir to a larger one, or lower replica.max_backlog"
	}
	return []Check{writable, space}
}

// CheckReplica checks that the replica is reachable and writable by writing
// a small object under the site's prefix, reading it back and removing it.
// It returns nothing when replication is off.
func CheckReplica(ctx context.Context, cfg *config.Config) []Check {
	if cfg.Replica.URL == "" {
		return nil
	}
	target := cfg.Replica.Target()
	ctx, cancel := context.WithTimeout(ctx, replicaCheckTimeout)
	defer cancel()
	client, err := replica.Open(cfg.Replica, nil)
	if err != nil {
		return []Check{{Name: "replica " + target, Problem: err.Error(), Fix: "correct the replica section"}}
	}
	probe := make([]byte, 32)
	rand.Read(probe)
	key := ".lakeside-check/" + hex.EncodeToString(probe[:8])
	if err := putProbe(ctx, client, key, probe); err != nil {
		return []Check{{Name: "replica " + target + " is reachable and writable", Problem: err.Error(),
			Fix: "check replica.url, replica.endpoint, the network, the bucket and that the credentials may PutObject and GetObject under the prefix"}}
	}
	checks := []Check{{Name: "replica " + target + " is reachable and writable", OK: true}}
	got, err := getProbe(ctx, client, key)
	read := Check{Name: "replica returns what was written", OK: err == nil && bytes.Equal(got, probe)}
	if !read.OK {
		read.Problem = "the object read back differs from the one written"
		if err != nil {
			read.Problem = err.Error()
		}
		read.Fix = "check that the credentials may GetObject under the prefix and that no proxy rewrites objects"
	}
	checks = append(checks, read, checkConditionalPut(ctx, client, key, probe), checkLayout(ctx, cfg))
	deletes := Check{Name: "replica allows deletes (for vacuum)", OK: true}
	if err := client.DeleteObject(ctx, key); err != nil {
		deletes = Check{Name: deletes.Name, Problem: err.Error(),
			Fix: "allow DeleteObject under the prefix, or remove " + key + " by hand"}
	}
	return append(checks, deletes)
}

// checkLayout checks that the replica holds the configured layout, or
// none yet (uploader.LayoutMarker): an agent refuses to write site tables
// where fleet tables are, and the reverse.
func checkLayout(ctx context.Context, cfg *config.Config) Check {
	layout := cfg.Replica.Layout
	if layout == "" {
		layout = uploader.LayoutSite
	}
	c := Check{Name: "replica holds the " + layout + " layout", OK: true}
	root, err := replica.OpenRoot(cfg.Replica, nil)
	if err != nil {
		c.OK, c.Problem, c.Fix = false, err.Error(), "correct the replica section"
		return c
	}
	found, err := uploader.ReadLayout(ctx, root)
	switch {
	case err != nil:
		c.OK, c.Problem, c.Fix = false, err.Error(), "check that the credentials may GetObject at the root of replica.url"
	case found == "":
		c.Name = "replica holds no layout yet (the agent claims the " + layout + " layout at its first upload)"
	case found != layout:
		c.OK = false
		c.Problem = fmt.Sprintf("the replica holds the %s layout, and replica.layout is %s: the agent would replicate nothing", found, layout)
		c.Fix = fmt.Sprintf("set replica.layout: %s, or point replica.url at another place", found)
	}
	return c
}

func putProbe(ctx context.Context, client uploader.ReplicaClient, key string, data []byte) error {
	return putProbeWith(ctx, client, key, data, uploader.PutOptions{})
}

func putProbeWith(ctx context.Context, client uploader.ReplicaClient, key string, data []byte, opts uploader.PutOptions) error {
	m, s := md5.Sum(data), sha256.Sum256(data)
	return client.PutObject(ctx, key, uploader.Body{R: bytes.NewReader(data), Size: int64(len(data)), MD5: m[:], SHA256: s[:]}, opts)
}

// checkConditionalPut checks that the replica refuses a conditional put
// (If-None-Match: *) of key, which exists: a commit is such a put, and a
// server that ignores the condition would let two writers of one table
// (two agents given one site, say) overwrite each other's commit with no
// error.
func checkConditionalPut(ctx context.Context, client uploader.ReplicaClient, key string, data []byte) Check {
	c := Check{Name: "replica refuses to overwrite a commit (a conditional put of an existing key)", OK: true}
	switch err := putProbeWith(ctx, client, key, data, uploader.PutOptions{IfNoneMatch: true}); {
	case errors.Is(err, uploader.ErrPreconditionFailed):
	case err == nil:
		c.OK, c.Problem = false, "the replica stored a conditional put (If-None-Match: *) over an existing object"
		c.Fix = "use an S3 server that honours If-None-Match on PUT (AWS S3, MinIO, versitygw); with this one two writers can overwrite each other's commits"
	default:
		c.OK, c.Problem = false, err.Error()
		c.Fix = "use an S3 server that honours If-None-Match on PUT (AWS S3, MinIO, versitygw)"
	}
	return c
}

func getProbe(ctx context.Context, client uploader.ReplicaClient, key string) ([]byte, error) {
	r, err := client.GetObject(ctx, key)
	if errors.Is(err, uploader.ErrNotFound) {
		return nil, errors.New("the object just written is not there")
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
