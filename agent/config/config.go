// Package config is the agent's configuration: the types that are the
// schema of lakeside.yaml (Config and its sections), their defaults, the
// YAML decoder that reads a file against them and reports every problem
// at its line, their validation, the reading of the file (Load, Parse) and
// the keys that differ between two configurations (Diff), which a reload
// reports. Package agent wires the stages from a Config; this package
// knows nothing of a running agent.
package config

import (
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
)

// DefaultPath is where the packaged agent reads its configuration.
const DefaultPath = "/etc/lakeside/lakeside.yaml"

// Default values applied by Parse when a key is absent or null.
const (
	DefaultSlot           = "lakeside"
	DefaultPublication    = "lakeside"
	DefaultSnapshot       = SnapshotInitial
	DefaultStatusInterval = 10 * time.Second
	// DefaultBackfillChunkRows is source.backfill_chunk_rows's default.
	DefaultBackfillChunkRows = source.DefaultBackfillChunkRows
	DefaultLogLevel          = "info"
	DefaultLogFormat         = "text"
	DefaultFlushInterval     = time.Second
	DefaultFlushChanges      = 100000
	DefaultTargetFileRows    = 100000
	DefaultRowGroupRows      = delta.DefaultRowGroupRows
	// DefaultVacuumRetention is Delta's default
	// delta.deletedFileRetentionDuration: seven days of time travel.
	DefaultVacuumRetention = 7 * 24 * time.Hour
	DefaultVacuumInterval  = 24 * time.Hour
	// DefaultTargetFileSize is the size of the files compaction writes.
	DefaultTargetFileSize        = 128 << 20
	DefaultCompactInterval       = 10 * time.Minute
	DefaultCompactMinFiles       = 32
	DefaultCompactBytesPerSecond = 64 << 20
	DefaultHTTPListen            = "127.0.0.1:8080"
	DefaultMaxClients            = 64
)

// Snapshot modes accepted in source.snapshot.
const (
	// SnapshotInitial copies the existing rows of every table when the
	// replication slot is created, before streaming changes, and of a
	// table configured later while changes stream (a backfill).
	SnapshotInitial = "initial"
	// SnapshotNever streams changes only, without copying existing rows.
	SnapshotNever = "never"
)

// maxStatusInterval is the largest accepted source.status_interval.
const maxStatusInterval = time.Hour

// Values of source.logical_decoding_work_mem.
const (
	// DefaultLogicalDecodingWorkMem is the default, in bytes.
	DefaultLogicalDecodingWorkMem = 1 << 20
	// ServerDecodingWorkMem keeps the server's setting.
	ServerDecodingWorkMem = "server"
	// The range PostgreSQL accepts: 64kB up to INT_MAX kilobytes.
	minLogicalDecodingWorkMem = 64 << 10
	maxLogicalDecodingWorkMem = math.MaxInt32 << 10
)

// maxIdentifierBytes is PostgreSQL's identifier length limit (NAMEDATALEN-1).
const maxIdentifierBytes = 63

// Config is the agent's configuration, read from /etc/lakeside/lakeside.yaml.
//
// It is produced by Load or Parse, which reject unknown keys, expand ${VAR}
// references from the environment, apply defaults and validate every
// field, so a *Config obtained from them is ready to use.
//
// Config and its section types are the schema of the file: a field's yaml
// tag is the one place its key is spelled in Go. Parse derives from the
// tags the keys each section allows, the key path of every error and how
// each value is parsed (from the field's Go type, or from its config tag
// for a syntax the type does not imply), and packaging/lakeside.yaml
// documents exactly these keys.
type Config struct {
	Source   Source `yaml:"source"`
	StateDir string `yaml:"state_dir"`
	Delta    Delta  `yaml:"delta"`
	// Replica is the remote copy of the Delta tables; replication is off
	// when Replica.URL is empty.
	Replica uploader.Config `yaml:"replica"`
	HTTP    HTTP            `yaml:"http"`
	Log     Log             `yaml:"log"`
}

