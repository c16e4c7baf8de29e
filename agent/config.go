package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.yaml.in/yaml/v3"

	"github.com/lakeside/lakeside/agent/internal/source"
	"github.com/lakeside/lakeside/delta"
	"github.com/lakeside/lakeside/uploader"
)

// DefaultConfigPath is where the packaged agent reads its configuration.
const DefaultConfigPath = "/etc/lakeside/lakeside.yaml"

// Default values applied by ParseConfig when a key is absent or null.
const (
	DefaultSlot           = "lakeside"
	DefaultPublication    = "lakeside"
	DefaultSnapshot       = SnapshotInitial
	DefaultStatusInterval = 10 * time.Second
	DefaultLogLevel       = "info"
	DefaultLogFormat      = "text"
	DefaultFlushInterval  = time.Second
	DefaultFlushChanges   = 100000
	DefaultTargetFileRows = 100000
	DefaultRowGroupRows   = delta.DefaultRowGroupRows
	// DefaultVacuumRetention is Delta's default
	// delta.deletedFileRetentionDuration: seven days of time travel.
	DefaultVacuumRetention = 7 * 24 * time.Hour
	DefaultVacuumInterval  = 24 * time.Hour
	DefaultHTTPListen      = "127.0.0.1:8080"
	DefaultMaxClients      = 64
)

