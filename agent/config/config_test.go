package config

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lakeside/lakeside/uploader"
	"time"
)

const configTestdata = "testdata"

// testPassword appears in the DSN of the bad DSN fixtures; no error may
// contain it.
const testPassword = "Sup3rS3cretPW"

// setTestEnv sets the variables used by env.good.yml and makes sure the
// one used by unset_var.bad.yml is unset.
func setTestEnv(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"LAKESIDE_TEST_USER":         "branch7",
		"LAKESIDE_TEST_PASSWORD":     "s3cret",
		"LAKESIDE_TEST_EMPTY":        "",
		"LAKESIDE_TEST_SITE":         "site7",
		"LAKESIDE_TEST_SCHEMA":       "inventory",
		"LAKESIDE_TEST_TABLE":        "${LAKESIDE_TEST_SITE}",
		"LAKESIDE_TEST_INTERVAL":     "30s",
		"LAKESIDE_TEST_DECODING_MEM": "4MiB",
		"LAKESIDE_TEST_HOME":         "/srv/lakeside/",
		"LAKESIDE_TEST_LEVEL":        "warn",
		"LAKESIDE_TEST_SECRET":       "test-secret",
		"LAKESIDE_TEST_TOKEN":        "test-token-0123456789",
	} {
		t.Setenv(k, v)
	}
	t.Setenv("LAKESIDE_TEST_UNSET_PASSWORD", "")
	if err := os.Unsetenv("LAKESIDE_TEST_UNSET_PASSWORD"); err != nil {
		t.Fatal(err)
	}
}

// maxErrorBytes is more than any configuration error needs: values are cut
// to a few dozen bytes.
const maxErrorBytes = 600

// badConfig is a testdata/*.bad.yml file and the texts its error
// must contain; the first always includes the file name and line.
type badConfig struct {
	file string
	want []string
}

