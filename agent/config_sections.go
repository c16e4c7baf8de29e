package agent

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lakeside/lakeside/agent/internal/live"
)

// HTTPOff is the http.listen value that disables the HTTP server.
const HTTPOff = "off"

// duration expands and parses a duration key; it must be positive.
func (p *configParser) duration(path string, s *string, def time.Duration) (time.Duration, error) {
	text, err := p.optional(path, s, def.String())
	if err != nil {
		return 0, err
	}
	d, perr := time.ParseDuration(text)
	if perr != nil {
		return 0, p.pathErrorf(path, "%q is not a duration (write it like 10s, 500ms or 1m)", text)
	}
	if d <= 0 {
		return 0, p.pathErrorf(path, "%q must be greater than zero", text)
	}
	return d, nil
}

// count expands and parses a positive integer key.
func (p *configParser) count(path string, s *string, def int64) (int64, error) {
	text, err := p.optional(path, s, strconv.FormatInt(def, 10))
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseInt(text, 10, 64)
	if perr != nil || n <= 0 {
		return 0, p.pathErrorf(path, "%q is not a positive whole number", text)
	}
	return n, nil
}

// boolean expands and parses a true/false key.
func (p *configParser) boolean(path string, s *string, def bool) (bool, error) {
	text, err := p.optional(path, s, strconv.FormatBool(def))
	if err != nil {
		return false, err
	}
	b, perr := strconv.ParseBool(text)
	if perr != nil {
		return false, p.pathErrorf(path, "%q is not true or false", text)
	}
	return b, nil
}

// sizeUnits are the suffixes a byte size may have.
var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"B", 1},
}

// size expands and parses a byte size such as 512MiB, 10GB or 1048576;
// zero (or absent) means no limit.
func (p *configParser) size(path string, s *string) (int64, error) {
	text, err := p.optional(path, s, "0")
	if err != nil {
		return 0, err
	}
	n, ok := parseSize(text)
	if !ok {
		return 0, p.pathErrorf(path, "%q is not a size (write it like 512MiB, 10GB or a number of bytes; 0 means no limit)", text)
	}
	return n, nil
}

// parseSize parses a byte size such as 512MiB, 10GB or 1048576.
func parseSize(text string) (int64, bool) {
	num, factor := strings.TrimSpace(text), int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, factor = strings.TrimSpace(rest), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || (factor > 1 && n > (1<<62)/factor) {
		return 0, false
	}
	return n * factor, true
}

// decodingWorkMem expands and parses source.logical_decoding_work_mem: a
// size PostgreSQL accepts for logical_decoding_work_mem, or ServerDecodingWorkMem
// (zero).
func (p *configParser) decodingWorkMem(s *string) (int64, error) {
	const path = "source.logical_decoding_work_mem"
	text, err := p.optional(path, s, strconv.Itoa(DefaultLogicalDecodingWorkMem))
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(text) == ServerDecodingWorkMem {
		return 0, nil
	}
	n, ok := parseSize(text)
	if !ok {
		return 0, p.pathErrorf(path, "%q is not a size (write it like 1MiB or 512KiB, or %q to keep the server's setting)", text, ServerDecodingWorkMem)
	}
	if n < minLogicalDecodingWorkMem || n > maxLogicalDecodingWorkMem {
		return 0, p.pathErrorf(path, "%q is out of range (PostgreSQL accepts 64KiB to 2147483647KiB; or write %q to keep the server's setting)", text, ServerDecodingWorkMem)
	}
	return n, nil
}

