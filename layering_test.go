package lakeside_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/lakeside/lakeside/"

// layers says which of the module's packages each package may import, by
// path prefix: imports point down the data flow (cmd → agent → store,
// delta, uploader), the stages of agent do not import one another (agent
// wires them) but share the type table, and delta and store import nothing
// of the module; nor do internal/backoff, below every stage that retries,
// and internal/tuning, the names of the performance tricks' off switches,
// which the command, the agent and the stages with such a trick share.
// The configuration, agent/config, sits between agent and the
// stages: it imports those whose types, defaults and checks make up its
// schema (source's table names, live's listen check, uploader's replica
// section, delta's row group size), never agent, and no stage imports it.
// Inside capture, the stream imports the backfill, which talks to it
// through interfaces of its own (backfill.Stream), never the reverse.
// Inside delta, the protocol imports its Parquet engine and both
// import the data types, never the reverse. The longest matching prefix
// applies.
var layers = map[string][]string{
	"cmd/":                    {"agent", "agent/config", "store", "delta", "uploader", "internal/pgcluster", "internal/tuning"},
	"agent":                   {"agent/", "store", "delta", "uploader", "internal/tuning"},
	"agent/config":            {"agent/internal/source", "agent/internal/live", "uploader", "delta"},
	"agent/internal/source":   {"agent/internal/source/backfill", "agent/internal/typemap", "store", "internal/backoff", "internal/tuning"},
	"agent/internal/applier":  {"agent/internal/typemap", "store", "delta", "internal/backoff", "internal/tuning"},
	"agent/internal/live":     {"agent/internal/live/", "agent/internal/typemap", "store", "delta"},
	"agent/internal/typemap":  {"store", "delta"},
	"internal/backoff":        {},
	"internal/tuning":         {},
	"internal/pgcluster":      {},
	"internal/pgtest":         {"internal/pgcluster"},
	"internal/s3test":         {},
	"internal/faultnet":       {},
	"internal/deltatest":      {"delta"},
	"uploader":                {"uploader/", "store", "delta", "internal/backoff"},
	"uploader/fleet":          {"delta", "internal/backoff"},
	"delta":                   {"delta/internal/parquet", "delta/internal/types"},
	"delta/internal/parquet":  {"delta/internal/types"},
	"delta/internal/types":    {},
	"delta/internal/rowstest": {"delta/internal/types"},
	"store":                   {},
	"packaging":               {},
	// Capture's backfill, below its stream.
	"agent/internal/source/backfill": {"agent/internal/typemap", "store", "internal/backoff", "internal/tuning"},
}

// testHelpers are packages for tests only: no other code imports them.
var testHelpers = []string{"internal/pgtest", "internal/s3test", "internal/deltatest", "internal/faultnet", "delta/internal/rowstest"}

// TestImportLayering checks every package's imports (test files aside)
// against layers.
func TestImportLayering(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); dir != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "dist") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(dir, 0)
		if _, none := err.(*build.NoGoError); none {
			return nil
		} else if err != nil {
			return err
		}
		if len(pkg.GoFiles) == 0 {
			return nil // tests only, as this one
		}
		path := filepath.ToSlash(dir)
		allowed, ok := rule(path)
		if !ok {
			t.Errorf("package %s has no rule in layers", path)
			return nil
		}
		checked++
		for _, imp := range pkg.Imports {
			own, found := strings.CutPrefix(imp, module)
			if !found {
				continue
			}
			if slices.Contains(testHelpers, own) && !slices.Contains(testHelpers, path) {
				t.Errorf("%s imports %s, which is for tests only", path, own)
			}
			if !slices.ContainsFunc(allowed, func(p string) bool {
				return own == strings.TrimSuffix(p, "/") || strings.HasPrefix(own, p) || strings.HasPrefix(own, p+"/")
			}) {
				t.Errorf("%s imports %s; it may import only %v", path, own, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d packages: the walk missed the module", checked)
	}
}

// rule returns the layer rule of the package at path: that of its longest
// matching prefix.
func rule(path string) ([]string, bool) {
	best, found := "", false
	for prefix := range layers {
		match := path == strings.TrimSuffix(prefix, "/") || strings.HasPrefix(path, strings.TrimSuffix(prefix, "/")+"/")
		if match && len(prefix) > len(best) {
			best, found = prefix, true
		}
	}
	return layers[best], found
}