// Snapshot modes accepted in source.snapshot.
const (
	// SnapshotInitial copies the existing rows of every table when the
	// replication slot is created, before streaming changes.
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
// It is produced by LoadConfig or ParseConfig, which reject unknown keys,
// expand ${VAR} references from the environment, apply defaults and
// validate every field, so a *Config obtained from them is ready to use.
type Config struct {
	Source   SourceConfig `yaml:"source"`
	StateDir string       `yaml:"state_dir"`
	Delta    DeltaConfig  `yaml:"delta"`
	// Replica is the remote copy of the Delta tables; replication is off
	// when Replica.URL is empty.
	Replica uploader.Config `yaml:"replica"`
	HTTP    HTTPConfig      `yaml:"http"`
	Log     LogConfig       `yaml:"log"`
}

// DeltaConfig configures the local Delta tables.
type DeltaConfig struct {
	// TablesDir holds the tables, <state_dir>/tables by default.
	TablesDir string `yaml:"tables_dir"`
	// FlushInterval is the longest a committed change waits before it is
	// in the Delta tables, 1s by default.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// FlushChanges applies at once when that many changes wait (100000).
	FlushChanges int `yaml:"flush_changes"`
	// SoftDelete keeps deleted rows in the mirror with _deleted = true.
	SoftDelete bool `yaml:"soft_delete"`
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
}

// HTTPConfig configures the live view's HTTP server.
type HTTPConfig struct {
	// Listen is the address, 127.0.0.1:8080 by default; "off" disables
	// the server.
	Listen string `yaml:"listen"`
	// Token is required by every API request when set, and must be set
	// when Listen is not a loopback address.
	Token string `yaml:"token"`
	// MaxClients caps the live stream's clients (64).
	MaxClients int `yaml:"max_clients"`
}

// SourceConfig describes the PostgreSQL database to replicate from.
type SourceConfig struct {
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
	LogicalDecodingWorkMem int64 `yaml:"logical_decoding_work_mem"`
}

// LogConfig configures the agent's structured logs.
type LogConfig struct {
	// Level is one of debug, info (the default), warn and error.
	Level string `yaml:"level"`
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
	switch {
	case !ok:
		return TableName{}, fmt.Errorf("table name %q: missing schema (write it as schema.table, e.g. public.%s)", s, s)
	case strings.Contains(name, "."):
		return TableName{}, fmt.Errorf("table name %q: more than one \".\" (write it as schema.table; names containing a dot are not supported)", s)
	case schema == "":
		return TableName{}, fmt.Errorf("table name %q: empty schema (write it as schema.table, e.g. public%s)", s, s)
	case name == "":
		return TableName{}, fmt.Errorf("table name %q: empty table name (write it as schema.table)", s)
	case strings.ContainsRune(s, 0):
		return TableName{}, fmt.Errorf("table name %q: contains a NUL byte", s)
	case len(schema) > maxIdentifierBytes || len(name) > maxIdentifierBytes:
		return TableName{}, fmt.Errorf("table name %q: schema and table must each be at most %d bytes", s, maxIdentifierBytes)
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

// LoadConfig reads the YAML file at path and parses it with ParseConfig,
// using path as the name in error messages.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig parses, expands and validates a YAML configuration. The name
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
// found is reported.
func ParseConfig(name string, data []byte) (*Config, error) {
	p := &configParser{name: name}
	root, err := p.parseDocument(data)
	if err != nil {
		return nil, err
	}
	p.index(root, "", "")

	var raw rawConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, p.decodeError(err)
	}
	return p.build(&raw)
}

// rawConfig mirrors the YAML file before expansion and validation. Keys
// that have a default are pointers, so that absent differs from empty.
type rawConfig struct {
	Source   rawSource  `yaml:"source"`
	StateDir string     `yaml:"state_dir"`
	Delta    rawDelta   `yaml:"delta"`
	Replica  rawReplica `yaml:"replica"`
	HTTP     rawHTTP    `yaml:"http"`
	Log      rawLog     `yaml:"log"`
}

// rawDelta mirrors the delta section of the file.
type rawDelta struct {
	TablesDir       *string `yaml:"tables_dir"`
	FlushInterval   *string `yaml:"flush_interval"`
	FlushChanges    *string `yaml:"flush_changes"`
	SoftDelete      *string `yaml:"soft_delete"`
	TargetFileRows  *string `yaml:"target_file_rows"`
	RowGroupRows    *string `yaml:"row_group_rows"`
	VacuumRetention *string `yaml:"vacuum_retention"`
	VacuumInterval  *string `yaml:"vacuum_interval"`
}

// rawReplica mirrors the replica section of the file.
type rawReplica struct {
	URL               *string `yaml:"url"`
	Site              *string `yaml:"site"`
	Endpoint          *string `yaml:"endpoint"`
	Region            *string `yaml:"region"`
	AccessKeyID       *string `yaml:"access_key_id"`
	SecretAccessKey   *string `yaml:"secret_access_key"`
	MaxBacklog        *string `yaml:"max_backlog"`
	MaxBytesPerSecond *string `yaml:"max_bytes_per_second"`
	PollInterval      *string `yaml:"poll_interval"`
	MaxBackoff        *string `yaml:"max_backoff"`
	Concurrency       *string `yaml:"concurrency"`
}

// rawHTTP mirrors the http section of the file.
type rawHTTP struct {
	Listen     *string `yaml:"listen"`
	Token      *string `yaml:"token"`
	MaxClients *string `yaml:"max_clients"`
}

// rawSource mirrors the source section of the file.
type rawSource struct {
	DSN            string   `yaml:"dsn"`
	Slot           *string  `yaml:"slot"`
	Publication    *string  `yaml:"publication"`
	Tables         []string `yaml:"tables"`
	Snapshot       *string  `yaml:"snapshot"`
	StatusInterval *string  `yaml:"status_interval"`
	// LogicalDecodingWorkMem is a size or "server".
	LogicalDecodingWorkMem *string `yaml:"logical_decoding_work_mem"`
}

// rawLog mirrors the log section of the file.
type rawLog struct {
	Level  *string `yaml:"level"`
	Format *string `yaml:"format"`
}

// sectionKeys returns the keys allowed in the mapping at path, in the
// order they are documented, or nil if path is not a mapping section.
func sectionKeys(path string) []string {
	switch path {
	case "":
		return []string{"source", "state_dir", "delta", "replica", "http", "log"}
	case "source":
		return []string{"dsn", "slot", "publication", "tables", "snapshot", "status_interval", "logical_decoding_work_mem"}
	case "delta":
		return []string{"tables_dir", "flush_interval", "flush_changes", "soft_delete", "target_file_rows", "row_group_rows", "vacuum_retention", "vacuum_interval"}
	case "replica":
		return []string{"url", "site", "endpoint", "region", "access_key_id", "secret_access_key",
			"max_backlog", "max_bytes_per_second", "poll_interval", "max_backoff", "concurrency"}
	case "http":
		return []string{"listen", "token", "max_clients"}
	case "log":
		return []string{"level", "format"}
	}
	return nil
}

// expectedKind returns the kind of YAML node the value at path must be,
// and a description of it for type errors.
func expectedKind(path string) (yaml.Kind, string) {
	switch {
	case path == "source" || path == "log" || path == "delta" || path == "replica" || path == "http":
		return yaml.MappingNode, "a mapping of keys (" + strings.Join(sectionKeys(path), ", ") + ")"
	case path == "source.tables":
		return yaml.SequenceNode, "a list of schema.table names"
	case strings.HasPrefix(path, "source.tables["):
		return yaml.ScalarNode, "a schema.table name"
	}
	return yaml.ScalarNode, "a single value (a string)"
}

// configParser carries the state of one ParseConfig call.
type configParser struct {
	name    string
	entries []nodeEntry // every key and list item, in document order
}

// nodeEntry is one key of a mapping or one item of a sequence.
type nodeEntry struct {
	path   string     // e.g. "source.tables[1]"
	parent string     // path of the enclosing mapping or sequence
	key    *yaml.Node // nil for sequence items
	value  *yaml.Node
}

// line returns the line an entry is reported at: its key's for a mapping
// key, its own for a sequence item.
func (e nodeEntry) line() int {
	if e.key != nil {
		return e.key.Line
	}
	return e.value.Line
}

// parseDocument parses data into a node tree and checks that it holds
// exactly one document whose content is a mapping.
func (p *configParser) parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errorf(1, "", "the file is empty (it needs at least source.dsn, source.tables and state_dir)")
		}
		return nil, p.syntaxError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, p.errorf(extra.Line, "", "only one YAML document is allowed (remove the \"---\" separator and what follows it)")
	case !errors.Is(err, io.EOF):
		return nil, p.syntaxError(err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, p.errorf(1, "", "the file is not a YAML mapping (it needs at least source.dsn, source.tables and state_dir)")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errorf(root.Line, "", "the document must be a mapping of keys (%s), not %s",
			strings.Join(sectionKeys(""), ", "), describeNode(root))
	}
	return root, nil
}