// badConfigs lists every bad config file.
func badConfigs() []badConfig {
	return []badConfig{
		{"empty.bad.yml", []string{"empty.bad.yml:1: the file is empty"}},
		{"bad_flush_interval.bad.yml", []string{`bad_flush_interval.bad.yml:6: delta.flush_interval: "soon" is not a duration`}},
		{"bad_vacuum_retention.bad.yml", []string{`bad_vacuum_retention.bad.yml:6: delta.vacuum_retention: 10m0s is shorter than 1h0m0s`}},
		{"bad_vacuum_interval.bad.yml", []string{`bad_vacuum_interval.bad.yml:6: delta.vacuum_interval: "daily" is not a duration`}},
		{"bad_soft_delete.bad.yml", []string{`bad_soft_delete.bad.yml:6: delta.soft_delete: "maybe" is not true or false`}},
		{"bad_change_data_feed.bad.yml", []string{`bad_change_data_feed.bad.yml:6: delta.change_data_feed: "sometimes" is not true or false`}},
		{"bad_target_file_size.bad.yml", []string{`bad_target_file_size.bad.yml:6: delta.target_file_size: 1000 bytes is smaller than 1MiB`}},
		{"bad_row_group_rows.bad.yml", []string{`bad_row_group_rows.bad.yml:7: delta.row_group_rows: "0" is not a positive whole number`}},
		{"backfill_chunk_rows_zero.bad.yml", []string{`backfill_chunk_rows_zero.bad.yml:4: source.backfill_chunk_rows: "0" is not a positive whole number`}},
		{"max_value_size_small.bad.yml", []string{`max_value_size_small.bad.yml:4: source.max_value_size: 4096 bytes is smaller than 1MiB`}},
		{"backfill_chunk_rows_large.bad.yml", []string{`backfill_chunk_rows_large.bad.yml:4: source.backfill_chunk_rows: "2000000" is out of range`, "at most 1000000"}},
		{"backfill_rate_negative.bad.yml", []string{`backfill_rate_negative.bad.yml:4: source.backfill_rows_per_second: "-5" is not a whole number (0 means no limit)`}},
		{"replica_stall_timeout_short.bad.yml", []string{`replica_stall_timeout_short.bad.yml:8: replica.stall_timeout: 500ms is under 1s`}},
		{"local_retention_fleet.bad.yml", []string{`local_retention_fleet.bad.yml:6: delta.local_retention: needs replica.layout: site`}},
		{"replica_bad_layout.bad.yml", []string{`replica_bad_layout.bad.yml:8: replica.layout: "shared" is not a layout (write site`}},
		{"replica_bad_scheme.bad.yml", []string{`replica_bad_scheme.bad.yml:6: replica.url: unsupported scheme "ftp"`}},
		{"replica_url_credentials.bad.yml", []string{`replica_url_credentials.bad.yml:7: replica.url: must not hold credentials`, "replica.access_key_id", "replica.secret_access_key"}},
		{"replica_url_password.bad.yml", []string{`replica_url_password.bad.yml:6: replica.url: must not hold credentials`}},
		{"http_weak_token.bad.yml", []string{`http_weak_token.bad.yml:8: http.token: is too short for http.listen "0.0.0.0:8080"`, "at least 16 characters"}},
		{"http_blank_token.bad.yml", []string{`http_blank_token.bad.yml:7: http.token: is too short`}},
		{"http_bad_port.bad.yml", []string{`http_bad_port.bad.yml:6: http.listen: "127.0.0.1:99999" has no valid port (use a port from 1 to 65535`}},
		{"http_port_zero.bad.yml", []string{`http_port_zero.bad.yml:6: http.listen: "127.0.0.1:0" has no valid port`}},
		{"replica_no_site.bad.yml", []string{`replica_no_site.bad.yml:5: replica.site:`, `is not a valid name`}},
		{"local_retention_no_replica.bad.yml", []string{`local_retention_no_replica.bad.yml:6: delta.local_retention: needs a replica (set replica.url)`}},
		{"replica_no_url.bad.yml", []string{`replica_no_url.bad.yml:5: replica.url: is required when the replica section is used`}},
		{"replica_bad_size.bad.yml", []string{`replica_bad_size.bad.yml:8: replica.max_backlog: "lots" is not a size`}},
		{"http_public_no_token.bad.yml", []string{`http_public_no_token.bad.yml:6: http.listen: "0.0.0.0:8080" is reachable from the network, so http.token is required`}},
		{"http_bad_listen.bad.yml", []string{`http_bad_listen.bad.yml:6: http.listen: "not-an-address" is not a host:port address`}},
		{"not_yaml.bad.yml", []string{"not_yaml.bad.yml:1: invalid YAML: "}},
		{"not_mapping.bad.yml", []string{"not_mapping.bad.yml:2: the document must be a mapping", "not a list"}},
		{"bad_indent.bad.yml", []string{"bad_indent.bad.yml:3: invalid YAML: mapping values are not allowed"}},
		{"tab_indent.bad.yml", []string{"tab_indent.bad.yml:", "invalid YAML: found a tab character"}},
		{"two_documents.bad.yml", []string{"two_documents.bad.yml:5: only one YAML document is allowed"}},
		{"unknown_key.bad.yml", []string{`unknown_key.bad.yml:3: unknown key "sorce"`, `did you mean "source"?`}},
		{"unknown_nested_key.bad.yml", []string{`unknown_nested_key.bad.yml:4: source: unknown key "slott"`, `did you mean "slot"?`}},
		{"unknown_log_key.bad.yml", []string{`unknown_log_key.bad.yml:7: log: unknown key "colour"`, "valid keys: level, format"}},
		{"duplicate_key.bad.yml", []string{"duplicate_key.bad.yml:4: source.dsn: set twice (first at line 2)"}},
		{"source_list.bad.yml", []string{"source_list.bad.yml:2: source: must be a mapping of keys", "not a list"}},
		{"tables_string.bad.yml", []string{"tables_string.bad.yml:3: source.tables: must be a list of schema.table names, not a string"}},
		{"tables_flow_string.bad.yml", []string{"tables_flow_string.bad.yml:2: source.tables: must be a list of schema.table names, not a string"}},
		{"table_mapping.bad.yml", []string{"table_mapping.bad.yml:5: source.tables[1]: must be a schema.table name, not a mapping"}},
		{"duration_list.bad.yml", []string{"duration_list.bad.yml:4: source.status_interval: must be a single value (a string), not a list"}},
		{"missing_source.bad.yml", []string{"missing_source.bad.yml:1: source.dsn: a connection string is required"}},
		{"missing_dsn.bad.yml", []string{"missing_dsn.bad.yml:2: source.dsn: a connection string is required"}},
		{"bad_dsn.bad.yml", []string{"bad_dsn.bad.yml:3: source.dsn: invalid connection string: invalid port"}},
		{"bad_dsn_keyword.bad.yml", []string{"bad_dsn_keyword.bad.yml:3: source.dsn: invalid connection string: ", "sslmode is invalid"}},
		{"bad_slot.bad.yml", []string{`bad_slot.bad.yml:3: source.slot: "My-Slot" is not a valid replication slot name`, "lowercase letters, digits and underscores"}},
		{"empty_publication.bad.yml", []string{"empty_publication.bad.yml:4: source.publication: must not be empty"}},
		{"long_publication.bad.yml", []string{"long_publication.bad.yml:4: source.publication: ", "is longer than 63 bytes"}},
		{"missing_tables.bad.yml", []string{"missing_tables.bad.yml:2: source.tables: at least one table is required (list them as schema.table)"}},
		{"no_tables.bad.yml", []string{"no_tables.bad.yml:4: source.tables: at least one table is required (list them as schema.table)"}},
		{"table_without_schema.bad.yml", []string{`table_without_schema.bad.yml:5: source.tables[1]: table name "orders": missing schema`, "public.orders"}},
		{"table_two_dots.bad.yml", []string{`table_two_dots.bad.yml:4: source.tables[0]: table name "shop.public.stock": more than one "."`}},
		{"table_empty_name.bad.yml", []string{`table_empty_name.bad.yml:4: source.tables[1]: table name "public.": empty table name`}},
		{"duplicate_table.bad.yml", []string{`duplicate_table.bad.yml:6: source.tables[2]: table "public.stock" is listed twice (also at line 4)`}},
		{"bad_snapshot.bad.yml", []string{`bad_snapshot.bad.yml:4: source.snapshot: "sometimes" is not a snapshot mode`, `"initial"`, `"never"`}},
		{"decoding_work_mem_small.bad.yml", []string{`decoding_work_mem_small.bad.yml:5: source.logical_decoding_work_mem: "32KiB" is out of range`, "64KiB", `"server"`}},
		{"decoding_work_mem_unit.bad.yml", []string{`decoding_work_mem_unit.bad.yml:5: source.logical_decoding_work_mem: "64kB" is not a size`, "512KiB"}},
		{"bad_duration.bad.yml", []string{`bad_duration.bad.yml:5: source.status_interval: "10 parsecs" is not a duration`, "10s"}},
		{"duration_without_unit.bad.yml", []string{`duration_without_unit.bad.yml:3: source.status_interval: "10" is not a duration`}},
		{"zero_duration.bad.yml", []string{`zero_duration.bad.yml:4: source.status_interval: "0s" is out of range`, "greater than 0"}},
		{"negative_duration.bad.yml", []string{`negative_duration.bad.yml:4: source.status_interval: "-5s" is out of range`}},
		{"long_duration.bad.yml", []string{`long_duration.bad.yml:4: source.status_interval: "1h0m1s" is out of range`, "at most 1h"}},
		{"missing_state_dir.bad.yml", []string{"missing_state_dir.bad.yml:1: state_dir: a directory is required"}},
		{"unset_var.bad.yml", []string{"unset_var.bad.yml:2: source.dsn: environment variable LAKESIDE_TEST_UNSET_PASSWORD is not set"}},
		{"bad_var_reference.bad.yml", []string{`bad_var_reference.bad.yml:4: state_dir: a "${" is not followed by a variable name`}},
		{"bad_log_level.bad.yml", []string{`bad_log_level.bad.yml:6: log.level: "verbose" is not a log level (use debug, info, warn or error)`}},
		{"bad_log_format.bad.yml", []string{`bad_log_format.bad.yml:6: log.format: "xml" is not a log format (use text or json)`}},
		{"table_null.bad.yml", []string{"table_null.bad.yml:5: source.tables[1]: must be a schema.table name, not null"}},
		{"replica_key_without_url.bad.yml", []string{`replica_key_without_url.bad.yml:7: replica.poll_interval: "soon" is not a duration`}},
		{"unknown_replica_key.bad.yml", []string{`unknown_replica_key.bad.yml:8: replica: unknown key "max_backlogg" (did you mean "max_backlog"?`}},
		{"duplicate_state_dir.bad.yml", []string{"duplicate_state_dir.bad.yml:6: state_dir: set twice (first at line 4); keep only one"}},
		{"long_duration_seconds.bad.yml", []string{`long_duration_seconds.bad.yml:4: source.status_interval: "3601s" is out of range`, "at most 1h"}},
		{"empty_tables_dir.bad.yml", []string{"empty_tables_dir.bad.yml:6: delta.tables_dir: must not be empty (remove the key to use <state_dir>/tables)"}},
		{"bad_max_clients.bad.yml", []string{`bad_max_clients.bad.yml:6: http.max_clients: "99999999999999999999" is not a positive whole number`}},
		{"long_value.bad.yml", []string{`long_value.bad.yml:3: source.slot: "xxxxxxxx`, `…" is not a valid replication slot name`}},
		{"replica_secret_list.bad.yml", []string{"replica_secret_list.bad.yml:8: replica.secret_access_key: must be a single value (a string), not a list"}},
	}
}