// Delta is the delta section: the local Delta tables.
type Delta struct {
	// TablesDir holds the tables, <state_dir>/tables by default.
	TablesDir string `yaml:"tables_dir"`
	// FlushInterval is the longest a committed change waits before it is
	// in the Delta tables, 1s by default.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// FlushChanges applies at once when that many changes wait (100000).
	FlushChanges int `yaml:"flush_changes"`
	// SoftDelete keeps deleted rows in the mirror with _deleted = true.
	SoftDelete bool `yaml:"soft_delete"`
	// ChangeDataFeed has every mirror publish its row changes as Delta's
	// change data feed (delta.enableChangeDataFeed, change data files
	// under _change_data/); off by default.
	ChangeDataFeed bool `yaml:"change_data_feed"`
	// DeletionVectors merges the mirrors with deletion vectors (true by
	// default): a flush marks the old versions of the rows it changes as
	// deleted and writes only the new ones, rather than rewrite the files
	// they are in. Readers of the tables must read deletion vectors.
	DeletionVectors bool `yaml:"deletion_vectors"`
	// TargetFileRows is the number of rows per mirror data file (100000).
	TargetFileRows int64 `yaml:"target_file_rows"`
	// RowGroupRows is the most rows a Parquet row group of a data file
	// holds (32768).
	RowGroupRows int64 `yaml:"row_group_rows"`
	// VacuumRetention is how far back time travel keeps working: vacuum
	// deletes a data file only once no version newer than that needs it
	// (168h by default, at least 1h).
	VacuumRetention time.Duration `yaml:"vacuum_retention"`
	// VacuumInterval is how often the agent vacuums its tables (24h).
	VacuumInterval time.Duration `yaml:"vacuum_interval"`
	// LocalRetention, when set, bounds the local disk: after each vacuum
	// the data files on the replica that neither the applier nor local
	// time travel inside it reads are deleted locally, while the log and
	// the replica keep them. Unset keeps every file vacuum keeps. It needs
	// a replica.
	LocalRetention time.Duration `yaml:"local_retention"`
	// Compaction merges the tables' small data files in the background
	// (true by default); the mirror then writes its inserts above every
	// key into new files rather than rewrite its last file.
	Compaction bool `yaml:"compaction"`
	// TargetFileSize is the size of the files compaction writes (128MiB).
	TargetFileSize int64 `yaml:"target_file_size" config:"size"`
	// CompactInterval is how often every table is looked at (10m).
	CompactInterval time.Duration `yaml:"compact_interval"`
	// CompactMinFiles is the small-file threshold: a table is compacted
	// once its small files that can be merged are that many, and looked
	// at once the applier added that many files to it (32).
	CompactMinFiles int `yaml:"compact_min_files"`
	// CompactBytesPerSecond bounds the disk bandwidth of compaction,
	// bytes read and written (64MiB; 0 means no limit).
	CompactBytesPerSecond int64 `yaml:"compact_bytes_per_second" config:"size"`
}

// HTTP is the http section: the live view's HTTP server.
type HTTP struct {
	// Listen is the address, 127.0.0.1:8080 by default; "off" disables
	// the server.
	Listen string `yaml:"listen"`
	// Token is required by every API request when set, and must be set
	// when Listen is not a loopback address.
	Token string `yaml:"token" reload:"live"`
	// MaxClients caps the live stream's clients (64).
	MaxClients int `yaml:"max_clients"`
	// AllowedHosts are the host names and addresses, beside the loopback
	// ones, that browsers may open the page with: without a token the
	// server answers no other Host, and pages from no other origin may
	// call the API.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// MaxConnections caps the open HTTP connections. Unset, it is a
	// quarter of the descriptor limit, at most 1024.
	MaxConnections int `yaml:"max_connections"`
}

// Source is the source section: the PostgreSQL database to replicate from.
type Source struct {
	// DSN is the connection string (a postgres:// URL or key=value pairs).
	// It is required and parses with pgconn.ParseConfig. It may hold a
	// password, so it must never be logged or echoed in errors.
	DSN string `yaml:"dsn"`
	// Slot is the logical replication slot name, "lakeside" by default.
	Slot string `yaml:"slot"`
	// Publication is the publication name, "lakeside" by default.
	Publication string `yaml:"publication"`
	// Tables lists the replicated tables; there is at least one and no
	// table appears twice.
	Tables []TableName `yaml:"tables"`
	// Snapshot is SnapshotInitial (the default) or SnapshotNever.
	Snapshot string `yaml:"snapshot"`
	// StatusInterval is how often a standby status update is sent,
	// 10s by default, greater than zero and at most one hour.
	StatusInterval time.Duration `yaml:"status_interval"`
	// LogicalDecodingWorkMem sets logical_decoding_work_mem for the
	// replication session, in bytes: 1MiB by default, so that PostgreSQL
	// streams a large transaction while it runs instead of holding up to
	// its default 64MB back until the commit. Zero ("server" in the file)
	// leaves the server's setting.
	LogicalDecodingWorkMem int64 `yaml:"logical_decoding_work_mem" config:"decoding_work_mem"`
	// BackfillChunkRows is the number of rows a backfill (the copy of a
	// table configured after the first start, or resynced) reads and
	// queues at a time, 16384 by default, at most MaxBackfillChunkRows:
	// at most that many rows are held in memory, fewer when they are wide
	// (a chunk holds about 16 MiB of rows).
	BackfillChunkRows int `yaml:"backfill_chunk_rows"`
	// BackfillRowsPerSecond bounds the rows a backfill copies per
	// second; zero (the default) is no bound.
	BackfillRowsPerSecond int `yaml:"backfill_rows_per_second" config:"limit"`
	// MaxValueSize is the largest value the agent stores, in bytes of
	// the text PostgreSQL sends (DefaultMaxValueSize; zero keeps every
	// value, up to PostgreSQL's 1 GB). A larger value is stored as null
	// and listed in the changelog's _replaced, so that one value cannot
	// take more memory than the agent has.
	MaxValueSize int64 `yaml:"max_value_size" config:"size"`
}