// index records every mapping key and sequence item under n in document
// order. Aliases are not followed, so the walk is linear in the size of
// the file; values reached through an alias are reported at the alias.
func (p *configParser) index(n *yaml.Node, path, parent string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if path != "" {
				child = path + "." + k.Value
			}
			p.entries = append(p.entries, nodeEntry{path: child, parent: path, key: k, value: v})
			p.index(v, child, path)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			child := path + "[" + strconv.Itoa(i) + "]"
			p.entries = append(p.entries, nodeEntry{path: child, parent: path, value: item})
			p.index(item, child, path)
		}
	}
}

// lineOf returns the line of the key or item at path; for a path that is
// not in the file, the line of its nearest enclosing section, or 1.
func (p *configParser) lineOf(path string) int {
	for path != "" {
		for _, e := range p.entries {
			if e.path == path {
				return e.line()
			}
		}
		path = parentPath(path)
	}
	return 1
}

// parentPath strips the last ".key" or "[i]" from path.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// errorf formats a one-line error at the given line and key path.
func (p *configParser) errorf(line int, path, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	// Values are quoted with %q, but messages from yaml.v3 and pgconn are
	// not ours: keep the error on one line whatever they hold.
	msg = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(msg)
	return fmt.Errorf("%s:%d: %s", p.name, line, msg)
}

// pathErrorf formats a one-line error about the key or item at path.
func (p *configParser) pathErrorf(path, format string, args ...any) error {
	return p.errorf(p.lineOf(path), path, format, args...)
}

// yamlLinePattern matches the "line N: " that yaml.v3 puts in its messages.
const yamlLinePattern = `^(?:yaml: )?line (\d+): (.*)$`

// syntaxError rewrites a yaml.v3 parse error as a one-line config error.
func (p *configParser) syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 1
	if m := regexp.MustCompile(yamlLinePattern).FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return p.errorf(line, "", "invalid YAML: %s (check the indentation: use spaces, not tabs, and put a space after each colon)", msg)
}

