package delta

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/lakeside/lakeside/delta/internal/rowstest"
	"github.com/lakeside/lakeside/delta/internal/types"
)

// refDir holds the reference tables written by Spark, the Delta project's
// generators and delta-kernel-rs (see its README.md for sources and
// licences).
const refDir = "../testdata/delta-reference"

func requireRef(t *testing.T, sub string) string {
	t.Helper()
	p := filepath.Join(refDir, sub)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("reference tables missing at %s: %v", p, err)
	}
	return p
}

func subdirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

func TestConformanceDAT(t *testing.T) {
	ctx := context.Background()
	root := requireRef(t, "dat")
	for _, name := range subdirs(t, root) {
		t.Run(name, func(t *testing.T) {
			caseDir := filepath.Join(root, name)
			tbl, err := Open(ctx, filepath.Join(caseDir, "delta"))
			if err != nil {
				t.Fatal(err)
			}
			for _, exp := range subdirs(t, filepath.Join(caseDir, "expected")) {
				expDir := filepath.Join(caseDir, "expected", exp)
				var meta struct {
					Version          int64 `json:"version"`
					MinReaderVersion int   `json:"min_reader_version"`
					MinWriterVersion int   `json:"min_writer_version"`
				}
				data, err := os.ReadFile(filepath.Join(expDir, "table_version_metadata.json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(data, &meta); err != nil {
					t.Fatal(err)
				}
				snap, err := tbl.SnapshotAt(ctx, meta.Version)
				if err != nil {
					t.Fatalf("%s: snapshot %d: %v", exp, meta.Version, err)
				}
				if p := snap.Protocol(); p.MinReaderVersion != meta.MinReaderVersion || p.MinWriterVersion != meta.MinWriterVersion {
					t.Errorf("%s: protocol %d/%d, want %d/%d", exp, p.MinReaderVersion, p.MinWriterVersion, meta.MinReaderVersion, meta.MinWriterVersion)
				}
				got, err := snap.ReadRows(ctx)
				if err != nil {
					t.Fatalf("%s: read: %v", exp, err)
				}
				files, _ := filepath.Glob(filepath.Join(expDir, "table_content.parquet", "*.parquet"))
				var want []Row
				for _, f := range files {
					rows, err := ReadParquetFile(ctx, f, snap.Schema())
					if err != nil {
						t.Fatalf("%s: expected rows: %v", exp, err)
					}
					want = append(want, rows...)
				}
				rowstest.AssertSameRows(t, name+"/"+exp, got, want)
			}
		})
	}
}

func TestConformanceAppTxn(t *testing.T) {
	ctx := context.Background()
	root := requireRef(t, "kernel")
	for _, name := range []string{"app-txn-checkpoint", "app-txn-no-checkpoint"} {
		tbl, err := Open(ctx, filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		s, err := tbl.Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v, ok := s.AppTransactionVersion("my-app"); !ok || v != 3 {
			t.Errorf("%s: my-app = %d %v, want 3", name, v, ok)
		}
		if v, ok := s.AppTransactionVersion("my-app2"); !ok || v != 2 {
			t.Errorf("%s: my-app2 = %d %v, want 2", name, v, ok)
		}
		if _, ok := s.AppTransactionVersion("nope"); ok {
			t.Errorf("%s: unknown app found", name)
		}
		s0, err := tbl.SnapshotAt(ctx, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "app-txn-no-checkpoint" {
			if v, ok := s0.AppTransactionVersion("my-app"); !ok || v != 1 {
				t.Errorf("%s v0: my-app = %d %v, want 1", name, v, ok)
			}
		}
		if _, err := s.ReadRows(ctx); err != nil {
			t.Errorf("%s: read rows: %v", name, err)
		}
	}
	// With a retention of one day, every txn with a lastUpdated is expired;
	// the one without lastUpdated never expires.
	tbl, err := Open(ctx, filepath.Join(root, "app-txn-with-last-updated"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tbl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Transactions()); n != 4 {
		t.Errorf("app-txn-with-last-updated: %d txns, want 4", n)
	}
	if v, ok := s.AppTransactionVersion("new_app_0"); !ok || v != 1 {
		t.Errorf("new_app_0 = %d %v", v, ok)
	}
	for _, app := range []string{"new_app_1", "new_app_2", "old_app"} {
		if _, ok := s.AppTransactionVersion(app); ok {
			t.Errorf("%s: expired txn visible", app)
		}
	}
}

// footerRows returns the number of rows of the snapshot's logical files
// according to their data files' Parquet footers, less the rows their
// deletion vectors delete.
func footerRows(t *testing.T, s *Snapshot) int64 {
	t.Helper()
	var n int64
	for _, a := range s.Files() {
		p, err := ResolvePath(s.table.root, a.Path)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := file.OpenParquetFile(p, false)
		if err != nil {
			t.Fatal(err)
		}
		n += pr.NumRows()
		pr.Close()
		if a.DeletionVector != nil {
			n -= a.DeletionVector.Cardinality
		}
	}
	return n
}

// oracleFiles replays the JSON commits 0..version with a deliberately naive
// reading of the log and returns the decoded paths of the live files. A
// logical file is its path and the JSON text of its deletionVector; a
// commit's removes go before its adds, their order in a commit being no
// part of the protocol.
func oracleFiles(t *testing.T, logDir string, version int64) []string {
	t.Helper()
	type logical struct{ path, dv string }
	live := map[logical]bool{}
	for v := int64(0); v <= version; v++ {
		f, err := os.Open(filepath.Join(logDir, CommitFileName(v)))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var adds, removes []logical
		for sc.Scan() {
			var line map[string]map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			for kind, body := range line {
				var p string
				_ = json.Unmarshal(body["path"], &p)
				dp, err := url.PathUnescape(p)
				if err != nil {
					dp = p
				}
				var dv map[string]any // compared as re-encoded JSON: key order aside
				_ = json.Unmarshal(body["deletionVector"], &dv)
				enc, _ := json.Marshal(dv)
				switch kind {
				case "add":
					adds = append(adds, logical{dp, string(enc)})
				case "remove":
					removes = append(removes, logical{dp, string(enc)})
				}
			}
		}
		f.Close()
		for _, l := range removes {
			delete(live, l)
		}
		for _, l := range adds {
			live[l] = true
		}
	}
	var out []string
	for l := range live {
		out = append(out, l.path)
	}
	sort.Strings(out)
	return out
}

func snapshotFiles(s *Snapshot) []string {
	var out []string
	for _, a := range s.Files() {
		out = append(out, fileKey(a.Path))
	}
	sort.Strings(out)
	return out
}

func TestConformanceGolden(t *testing.T) {
	ctx := context.Background()
	root := requireRef(t, "golden")
	refused := map[string]error{
		"deltalog-invalid-protocol-version": ErrUnsupportedFeature,
		"versions-not-contiguous":           ErrCorruptLog,
	}
	metadataOnly := map[string]bool{ // fake or vacuumed data files
		"checkpoint":                    true,
		"corrupted-last-checkpoint":     true,
		"log-replay-special-characters": true,
		"snapshot-vacuumed":             true,
	}
	for _, name := range subdirs(t, root) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			tbl, err := Open(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			latest, err := tbl.Snapshot(ctx)
			if want, ok := refused[name]; ok {
				if !errors.Is(err, want) {
					t.Fatalf("latest snapshot: %v, want %v", err, want)
				}
				t.Logf("refused as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("latest snapshot: %v", err)
			}
			l, err := listLog(ctx, tbl.logDir)
			if err != nil {
				t.Fatal(err)
			}
			for v := int64(0); v <= latest.Version(); v++ {
				if _, ok := l.commits[v]; !ok {
					continue
				}
				s, err := tbl.SnapshotAt(ctx, v)
				if err != nil {
					t.Fatalf("snapshot %d: %v", v, err)
				}
				if _, ok := l.commits[0]; ok {
					if got, want := snapshotFiles(s), oracleFiles(t, tbl.logDir, v); strings.Join(got, "\n") != strings.Join(want, "\n") {
						t.Errorf("v%d files:\n got %v\nwant %v", v, got, want)
					}
				}
				ts, err := tbl.CommitTimestamp(ctx, v)
				if err != nil {
					t.Fatal(err)
				}
				if byTS, err := tbl.SnapshotAsOf(ctx, ts); err != nil || byTS.Version() < v {
					t.Errorf("as of %s: %v (want >= v%d)", ts, err, v)
				}
				if metadataOnly[name] {
					continue
				}
				rows, err := s.ReadRows(ctx)
				if err != nil {
					t.Fatalf("read v%d: %v", v, err)
				}
				if want := footerRows(t, s); int64(len(rows)) != want {
					t.Errorf("v%d: %d rows, footers say %d", v, len(rows), want)
				}
			}
			if t0, err := tbl.CommitTimestamp(ctx, 0); err == nil {
				if _, err := tbl.SnapshotAsOf(ctx, t0.Add(-time.Millisecond)); !errors.Is(err, ErrVersionNotFound) {
					t.Errorf("as of before v0: %v", err)
				}
			}
		})
	}
}

func TestConformanceGoldenSpecifics(t *testing.T) {
	ctx := context.Background()
	root := requireRef(t, "golden")
	open := func(name string) *Table {
		tbl, err := Open(ctx, filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}

	// Checkpoint + later commits equals a full replay of the JSON commits.
	for _, name := range []string{"checkpoint", "corrupted-last-checkpoint", "basic-with-inserts-deletes-checkpoint"} {
		withCP, err := open(name).Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plain := t.TempDir()
		copyTree(t, filepath.Join(root, name), plain)
		matches, _ := filepath.Glob(filepath.Join(plain, LogDirName, "*.checkpoint.parquet"))
		for _, m := range matches {
			os.Remove(m)
		}
		os.Remove(filepath.Join(plain, LogDirName, LastCheckpointName))
		full, err := New(plain).Snapshot(ctx)
		if err != nil {
			t.Fatalf("%s without checkpoint: %v", name, err)
		}
		if got, want := snapshotFiles(withCP), snapshotFiles(full); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: checkpoint replay %v, full replay %v", name, got, want)
		}
		if withCP.Metadata().SchemaString != full.Metadata().SchemaString {
			t.Errorf("%s: schema differs", name)
		}
	}

	// Vacuumed: metadata of old versions is fine, their data is gone.
	vac := open("snapshot-vacuumed")
	latest, err := vac.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := latest.ReadRows(ctx); err != nil {
		t.Errorf("snapshot-vacuumed latest: %v", err)
	}
	s0, err := vac.SnapshotAt(ctx, 0)
	if err != nil {
		t.Fatalf("snapshot-vacuumed v0 metadata: %v", err)
	}
	if _, err := s0.ReadRows(ctx); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("snapshot-vacuumed v0 data: %v, want a missing file error", err)
	}

	// Paths are URI-encoded in the log.
	sc := open("log-replay-special-characters")
	s0, err = sc.SnapshotAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if files := snapshotFiles(s0); len(files) != 1 || files[0] != "special p@#h" {
		t.Errorf("special characters v0: %v", files)
	}
	if s1, err := sc.SnapshotAt(ctx, 1); err != nil || s1.NumFiles() != 0 {
		t.Errorf("special characters v1: %v", err)
	}

	// Versions not contiguous: version 0 alone is readable.
	if _, err := open("versions-not-contiguous").SnapshotAt(ctx, 0); err != nil {
		t.Errorf("versions-not-contiguous v0: %v", err)
	}

	// Partition values of every type come back typed.
	pv := open("data-reader-partition-values")
	s, err := pv.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.ReadRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sch := s.Schema()
	nulls := 0
	for _, r := range rows {
		_, i := sch.Field("as_int")
		if r[i] == nil {
			nulls++
			continue
		}
		for _, col := range []string{"as_int", "as_long", "as_byte", "as_short", "as_boolean", "as_float", "as_double",
			"as_string", "as_date", "as_timestamp", "as_big_decimal"} {
			f, i := sch.Field(col)
			if _, err := types.Normalize(f.Type, r[i]); err != nil || r[i] == nil {
				t.Errorf("%s = %#v (%v)", col, r[i], err)
			}
		}
		_, i = sch.Field("as_timestamp")
		if ts := r[i].(time.Time); ts.Format("2006-01-02 15:04:05") != "2021-09-08 11:11:11" {
			t.Errorf("as_timestamp = %s", ts)
		}
	}
	if nulls != 1 || len(rows) != 3 {
		t.Errorf("%d rows, %d null partitions", len(rows), nulls)
	}

	// Time travel across a schema change sees the old schema.
	sc2 := open("time-travel-schema-changes-b")
	a, err := sc2.SnapshotAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sc2.SnapshotAt(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Schema().Fields) >= len(b.Schema().Fields) {
		t.Errorf("schema did not grow: %s -> %s", a.Schema(), b.Schema())
	}
}

func TestConformanceKernel(t *testing.T) {
	ctx := context.Background()
	root := requireRef(t, "kernel")
	metadataOnly := map[string]bool{ // the data files are not part of the copy
		"table-with-cdf":                     true,
		"app-txn-with-last-updated":          true,
		"with_checkpoint_no_last_checkpoint": true,
	}
	for _, name := range subdirs(t, root) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			if _, err := os.Stat(filepath.Join(dir, LogDirName)); err != nil {
				dir = filepath.Join(dir, "delta")
			}
			tbl, err := Open(ctx, dir)
			if err != nil {
				t.Fatal(err)
			}
			s, err := tbl.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if metadataOnly[name] {
				return
			}
			rows, err := s.ReadRows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := footerRows(t, s); int64(len(rows)) != want {
				t.Errorf("%d rows, footers say %d", len(rows), want)
			}
			var statRows int64
			withStats := true
			for _, a := range s.Files() {
				if a.Stats == "" {
					withStats = false
					break
				}
				st, err := ParseStats(a.Stats)
				if err != nil {
					t.Fatal(err)
				}
				statRows += st.NumRecords
				if a.DeletionVector != nil {
					statRows -= a.DeletionVector.Cardinality
				}
			}
			if withStats && statRows != int64(len(rows)) {
				t.Errorf("%d rows, stats say %d", len(rows), statRows)
			}
		})
	}
}