func (p *configParser) buildDelta(c *Config, raw *rawDelta) error {
	dir, err := p.optional("delta.tables_dir", raw.TablesDir, filepath.Join(c.StateDir, "tables"))
	if err != nil {
		return err
	}
	if dir == "" {
		return p.pathErrorf("delta.tables_dir", "must not be empty (remove the key to use <state_dir>/tables)")
	}
	c.Delta.TablesDir = filepath.Clean(dir)
	if c.Delta.FlushInterval, err = p.duration("delta.flush_interval", raw.FlushInterval, DefaultFlushInterval); err != nil {
		return err
	}
	n, err := p.count("delta.flush_changes", raw.FlushChanges, DefaultFlushChanges)
	if err != nil {
		return err
	}
	c.Delta.FlushChanges = int(n)
	if c.Delta.SoftDelete, err = p.boolean("delta.soft_delete", raw.SoftDelete, false); err != nil {
		return err
	}
	if c.Delta.TargetFileRows, err = p.count("delta.target_file_rows", raw.TargetFileRows, DefaultTargetFileRows); err != nil {
		return err
	}
	if c.Delta.RowGroupRows, err = p.count("delta.row_group_rows", raw.RowGroupRows, DefaultRowGroupRows); err != nil {
		return err
	}
	if c.Delta.VacuumRetention, err = p.duration("delta.vacuum_retention", raw.VacuumRetention, DefaultVacuumRetention); err != nil {
		return err
	}
	if c.Delta.VacuumRetention < minVacuumRetention {
		return p.pathErrorf("delta.vacuum_retention", "%s is shorter than %s: readers and time travel need the files of recent versions", c.Delta.VacuumRetention, minVacuumRetention)
	}
	c.Delta.VacuumInterval, err = p.duration("delta.vacuum_interval", raw.VacuumInterval, DefaultVacuumInterval)
	return err
}

// minVacuumRetention is the shortest delta.vacuum_retention accepted.
const minVacuumRetention = time.Hour

func (p *configParser) buildReplica(c *Config, raw *rawReplica) error {
	r := &c.Replica
	var err error
	for _, f := range []struct {
		path string
		raw  *string
		dst  *string
	}{
		{"replica.url", raw.URL, &r.URL},
		{"replica.site", raw.Site, &r.Site},
		{"replica.endpoint", raw.Endpoint, &r.Endpoint},
		{"replica.region", raw.Region, &r.Region},
		{"replica.access_key_id", raw.AccessKeyID, &r.AccessKeyID},
		{"replica.secret_access_key", raw.SecretAccessKey, &r.SecretAccessKey},
	} {
		if *f.dst, err = p.optional(f.path, f.raw, ""); err != nil {
			return err
		}
	}
	if r.URL == "" {
		if raw.Site != nil || raw.Endpoint != nil || raw.MaxBacklog != nil {
			return p.pathErrorf("replica.url", "is required when the replica section is used (s3://bucket/prefix or file:///path)")
		}
		return nil
	}
	if r.MaxBacklog, err = p.size("replica.max_backlog", raw.MaxBacklog); err != nil {
		return err
	}
	if r.MaxBytesPerSecond, err = p.size("replica.max_bytes_per_second", raw.MaxBytesPerSecond); err != nil {
		return err
	}
	if r.PollInterval, err = p.duration("replica.poll_interval", raw.PollInterval, 10*time.Second); err != nil {
		return err
	}
	if r.MaxBackoff, err = p.duration("replica.max_backoff", raw.MaxBackoff, time.Minute); err != nil {
		return err
	}
	n, err := p.count("replica.concurrency", raw.Concurrency, 4)
	if err != nil {
		return err
	}
	r.Concurrency = int(n)
	if verr := r.Validate(); verr != nil {
		path := "replica.url"
		if strings.Contains(verr.Error(), "site") {
			path = "replica.site"
		}
		return p.pathErrorf(path, "%v", verr)
	}
	return nil
}

func (p *configParser) buildHTTP(c *Config, raw *rawHTTP) error {
	var err error
	if c.HTTP.Listen, err = p.optional("http.listen", raw.Listen, DefaultHTTPListen); err != nil {
		return err
	}
	if c.HTTP.Token, err = p.optional("http.token", raw.Token, ""); err != nil {
		return err
	}
	n, err := p.count("http.max_clients", raw.MaxClients, DefaultMaxClients)
	if err != nil {
		return err
	}
	c.HTTP.MaxClients = int(n)
	if c.HTTP.Listen == HTTPOff {
		return nil
	}
	if cerr := live.CheckListen(live.Config{Listen: c.HTTP.Listen, Token: c.HTTP.Token}); cerr != nil {
		if errors.Is(cerr, live.ErrTokenRequired) {
			return p.pathErrorf("http.listen", "%q is reachable from the network, so http.token is required (set a long random token, or listen on 127.0.0.1)", c.HTTP.Listen)
		}
		return p.pathErrorf("http.listen", "%q is not a host:port address (e.g. 127.0.0.1:8080, or off)", c.HTTP.Listen)
	}
	return nil
}