// decodeError rewrites the first error of the strict decode (an unknown
// key, a duplicate key or a value of the wrong type) as a config error.
// yaml.v3 reports these only as text, so the text is matched; anything
// unrecognised is still reported, with its line, as yaml.v3 worded it.
func (p *configParser) decodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return p.syntaxError(err)
	}
	m := regexp.MustCompile(yamlLinePattern).FindStringSubmatch(te.Errors[0])
	if m == nil {
		return p.errorf(1, "", "%s", te.Errors[0])
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[2]

	if sm := regexp.MustCompile(`^field (.*) not found in type `).FindStringSubmatch(msg); sm != nil {
		return p.unknownKeyError(line, sm[1])
	}
	if sm := regexp.MustCompile(`^field (.*) already set in type `).FindStringSubmatch(msg); sm != nil {
		return p.duplicateKeyError(line, sm[1])
	}
	if sm := regexp.MustCompile(`^mapping key (.*) already defined at line \d+$`).FindStringSubmatch(msg); sm != nil {
		key, uerr := strconv.Unquote(sm[1])
		if uerr != nil {
			key = sm[1]
		}
		return p.duplicateKeyError(line, key)
	}
	if sm := regexp.MustCompile(`^cannot unmarshal (!!\w+)`).FindStringSubmatch(msg); sm != nil {
		// Several values can share a line (flow style): pick the first
		// one of that tag whose kind is not the one its key requires.
		for _, e := range p.entries {
			want, desc := expectedKind(e.path)
			if e.value.Line == line && e.value.ShortTag() == sm[1] && e.value.Kind != want {
				return p.errorf(e.line(), e.path, "must be %s, not %s", desc, describeNode(e.value))
			}
		}
	}
	return p.errorf(line, "", "%s", msg)
}

// unknownKeyError reports a key that is not part of the configuration.
func (p *configParser) unknownKeyError(line int, key string) error {
	parent := ""
	for _, e := range p.entries {
		if e.key != nil && e.key.Line == line && e.key.Value == key {
			parent = e.parent
			break
		}
	}
	known := sectionKeys(parent)
	hint := ""
	if guess := closestKey(key, known); guess != "" {
		hint = fmt.Sprintf("did you mean %q? ", guess)
	}
	if len(known) > 0 {
		hint += "valid keys: " + strings.Join(known, ", ")
	}
	if hint != "" {
		hint = " (" + hint + ")"
	}
	return p.errorf(line, parent, "unknown key %q%s", key, hint)
}

// duplicateKeyError reports a key written twice in the same mapping.
func (p *configParser) duplicateKeyError(line int, key string) error {
	for _, dup := range p.entries {
		if dup.key == nil || dup.key.Line != line || dup.key.Value != key {
			continue
		}
		for _, first := range p.entries {
			if first.parent == dup.parent && first.key != nil && first.key.Value == key && first.key != dup.key {
				return p.errorf(line, dup.path, "set twice (first at line %d); keep only one", first.line())
			}
		}
	}
	return p.errorf(line, "", "key %q is set twice; keep only one", key)
}

// closestKey returns the known key within edit distance 2 of key, if any.
func closestKey(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describeNode names the kind of a YAML value for error messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}