func TestLoadBad(t *testing.T) {
	setTestEnv(t)
	for _, tc := range badConfigs() {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(configTestdata, tc.file)
			c, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = %+v, want an error", path, c)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+":") {
				t.Errorf("error %q does not start with %q", msg, path+":")
			}
			for _, want := range tc.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q has more than one line", msg)
			}
			if len(msg) > maxErrorBytes {
				t.Errorf("error is %d bytes long, more than %d: %.300s", len(msg), maxErrorBytes, msg)
			}
			if strings.Contains(msg, testPassword) {
				t.Errorf("error %q reveals the password", msg)
			}
		})
	}
}

// TestBadConfigsListed checks that every *.bad.yml file has an entry in
// badConfigs, and every entry a file, so that none is forgotten.
func TestBadConfigsListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configTestdata, "*.bad.yml"))
	if err != nil {
		t.Fatal(err)
	}
	listed := make(map[string]bool, len(badConfigs()))
	for _, tc := range badConfigs() {
		if listed[tc.file] {
			t.Errorf("%s is listed twice in badConfigs", tc.file)
		}
		listed[tc.file] = true
	}
	onDisk := make(map[string]bool, len(files))
	for _, f := range files {
		base := filepath.Base(f)
		onDisk[base] = true
		if !listed[base] {
			t.Errorf("%s has no entry in badConfigs", base)
		}
	}
	for _, tc := range badConfigs() {
		if !onDisk[tc.file] {
			t.Errorf("badConfigs lists %s, which is not in %s", tc.file, configTestdata)
		}
	}
	if len(files) < 14 {
		t.Errorf("found %d bad configs, want at least 14", len(files))
	}
}