// Values of source.max_value_size.
const (
	// DefaultMaxValueSize is the default.
	DefaultMaxValueSize = source.DefaultMaxValueBytes
	// minMaxValueSize is the smallest accepted, so that a size written
	// without its unit is not taken for a few bytes.
	minMaxValueSize = 1 << 20
)

// MaxBackfillChunkRows is the largest source.backfill_chunk_rows.
const MaxBackfillChunkRows = 1_000_000

// Log is the log section: the agent's structured logs.
type Log struct {
	// Level is one of debug, info (the default), warn and error.
	Level string `yaml:"level" reload:"live"`
	// Format is text (the default) or json.
	Format string `yaml:"format"`
}

// TableName is a source table as schema and name (taken literally,
// case-sensitive, as in pg_class).
type TableName = source.Table

// ParseTableName parses "schema.table" into a TableName. The text must
// contain exactly one '.' with a non-empty part on each side; the parts are
// taken literally (no quoting, no case folding). Parts containing a NUL byte
// or longer than 63 bytes, which cannot name a PostgreSQL table, are refused
// too.
func ParseTableName(s string) (TableName, error) {
	schema, name, ok := strings.Cut(s, ".")
	// Only the values of the messages are cut: the checks see all of s.
	q := cutValue(s)
	switch {
	case !ok:
		return TableName{}, fmt.Errorf("table name %q: missing schema (write it as schema.table, e.g. public.%s)", q, q)
	case strings.Contains(name, "."):
		return TableName{}, fmt.Errorf("table name %q: more than one \".\" (write it as schema.table; names containing a dot are not supported)", q)
	case schema == "":
		return TableName{}, fmt.Errorf("table name %q: empty schema (write it as schema.table, e.g. public%s)", q, q)
	case name == "":
		return TableName{}, fmt.Errorf("table name %q: empty table name (write it as schema.table)", q)
	case strings.ContainsRune(s, 0):
		return TableName{}, fmt.Errorf("table name %q: contains a NUL byte", q)
	case len(schema) > maxIdentifierBytes || len(name) > maxIdentifierBytes:
		return TableName{}, fmt.Errorf("table name %q: schema and table must each be at most %d bytes", q, maxIdentifierBytes)
	}
	return TableName{Schema: schema, Name: name}, nil
}

