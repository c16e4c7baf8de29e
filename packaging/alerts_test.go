package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// runbookDoc is the README the alerts' runbook annotations point into, as
// the package installs it.
const runbookDoc = readmePath

// alertRule is an alerting rule of prometheus/lakeside-alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// TestAlertRules checks the alerting rules the package installs with
// promtool (`promtool check rules`, then `promtool test rules` with the
// recorded series of prometheus/lakeside-alerts_test.yml), and that every
// alert has a severity, a summary, a description, a test group and a
// runbook: a section of the README of the alert's name. It needs the
// promtool that `make deps` installs.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run `make deps` (it installs the Debian package prometheus)")
	}
	dir := "prometheus"
	for _, args := range [][]string{
		{"check", "rules", "lakeside-alerts.yml"},
		{"test", "rules", "lakeside-alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	var rules struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(dir, "lakeside-alerts.yml"))), &rules); err != nil {
		t.Fatalf("lakeside-alerts.yml: %v", err)
	}
	var tests struct {
		Tests []struct {
			Name string `yaml:"name"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(dir, "lakeside-alerts_test.yml"))), &tests); err != nil {
		t.Fatalf("lakeside-alerts_test.yml: %v", err)
	}
	tested := map[string]bool{}
	for _, tc := range tests.Tests {
		tested[tc.Name] = true
	}
	anchors := headingAnchors(readFile(t, "../README.md"))
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, key := range []string{"summary", "description", "runbook"} {
				if r.Annotations[key] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, key)
				}
			}
			if want := runbookDoc + "#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("%s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: README.md has no section %s (its runbook)", r.Alert, r.Alert)
			}
			if !tested[r.Alert] {
				t.Errorf("%s: lakeside-alerts_test.yml has no test named after it", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("lakeside-alerts.yml has no alert")
	}
}

// headingAnchors returns the anchors a Markdown renderer gives the
// headings of a document: lower case, spaces as hyphens, punctuation
// other than hyphens and underscores left out.
func headingAnchors(text string) map[string]bool {
	heading := regexp.MustCompile(`^#{1,6} +(.*?) *$`)
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if m := heading.FindStringSubmatch(line); m != nil && !fence {
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")] = true
		}
	}
	return anchors
}

// TestAlertRulesPackaged checks, without building the packages, that
// nfpm.yaml installs the tested rules where packaged() (and so
// TestPackages) expects them, in both packages.
func TestAlertRulesPackaged(t *testing.T) {
	var nfpm struct {
		Contents []struct {
			Src, Dst, Packager string
		} `yaml:"contents"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, "nfpm.yaml")), &nfpm); err != nil {
		t.Fatalf("nfpm.yaml: %v", err)
	}
	i := slices.IndexFunc(packaged(), func(e entry) bool { return e.path == alertsPath })
	if i < 0 {
		t.Fatalf("packaged() does not list %s", alertsPath)
	}
	want := packaged()[i].src
	var found bool
	for _, c := range nfpm.Contents {
		if c.Dst == alertsPath {
			found = true
			if c.Src != want || c.Packager != "" {
				t.Errorf("nfpm.yaml installs %s from %q for packager %q, want from %q for both", alertsPath, c.Src, c.Packager, want)
			}
		}
	}
	if !found {
		t.Errorf("nfpm.yaml does not install %s", alertsPath)
	}
	if _, err := os.Stat(filepath.Join("..", want)); err != nil {
		t.Error(err)
	}
}