// goodConfig is a testdata/*.good.yml file and its expected value.
type goodConfig struct {
	file string
	want Config
}

// goodConfigs lists every good config file.
func goodConfigs() []goodConfig {
	return []goodConfig{
		{"sections.good.yml", Config{
			Source: Source{
				DSN: "postgres://lakeside@localhost/shop", Slot: "lakeside", Publication: "lakeside",
				Tables: []TableName{{Schema: "public", Name: "stock"}}, Snapshot: "initial", StatusInterval: 10 * time.Second,
				LogicalDecodingWorkMem: 0, // "server"
				MaxValueSize:           0, // every value
			},
			StateDir: "/var/lib/lakeside",
			Delta: Delta{TablesDir: "/srv/delta", FlushInterval: 250 * time.Millisecond, FlushChanges: 5000, SoftDelete: true, ChangeDataFeed: true, TargetFileRows: 20000,
				RowGroupRows: 5000, VacuumRetention: 72 * time.Hour, VacuumInterval: 6 * time.Hour,
				Compaction: false, TargetFileSize: 64 << 20, CompactInterval: 5 * time.Minute, CompactMinFiles: 8, CompactBytesPerSecond: 0},
			Replica: uploader.Config{URL: "s3://branch-data/lakeside", Site: "branch7", Endpoint: "http://127.0.0.1:9000", Region: "eu-west-1",
				AccessKeyID: "AKIA", SecretAccessKey: "test-secret", MaxBacklog: 2 << 30, MaxBytesPerSecond: 1000000,
				PollInterval: 5 * time.Second, MaxBackoff: 2 * time.Minute, Concurrency: 2, StallTimeout: 45 * time.Second},
			HTTP: HTTP{Listen: "0.0.0.0:8080", Token: "test-token-0123456789", MaxClients: 8},
			Log:  Log{Level: "info", Format: "text"},
		}},
		{"minimal.good.yml", Config{
			Source: Source{
				DSN:                    "postgres://lakeside@localhost:5432/shop",
				Slot:                   "lakeside",
				Publication:            "lakeside",
				Tables:                 []TableName{{Schema: "public", Name: "stock"}},
				Snapshot:               "initial",
				StatusInterval:         10 * time.Second,
				LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "/var/lib/lakeside",
			Log:      Log{Level: "info", Format: "text"},
		}},
		{"full.good.yml", Config{
			Source: Source{
				DSN:                    "host=db.branch.example port=5433 dbname=shop user=lakeside password=hunter22 sslmode=require",
				Slot:                   "lakeside_branch_7",
				Publication:            "Lakeside-Pub",
				Tables:                 []TableName{{Schema: "public", Name: "stock"}, {Schema: "sales", Name: "Orders"}, {Schema: "odd schema", Name: `odd "name"`}},
				Snapshot:               "never",
				StatusInterval:         150 * time.Second,
				LogicalDecodingWorkMem: 256 << 10,
				BackfillChunkRows:      500,
				BackfillRowsPerSecond:  20000,
				MaxValueSize:           64 << 20,
			},
			StateDir: "lakeside-state",
			Log:      Log{Level: "debug", Format: "json"},
		}},
		{"env.good.yml", Config{
			Source: Source{
				DSN:         "postgres://branch7:s3cret@db.example/shop",
				Slot:        "lakeside_site7",
				Publication: "pub${NOT_EXPANDED}_$$_$x",
				// An expanded value is not expanded again.
				Tables:                 []TableName{{Schema: "inventory", Name: "stock"}, {Schema: "public", Name: "${LAKESIDE_TEST_SITE}"}},
				Snapshot:               "initial",
				StatusInterval:         30 * time.Second,
				LogicalDecodingWorkMem: 4 << 20,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "/srv/lakeside/state",
			Log:      Log{Level: "warn", Format: "text"},
		}},
		{"aliases.good.yml", Config{
			Source: Source{
				DSN: "postgres://lakeside@localhost/shop", Slot: "lakeside_branch", Publication: "lakeside_branch",
				Tables: []TableName{{Schema: "public", Name: "stock"}}, Snapshot: "initial", StatusInterval: 10 * time.Second,
				LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "/var/lib/lakeside",
			Delta: Delta{DeletionVectors: true, TablesDir: "/var/lib/lakeside", FlushInterval: DefaultFlushInterval, FlushChanges: DefaultFlushChanges,
				TargetFileRows: DefaultTargetFileRows, RowGroupRows: DefaultRowGroupRows,
				VacuumRetention: DefaultVacuumRetention, VacuumInterval: DefaultVacuumInterval, Compaction: true, TargetFileSize: DefaultTargetFileSize, CompactInterval: DefaultCompactInterval, CompactMinFiles: DefaultCompactMinFiles, CompactBytesPerSecond: DefaultCompactBytesPerSecond},
			Log: Log{Level: "info", Format: "text"},
		}},
		{"replica_defaults.good.yml", Config{
			Source: Source{
				DSN: "postgres://lakeside@localhost/shop", Slot: "lakeside", Publication: "lakeside",
				Tables: []TableName{{Schema: "public", Name: "stock"}}, Snapshot: "initial", StatusInterval: 10 * time.Second,
				LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "/var/lib/lakeside",
			Replica: uploader.Config{URL: "file:///srv/replica", Site: "branch7",
				PollInterval: 10 * time.Second, MaxBackoff: time.Minute, Concurrency: 4},
			Log: Log{Level: "info", Format: "text"},
		}},
		{"local_retention.good.yml", Config{
			Source: Source{
				DSN: "postgres://lakeside@localhost/shop", Slot: "lakeside", Publication: "lakeside",
				Tables: []TableName{{Schema: "public", Name: "stock"}}, Snapshot: "initial", StatusInterval: 10 * time.Second,
				LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "/var/lib/lakeside",
			Delta: Delta{DeletionVectors: true, TablesDir: "/var/lib/lakeside/tables", FlushInterval: DefaultFlushInterval, FlushChanges: DefaultFlushChanges,
				TargetFileRows: DefaultTargetFileRows, RowGroupRows: DefaultRowGroupRows,
				VacuumRetention: DefaultVacuumRetention, VacuumInterval: DefaultVacuumInterval, LocalRetention: 6 * time.Hour, Compaction: true, TargetFileSize: DefaultTargetFileSize, CompactInterval: DefaultCompactInterval, CompactMinFiles: DefaultCompactMinFiles, CompactBytesPerSecond: DefaultCompactBytesPerSecond},
			Replica: uploader.Config{URL: "file:///srv/replica", Site: "branch7",
				PollInterval: 10 * time.Second, MaxBackoff: time.Minute, Concurrency: 4},
			Log: Log{Level: "info", Format: "text"},
		}},
		{"nulls.good.yml", Config{
			Source: Source{
				DSN:                    "postgres://lakeside@localhost/shop",
				Slot:                   "lakeside",
				Publication:            "lakeside",
				Tables:                 []TableName{{Schema: "public", Name: "a"}, {Schema: "public", Name: "b"}},
				Snapshot:               "initial",
				StatusInterval:         10 * time.Second,
				LogicalDecodingWorkMem: DefaultLogicalDecodingWorkMem,
				MaxValueSize:           DefaultMaxValueSize,
			},
			StateDir: "relative/dir",
			Log:      Log{Level: "info", Format: "text"},
		}},
	}
}

func TestLoadGood(t *testing.T) {
	setTestEnv(t)
	for _, tc := range goodConfigs() {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Load(filepath.Join(configTestdata, tc.file))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := withSectionDefaults(tc.want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("Load:\n got %+v\nwant %+v", *got, want)
			}
		})
	}
}

// TestGoodConfigsListed checks that every *.good.yml file is tested.
func TestGoodConfigsListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(configTestdata, "*.good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	listed := make(map[string]bool, len(goodConfigs()))
	for _, tc := range goodConfigs() {
		listed[tc.file] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s has no entry in goodConfigs", filepath.Base(f))
		}
	}
	if len(files) < 3 {
		t.Errorf("found %d good configs, want at least 3", len(files))
	}
}

// TestConfigSchema checks that the parser can read every key of Config: a
// new field must have a type (or a config tag) whose values it parses, and
// no two keys of a section may be spelled alike.
func TestConfigSchema(t *testing.T) {
	c := defaultConfig()
	p := newConfigParser("lakeside.yaml", &c)
	var check func(typ reflect.Type, path string)
	check = func(typ reflect.Type, path string) {
		seen := map[string]bool{}
		for f := range typ.Fields() {
			key := yamlKey(f)
			if key == "" {
				continue
			}
			if seen[key] {
				t.Errorf("%s: key %q is declared twice", path, key)
			}
			seen[key] = true
			if hasYAMLFields(f.Type) {
				check(f.Type, path+key+".")
				continue
			}
			typ := f.Type
			if typ.Kind() == reflect.Slice {
				typ = typ.Elem()
			}
			problem := parseValue(reflect.New(typ).Elem(), f.Tag.Get("config"), "x")
			if strings.HasPrefix(problem, "the agent ") {
				t.Errorf("%s%s: %s", path, key, problem)
			}
		}
	}
	check(reflect.TypeFor[Config](), "")
	if got := p.path(&c.Replica.MaxBytesPerSecond); got != "replica.max_bytes_per_second" {
		t.Errorf("path of Replica.MaxBytesPerSecond = %q", got)
	}
	if got := len(p.fields); got < 30 {
		t.Errorf("the parser knows %d keys, want at least 30", got)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing file) = %v, want fs.ErrNotExist", err)
	}
	if err != nil && !strings.HasPrefix(err.Error(), "read config: ") {
		t.Errorf("error %q lacks the \"read config: \" prefix", err)
	}
}

// TestParseMessages checks errors built from inline documents,
// including the exact wording promised to operators.
func TestParseMessages(t *testing.T) {
	const valid = "source:\n  dsn: postgres://lakeside@localhost/shop\n  tables: [public.stock]\nstate_dir: /tmp/x\n"
	tests := []struct {
		name, data, want string
	}{
		{"spec example tables", "state_dir: /tmp/x\nsource:\n  dsn: postgres://lakeside@localhost/shop\n  tables: []\n",
			"lakeside.yaml:4: source.tables: at least one table is required (list them as schema.table)"},
		{"spec example unknown key", "state_dir: /tmp/x\n\nsorce: {}\n",
			`lakeside.yaml:3: unknown key "sorce"`},
		{"scalar document", "just a string\n",
			"lakeside.yaml:1: the document must be a mapping of keys (source, state_dir, delta, replica, http, log), not a string"},
		{"null document", "~\n",
			"lakeside.yaml:1: the document must be a mapping"},
		{"document marker only", "---",
			"lakeside.yaml:1: the document must be a mapping of keys (source, state_dir, delta, replica, http, log), not null"},
		{"empty document after blank lines", "---\n\n\n",
			"lakeside.yaml:3: the document must be a mapping"},
		{"comments only", "# nothing here\n",
			"lakeside.yaml:1: the file is empty"},
		{"unknown key in flow mapping", "source: {dsn: x, tabels: [a.b]}\n",
			`lakeside.yaml:1: source: unknown key "tabels" (did you mean "tables"?`},
		{"source as a string", "source: postgres://x\nstate_dir: /tmp/x\n",
			"lakeside.yaml:1: source: must be a mapping of keys"},
		{"log as a list", valid + "log: [debug]\n",
			"lakeside.yaml:5: log: must be a mapping of keys (level, format), not a list"},
		{"misspelled top-level key", valid + "source2: x\n",
			`lakeside.yaml:5: unknown key "source2" (did you mean "source"?`},
		{"uppercase log level", valid + "log: {level: INFO}\n",
			`lakeside.yaml:5: log.level: "INFO" is not a log level`},
		{"empty state_dir", "source:\n  dsn: postgres://lakeside@localhost/shop\n  tables: [public.stock]\nstate_dir: ''\n",
			"lakeside.yaml:4: state_dir: a directory is required"},
		{"slot of 64 bytes", strings.Replace(valid, "  tables", "  slot: "+strings.Repeat("a", 64)+"\n  tables", 1),
			"lakeside.yaml:3: source.slot: "},
		{"duplicate table after expansion", strings.Replace(valid, "[public.stock]", "[public.stock, '${LAKESIDE_TEST_SCHEMA}.stock']", 1),
			`lakeside.yaml:3: source.tables[1]: table "public.stock" is listed twice (also at line 3)`},
		{"bad reference in a table", strings.Replace(valid, "[public.stock]", "['public.${}']", 1),
			`lakeside.yaml:3: source.tables[0]: a "${" is not followed by a variable name`},
		{"unterminated reference", strings.Replace(valid, "/tmp/x", "/tmp/${HOME", 1),
			`lakeside.yaml:4: state_dir: a "${" is not followed by a variable name`},
	}
	t.Setenv("LAKESIDE_TEST_SCHEMA", "public")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("lakeside.yaml", []byte(tc.data))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error containing %q", c, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q has more than one line", err)
			}
		})
	}
}

