package config

import (
	"bytes"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fuzzErrorPattern is the form of every Parse error: the name, the line
// and the problem.
var fuzzErrorPattern = regexp.MustCompile(`^lakeside\.yaml:(\d+): \S`)

// FuzzParse parses arbitrary bytes as a configuration file. Parse must
// never panic; it returns a configuration or an error, never both or
// neither. An error is one line of the form "<name>:<line>: <problem>",
// its line one of the input's, no longer than the good and bad fixtures'
// errors may be (maxErrorBytes). A configuration it accepts has what
// validation guarantees (a DSN, a table, clean directories), and parsing
// the same bytes again gives the same configuration. The seeds
// (testdata/fuzz/FuzzParse) are the files of testdata and edge cases:
// anchors and aliases, flow style, tabs, BOMs, documents, deep nesting,
// ${VAR} references.
func FuzzParse(f *testing.F) {
	// The variables of env.good.yml, as TestLoadGood sets them.
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
		f.Setenv(k, v)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("lakeside.yaml", data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want a configuration or an error", c, err)
		}
		if err != nil {
			checkFuzzError(t, data, err.Error())
			return
		}
		if c.Source.DSN == "" || len(c.Source.Tables) == 0 || c.StateDir == "" || c.Delta.TablesDir == "" {
			t.Fatalf("accepted a configuration without a DSN, tables or directories: %+v", c)
		}
		for _, tn := range c.Source.Tables {
			if tn.Schema == "" || tn.Name == "" {
				t.Fatalf("accepted table name %+v", tn)
			}
		}
		again, err := Parse("lakeside.yaml", data)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("parsing again gave %+v, %v; want %+v", again, err, c)
		}
		if d := Diff(c, again); len(d) != 0 {
			t.Fatalf("Diff of a configuration and its reparse: %v", d)
		}
	})
}

// yamlLines returns the number of lines of data as an editor shows them:
// one more than its line breaks, which are YAML's ("\r\n", "\r", "\n"
// and the Unicode NEL, LS and PS), unless it ends with one.
func yamlLines(data []byte) int {
	breaks := regexp.MustCompile("\r\n|\r|\n|\u0085|\u2028|\u2029")
	n := len(breaks.FindAllIndex(data, -1))
	if len(data) > 0 && !breaks.Match(data[len(data)-1:]) && !bytes.HasSuffix(data, []byte("\u0085")) &&
		!bytes.HasSuffix(data, []byte("\u2028")) && !bytes.HasSuffix(data, []byte("\u2029")) {
		n++
	}
	return n
}

// checkFuzzError checks the form of an error Parse returned for data.
func checkFuzzError(t *testing.T, data []byte, msg string) {
	t.Helper()
	m := fuzzErrorPattern.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("error %q is not of the form lakeside.yaml:<line>: <problem>", msg)
	}
	line, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatalf("error %q: line %q: %v", msg, m[1], err)
	}
	if lines := max(yamlLines(data), 1); line < 1 || line > lines {
		t.Fatalf("error %q names line %d of an input of %d lines", msg, line, lines)
	}
	if strings.ContainsAny(msg, "\r\n") {
		t.Fatalf("error %q has more than one line", msg)
	}
	if len(msg) > maxErrorBytes {
		t.Fatalf("error is %d bytes long, more than %d: %.300s", len(msg), maxErrorBytes, msg)
	}
}