// expand replaces ${NAME} references in the value at path, as described
// on ParseConfig.
func (p *configParser) expand(path, s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is an escaped, literal "${".
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 || !isEnvName(s[i+2:i+end]) {
			return "", p.pathErrorf(path, "a \"${\" is not followed by a variable name and \"}\" (write ${NAME} with letters, digits and underscores, or $${ for a literal ${)")
		}
		name := s[i+2 : i+end]
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", p.pathErrorf(path, "environment variable %s is not set (set it in the agent's environment, e.g. an EnvironmentFile of the systemd unit, or write $${ for a literal ${)", name)
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

// isEnvName reports whether s is a valid environment variable name for
// ${NAME}: letters, digits and underscores, not starting with a digit.
func isEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// optional expands *s, or returns def when s is nil (key absent or null).
func (p *configParser) optional(path string, s *string, def string) (string, error) {
	if s == nil {
		return def, nil
	}
	return p.expand(path, *s)
}

// build expands, defaults and validates the decoded file, field by field
// in a fixed order, and returns the first problem found.
func (p *configParser) build(raw *rawConfig) (*Config, error) {
	var c Config
	var err error
	src := &raw.Source

	// source.dsn
	if c.Source.DSN, err = p.expand("source.dsn", src.DSN); err != nil {
		return nil, err
	}
	if c.Source.DSN == "" {
		return nil, p.pathErrorf("source.dsn", "a connection string is required (e.g. postgres://lakeside@db.example/shop or \"host=db.example dbname=shop user=lakeside\")")
	}
	if _, perr := pgconn.ParseConfig(c.Source.DSN); perr != nil {
		return nil, p.pathErrorf("source.dsn", "invalid connection string: %s (use a postgres:// URL or key=value pairs)", dsnErrorReason(c.Source.DSN, perr))
	}

	// source.slot
	if c.Source.Slot, err = p.optional("source.slot", src.Slot, DefaultSlot); err != nil {
		return nil, err
	}
	if !isSlotName(c.Source.Slot) {
		return nil, p.pathErrorf("source.slot", "%q is not a valid replication slot name (use 1 to %d lowercase letters, digits and underscores, e.g. %q)", c.Source.Slot, maxIdentifierBytes, DefaultSlot)
	}

	// source.publication
	if c.Source.Publication, err = p.optional("source.publication", src.Publication, DefaultPublication); err != nil {
		return nil, err
	}
	switch pub := c.Source.Publication; {
	case pub == "":
		return nil, p.pathErrorf("source.publication", "must not be empty (remove the key to use %q)", DefaultPublication)
	case len(pub) > maxIdentifierBytes:
		return nil, p.pathErrorf("source.publication", "%q is longer than %d bytes (use a shorter name)", pub, maxIdentifierBytes)
	case strings.ContainsRune(pub, 0):
		return nil, p.pathErrorf("source.publication", "%q contains a NUL byte (remove it)", pub)
	}

	// source.tables
	if len(src.Tables) == 0 {
		return nil, p.pathErrorf("source.tables", "at least one table is required (list them as schema.table)")
	}
	seen := make(map[TableName]int, len(src.Tables))
	for i, s := range src.Tables {
		path := "source.tables[" + strconv.Itoa(i) + "]"
		if s, err = p.expand(path, s); err != nil {
			return nil, err
		}
		t, terr := ParseTableName(s)
		if terr != nil {
			return nil, p.pathErrorf(path, "%v", terr)
		}
		if j, dup := seen[t]; dup {
			first := "source.tables[" + strconv.Itoa(j) + "]"
			return nil, p.pathErrorf(path, "table %q is listed twice (also at line %d); remove one", t.String(), p.lineOf(first))
		}
		seen[t] = i
		c.Source.Tables = append(c.Source.Tables, t)
	}

	// source.snapshot
	if c.Source.Snapshot, err = p.optional("source.snapshot", src.Snapshot, DefaultSnapshot); err != nil {
		return nil, err
	}
	if c.Source.Snapshot != SnapshotInitial && c.Source.Snapshot != SnapshotNever {
		return nil, p.pathErrorf("source.snapshot", "%q is not a snapshot mode (use %q to copy the existing rows first, or %q)", c.Source.Snapshot, SnapshotInitial, SnapshotNever)
	}

	// source.status_interval
	interval, err := p.optional("source.status_interval", src.StatusInterval, DefaultStatusInterval.String())
	if err != nil {
		return nil, err
	}
	if c.Source.StatusInterval, err = time.ParseDuration(interval); err != nil {
		return nil, p.pathErrorf("source.status_interval", "%q is not a duration (write it like 10s, 500ms or 1m)", interval)
	}
	if c.Source.StatusInterval <= 0 || c.Source.StatusInterval > maxStatusInterval {
		return nil, p.pathErrorf("source.status_interval", "%q is out of range (it must be greater than 0 and at most 1h)", interval)
	}

	// source.logical_decoding_work_mem
	if c.Source.LogicalDecodingWorkMem, err = p.decodingWorkMem(src.LogicalDecodingWorkMem); err != nil {
		return nil, err
	}

	// state_dir
	dir, err := p.expand("state_dir", raw.StateDir)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, p.pathErrorf("state_dir", "a directory is required for the queue and the local tables (e.g. /var/lib/lakeside)")
	}
	c.StateDir = filepath.Clean(dir)

	if err := p.buildDelta(&c, &raw.Delta); err != nil {
		return nil, err
	}
	if err := p.buildReplica(&c, &raw.Replica); err != nil {
		return nil, err
	}
	if err := p.buildHTTP(&c, &raw.HTTP); err != nil {
		return nil, err
	}

	// log.level
	if c.Log.Level, err = p.optional("log.level", raw.Log.Level, DefaultLogLevel); err != nil {
		return nil, err
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return nil, p.pathErrorf("log.level", "%q is not a log level (use debug, info, warn or error)", c.Log.Level)
	}

	// log.format
	if c.Log.Format, err = p.optional("log.format", raw.Log.Format, DefaultLogFormat); err != nil {
		return nil, err
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return nil, p.pathErrorf("log.format", "%q is not a log format (use text or json)", c.Log.Format)
	}
	return &c, nil
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