// TestParseDSNHidesPassword checks that no DSN error reveals the
// password, in URL and keyword/value form, even when pgconn's own reason
// would quote it.
func TestParseDSNHidesPassword(t *testing.T) {
	tests := []struct {
		dsn, password, want string
	}{
		{"postgres://lakeside:" + testPassword + "@db.example:port/shop", testPassword, "invalid port"},
		{"postgres://lakeside:" + testPassword + "@db.example/shop?sslmode=maybe", testPassword, "sslmode is invalid"},
		{"postgresql://lakeside:Pa%zzss@db.example/shop", "Pa%zzss", "invalid percent-encoded token in password"},
		{"postgres://lakeside@db.example/shop?password=" + testPassword + "&connect_timeout=x", testPassword, "invalid connect_timeout"},
		{"host=db.example password=" + testPassword + " sslmode=maybe", testPassword, "sslmode is invalid"},
		{"host=db.example password='" + testPassword + " x' port", testPassword, "invalid keyword/value"},
		// pgconn's reason quotes the bad connect_timeout, which is the password.
		{"host=db.example password=hunter2 connect_timeout=hunter2", "hunter2", "details withheld"},
		{"postgres://lakeside:hunter2@db.example/shop?connect_timeout=hunter2", "hunter2", "details withheld"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			data := "source:\n  dsn: \"" + tc.dsn + "\"\n  tables: [public.stock]\nstate_dir: /tmp/x\n"
			_, err := Parse("lakeside.yaml", []byte(data))
			if err == nil {
				t.Fatalf("Parse accepted DSN %q", tc.dsn)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "lakeside.yaml:2: source.dsn: invalid connection string: ") {
				t.Errorf("error %q lacks the file, line and key path", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if strings.Contains(msg, tc.password) {
				t.Errorf("error %q reveals the password %q", msg, tc.password)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	t.Setenv("LAKESIDE_TEST_A", "alpha")
	t.Setenv("LAKESIDE_TEST_EMPTY", "")
	t.Setenv("LAKESIDE_TEST_REF", "${LAKESIDE_TEST_A}")
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "plain", want: "plain"},
		{in: "${LAKESIDE_TEST_A}", want: "alpha"},
		{in: "x${LAKESIDE_TEST_A}y${LAKESIDE_TEST_A}", want: "xalphayalpha"},
		{in: "a${LAKESIDE_TEST_EMPTY}b", want: "ab"},
		{in: "${LAKESIDE_TEST_REF}", want: "${LAKESIDE_TEST_A}"},
		{in: "pa$$word$", want: "pa$$word$"},
		{in: "$LAKESIDE_TEST_A", want: "$LAKESIDE_TEST_A"},
		{in: "$${LAKESIDE_TEST_A}", want: "${LAKESIDE_TEST_A}"},
		{in: "$$${LAKESIDE_TEST_A}", want: "$${LAKESIDE_TEST_A}"},
		{in: "{}$", want: "{}$"},
		{in: "${LAKESIDE_TEST_UNSET}", wantErr: "environment variable LAKESIDE_TEST_UNSET is not set"},
		{in: "${}", wantErr: "is not followed by a variable name"},
		{in: "${1A}", wantErr: "is not followed by a variable name"},
		{in: "${A-B}", wantErr: "is not followed by a variable name"},
		{in: "${LAKESIDE_TEST_A", wantErr: "is not followed by a variable name"},
	}
	if err := os.Unsetenv("LAKESIDE_TEST_UNSET"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		got, err := expand(tc.in)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("expand(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
		case err != nil || got != tc.want:
			t.Errorf("expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTableName(t *testing.T) {
	tests := []struct {
		in      string
		want    TableName
		quoted  string
		wantErr string
	}{
		{in: "public.stock", want: TableName{Schema: "public", Name: "stock"}, quoted: `"public"."stock"`},
		{in: "Sales.Order Lines", want: TableName{Schema: "Sales", Name: "Order Lines"}, quoted: `"Sales"."Order Lines"`},
		{in: `s.a"b`, want: TableName{Schema: "s", Name: `a"b`}, quoted: `"s"."a""b"`},
		{in: "stock", wantErr: "missing schema"},
		{in: "a.b.c", wantErr: `more than one "."`},
		{in: ".stock", wantErr: "empty schema"},
		{in: "public.", wantErr: "empty table name"},
		{in: ".", wantErr: "empty schema"},
		{in: "", wantErr: "missing schema"},
		{in: "public.a\x00b", wantErr: "NUL"},
		{in: "public." + strings.Repeat("x", 64), wantErr: "at most 63 bytes"},
	}
	for _, tc := range tests {
		got, err := ParseTableName(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTableName(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTableName(%q) = %#v, %v; want %#v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.in {
			t.Errorf("%#v.String() = %q, want %q", got, got.String(), tc.in)
		}
		if got.Quoted() != tc.quoted {
			t.Errorf("%#v.Quoted() = %q, want %q", got, got.Quoted(), tc.quoted)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	for level, want := range map[string]slog.Level{
		"debug": slog.LevelDebug,
		"info":  slog.LevelInfo,
		"warn":  slog.LevelWarn,
		"error": slog.LevelError,
		"":      slog.LevelInfo,
	} {
		c := &Config{Log: Log{Level: level}}
		if got := c.SlogLevel(); got != want {
			t.Errorf("SlogLevel() with level %q = %v, want %v", level, got, want)
		}
	}
}

// TestPackagedConfigLoads keeps the configuration shipped in the package
// valid: it must load with only PGPASSWORD set.
func TestPackagedConfigLoads(t *testing.T) {
	t.Setenv("PGPASSWORD", "secret")
	cfg, err := Load("../../packaging/lakeside.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != "/var/lib/lakeside" || len(cfg.Source.Tables) == 0 || cfg.Source.Snapshot != SnapshotInitial {
		t.Fatalf("packaged config loaded as %+v", cfg)
	}
}

// withSectionDefaults fills the delta and http sections of an expected
// configuration that leaves them out with their defaults.
func withSectionDefaults(c Config) Config {
	if c.Source.BackfillChunkRows == 0 {
		c.Source.BackfillChunkRows = DefaultBackfillChunkRows
	}
	if c.Delta == (Delta{}) {
		c.Delta = Delta{DeletionVectors: true, TablesDir: filepath.Join(c.StateDir, "tables"), FlushInterval: DefaultFlushInterval,
			FlushChanges: DefaultFlushChanges, TargetFileRows: DefaultTargetFileRows, RowGroupRows: DefaultRowGroupRows,
			VacuumRetention: DefaultVacuumRetention, VacuumInterval: DefaultVacuumInterval, Compaction: true, TargetFileSize: DefaultTargetFileSize, CompactInterval: DefaultCompactInterval, CompactMinFiles: DefaultCompactMinFiles, CompactBytesPerSecond: DefaultCompactBytesPerSecond}
	}
	if reflect.DeepEqual(c.HTTP, HTTP{}) {
		c.HTTP = HTTP{Listen: DefaultHTTPListen, MaxClients: DefaultMaxClients}
	}
	return c
}

func TestCutValue(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "",
		"short":                       "short",
		strings.Repeat("a", 64):       strings.Repeat("a", 64),
		strings.Repeat("a", 65):       strings.Repeat("a", 64) + "…",
		strings.Repeat("a", 63) + "é": strings.Repeat("a", 63) + "…",
		strings.Repeat("é", 40):       strings.Repeat("é", 32) + "…",
	} {
		if got := cutValue(in); got != want {
			t.Errorf("cutValue(%q) = %q, want %q", in, got, want)
		}
	}
}