// SlogLevel returns the slog level named by Log.Level; an empty or unknown
// level maps to slog.LevelInfo.
func (c *Config) SlogLevel() slog.Level {
	switch c.Log.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// Load reads the YAML file at path and parses it with Parse, using path as
// the name in error messages. The file must be a regular file of at most
// MaxFileBytes (see ReadSmallFile).
func Load(path string) (*Config, error) {
	data, _, err := ReadSmallFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses, expands and validates a YAML configuration. The name
// (usually the file name) prefixes error messages.
//
// Parsing is strict: unknown keys and values of the wrong type are errors.
// In every string value, ${NAME} is replaced by the environment variable
// NAME (letters, digits and underscores, not starting with a digit); an
// unset variable is an error, a variable set to the empty string expands to
// the empty string, and the expanded text is not expanded again. "$${"
// writes a literal "${"; any other '$' is kept as is. Expansion works on
// each scalar value after YAML parsing, so it can never change the
// structure of the document, and it does not apply to keys.
//
// Absent or null keys get their defaults; a key written with an empty
// value is validated as the empty string.
//
// Every error is a single line of the form
// "<name>:<line>: <key path>: <problem and fix>". Only the first problem
// found is reported: the keys are read in the order of the file (unknown
// keys, keys set twice, values of the wrong kind or syntax), then the
// sections are checked in the order of Config's fields.
func Parse(name string, data []byte) (*Config, error) {
	c := defaultConfig()
	p := newConfigParser(name, &c)
	required := p.path(&c.Source.DSN) + ", " + p.path(&c.Source.Tables) + " and " + p.path(&c.StateDir)
	root, err := p.parseDocument(data, required)
	if err != nil {
		return nil, err
	}
	if err := p.decodeSection(reflect.ValueOf(&c).Elem(), root, nil); err != nil {
		return nil, err
	}
	if err := c.validate(p); err != nil {
		return nil, err
	}
	return &c, nil
}

// defaultConfig returns the configuration of a file that sets no key: the
// defaults that Parse decodes the file over. Keys without a default here
// are required, get a default that depends on another key (see the
// validate methods), or are zero.
func defaultConfig() Config {
	return Config{
		Source: Source{
			Slot:                   DefaultSlot,
			Publication:            DefaultPublication,
			Snapshot:               DefaultSnapshot,
			StatusInterval:         DefaultStatusInterval,
			LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
			BackfillChunkRows:      DefaultBackfillChunkRows,
			MaxValueSize:           DefaultMaxValueSize,
		},
		Delta: Delta{
			DeletionVectors: true,
			FlushInterval:   DefaultFlushInterval,
			FlushChanges:    DefaultFlushChanges,
			TargetFileRows:  DefaultTargetFileRows,
			RowGroupRows:    DefaultRowGroupRows,
			VacuumRetention: DefaultVacuumRetention,
			VacuumInterval:  DefaultVacuumInterval,

			Compaction:            true,
			TargetFileSize:        DefaultTargetFileSize,
			CompactInterval:       DefaultCompactInterval,
			CompactMinFiles:       DefaultCompactMinFiles,
			CompactBytesPerSecond: DefaultCompactBytesPerSecond,
		},
		HTTP: HTTP{Listen: DefaultHTTPListen, MaxClients: DefaultMaxClients},
		Log:  Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
	}
}

// validate checks the decoded configuration section by section, in the
// order of the file's documentation, fills the defaults that depend on
// other keys, and returns the first problem found.
func (c *Config) validate(p *configParser) error {
	if err := c.Source.validate(p); err != nil {
		return err
	}
	if c.StateDir == "" {
		return p.fieldErrorf(&c.StateDir, "a directory is required for the queue and the local tables (e.g. /var/lib/lakeside)")
	}
	c.StateDir = filepath.Clean(c.StateDir)
	if err := c.Delta.validate(p, &c.StateDir); err != nil {
		return err
	}
	if err := validateReplica(p, &c.Replica); err != nil {
		return err
	}
	if c.Delta.LocalRetention > 0 && c.Replica.URL == "" {
		return p.fieldErrorf(&c.Delta.LocalRetention, "needs a replica (set %s): the local files it deletes are kept only there", p.path(&c.Replica.URL))
	}
	if c.Delta.LocalRetention > 0 && c.Replica.Fleet() {
		return p.fieldErrorf(&c.Delta.LocalRetention, "needs %s: site: a fleet table holds the site's files translated to its own columns, which the agent cannot read back in place of its own", p.path(&c.Replica.Layout))
	}
	if err := c.HTTP.validate(p); err != nil {
		return err
	}
	return c.Log.validate(p)
}

// validate checks the source section.
func (s *Source) validate(p *configParser) error {
	if s.DSN == "" {
		return p.fieldErrorf(&s.DSN, "a connection string is required (e.g. postgres://lakeside@db.example/shop or \"host=db.example dbname=shop user=lakeside\")")
	}
	if _, perr := pgconn.ParseConfig(s.DSN); perr != nil {
		return p.fieldErrorf(&s.DSN, "invalid connection string: %s (use a postgres:// URL or key=value pairs)", dsnErrorReason(s.DSN, perr))
	}

	if !isSlotName(s.Slot) {
		return p.fieldErrorf(&s.Slot, "%q is not a valid replication slot name (use 1 to %d lowercase letters, digits and underscores, e.g. %q)", cutValue(s.Slot), maxIdentifierBytes, DefaultSlot)
	}

	switch pub := s.Publication; {
	case pub == "":
		return p.fieldErrorf(&s.Publication, "must not be empty (remove the key to use %q)", DefaultPublication)
	case len(pub) > maxIdentifierBytes:
		return p.fieldErrorf(&s.Publication, "%q is longer than %d bytes (use a shorter name)", cutValue(pub), maxIdentifierBytes)
	case strings.ContainsRune(pub, 0):
		return p.fieldErrorf(&s.Publication, "%q contains a NUL byte (remove it)", cutValue(pub))
	}

	if len(s.Tables) == 0 {
		return p.fieldErrorf(&s.Tables, "at least one table is required (list them as schema.table)")
	}
	items := p.field(&s.Tables).items
	seen := make(map[TableName]int, len(s.Tables))
	for i, t := range s.Tables {
		if j, dup := seen[t]; dup {
			return p.errorf(items[i].Line, p.path(&s.Tables)+"["+strconv.Itoa(i)+"]",
				"table %q is listed twice (also at line %d); remove one", t.String(), items[j].Line)
		}
		seen[t] = i
	}

	if s.Snapshot != SnapshotInitial && s.Snapshot != SnapshotNever {
		return p.fieldErrorf(&s.Snapshot, "%q is not a snapshot mode (use %q to copy the existing rows first, or %q)", cutValue(s.Snapshot), SnapshotInitial, SnapshotNever)
	}

	if s.StatusInterval > maxStatusInterval {
		return p.fieldErrorf(&s.StatusInterval, "%q is out of range (it must be greater than 0 and at most 1h)", cutValue(p.field(&s.StatusInterval).text))
	}
	if s.BackfillChunkRows > MaxBackfillChunkRows {
		return p.fieldErrorf(&s.BackfillChunkRows, "%q is out of range (a chunk's rows are held in memory: at most %d)", cutValue(p.field(&s.BackfillChunkRows).text), MaxBackfillChunkRows)
	}
	if s.MaxValueSize != 0 && s.MaxValueSize < minMaxValueSize {
		return p.fieldErrorf(&s.MaxValueSize, "%d bytes is smaller than 1MiB (write it like 256MiB; 0 keeps every value)", s.MaxValueSize)
	}
	return nil
}

// validate checks the log section.
func (l *Log) validate(p *configParser) error {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		return p.fieldErrorf(&l.Level, "%q is not a log level (use debug, info, warn or error)", cutValue(l.Level))
	}
	if l.Format != "text" && l.Format != "json" {
		return p.fieldErrorf(&l.Format, "%q is not a log format (use text or json)", cutValue(l.Format))
	}
	return nil
}

// isSlotName reports whether s is a valid PostgreSQL replication slot
// name: 1 to 63 characters among lowercase letters, digits and underscores.
func isSlotName(s string) bool {
	if s == "" || len(s) > maxIdentifierBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// dsnErrorReason returns why pgconn could not parse dsn, without the
// connection string itself. pgconn quotes the connection string with a
// best-effort password mask; that part is dropped, and if what remains
// still contains something that looks like the password, the reason is
// withheld altogether. The pgconn error is deliberately not wrapped, since
// its text would reveal the connection string.
func dsnErrorReason(dsn string, err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "cannot parse `"); ok {
		// The real separator follows the quoted string, so the last one
		// is never inside it.
		if i := strings.LastIndex(rest, "`: "); i >= 0 {
			msg = rest[i+len("`: "):]
		} else {
			msg = "unparsable connection string"
		}
	}
	if strings.Contains(msg, dsn) {
		return "the connection string could not be parsed (details withheld because they would reveal it)"
	}
	for _, secret := range dsnSecrets(dsn) {
		if strings.Contains(msg, secret) {
			return "the connection string could not be parsed (details withheld because they would reveal the password)"
		}
	}
	return msg
}

// dsnSecrets returns the strings of dsn that may be a password: the
// userinfo password of a URL, password and sslpassword values (quoted or
// not, raw and percent-decoded), and their fragments of four bytes or
// more, since a malformed string can be split at unexpected places.
func dsnSecrets(dsn string) []string {
	var cands []string
	for _, scheme := range []string{"postgres://", "postgresql://"} {
		rest, ok := strings.CutPrefix(dsn, scheme)
		if !ok {
			continue
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				cands = append(cands, pw)
			}
		}
	}
	re := regexp.MustCompile(`(?i)password\s*=\s*('(?:\\.|[^'\\])*'?|[^\s&]*)`)
	for _, m := range re.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		cands = append(cands, v, strings.Trim(v, "'"))
	}
	var out []string
	add := func(s string, minLen int) {
		if len(s) >= minLen {
			out = append(out, s)
		}
	}
	for _, c := range cands {
		add(c, 1)
		if d, err := url.PathUnescape(c); err == nil {
			add(d, 1)
		}
		if d, err := url.QueryUnescape(c); err == nil {
			add(d, 1)
		}
		// Short fragments would match innocent words of the message.
		for _, f := range strings.FieldsFunc(c, func(r rune) bool { return strings.ContainsRune(":/?@#&=' ", r) }) {
			add(f, 4)
		}
	}
	return out
}
