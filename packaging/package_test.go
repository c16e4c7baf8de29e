package packaging

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakeside/lakeside/agent/config"
)

// Paths the package installs or creates.
const (
	binPath      = "/usr/bin/lakeside"
	unitPath     = "/usr/lib/systemd/system/lakeside.service"
	sysusersPath = "/usr/lib/sysusers.d/lakeside.conf"
	configDir    = "/etc/lakeside"
	configPath   = "/etc/lakeside/lakeside.yaml"
	licensePath  = "/usr/share/doc/lakeside/LICENSE"
	readmePath   = "/usr/share/doc/lakeside/README.md"
	shareDir     = "/usr/share/lakeside"
	alertsDir    = "/usr/share/lakeside/prometheus"
	alertsPath   = "/usr/share/lakeside/prometheus/lakeside-alerts.yml"
	stateDir     = "/var/lib/lakeside"
)

// maxExposure is the highest overall exposure level that
// `systemd-analyze security` may give the unit (lower is safer).
const maxExposure = 2.0

// guard is the test every maintainer script makes before calling systemctl.
const guard = "if [ -d /run/systemd/system ]; then"

// entry is a file or directory in the packages.
type entry struct {
	path         string
	mode         fs.FileMode // permission bits
	owner, group string
	dir          bool
	// src is the repository file it is a copy of, or empty when the test
	// does not compare contents.
	src string
}

// packaged returns what both packages contain.
func packaged() []entry {
	return []entry{
		{path: binPath, mode: 0o755, owner: "root", group: "root"},
		{path: unitPath, mode: 0o644, owner: "root", group: "root", src: "systemd/lakeside.service"},
		{path: sysusersPath, mode: 0o644, owner: "root", group: "root", src: "packaging/sysusers.conf"},
		{path: configDir, mode: 0o755, owner: "root", group: "root", dir: true},
		{path: configPath, mode: 0o640, owner: "root", group: "lakeside", src: "packaging/lakeside.yaml"},
		{path: licensePath, mode: 0o644, owner: "root", group: "root", src: "LICENSE"},
		{path: readmePath, mode: 0o644, owner: "root", group: "root"},
		{path: shareDir, mode: 0o755, owner: "root", group: "root", dir: true},
		{path: alertsDir, mode: 0o755, owner: "root", group: "root", dir: true},
		{path: alertsPath, mode: 0o644, owner: "root", group: "root", src: "packaging/prometheus/lakeside-alerts.yml"},
	}
}

// harness runs the commands of the package test. Maintainer scripts run
// with a fake systemctl first in PATH that records its arguments, so the
// test sees every systemctl call the scripts make.
type harness struct {
	root       string // the repository
	env        []string
	systemctl  string // the log of the fake systemctl
	packageDir string // packaging/scripts
}

// TestPackages builds the .deb and .rpm packages for amd64 and arm64 with
// `make package`, installs the amd64 .deb on this machine, checks what it
// installed, upgrades it to a rebuilt package, removes and purges it, and
// queries the .rpm packages. It needs root and what `make deps` installs.
func TestPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs the packages: not a short test")
	}
	h := newHarness(t)
	h.requirePrerequisites(t)
	h.restoreMachine(t)

	version := h.version(t)
	dist := t.TempDir()
	start := time.Now()
	h.run(t, "make", "-C", h.root, "package", "VERSION="+version, "DIST="+dist)
	t.Logf("make package %s: %s", version, time.Since(start).Round(time.Second))
	deb := filepath.Join(dist, "lakeside_"+version+"_amd64.deb")

	ok := t.Run("binaries", func(t *testing.T) {
		checkBinary(t, filepath.Join(dist, "linux_amd64", "lakeside"), elf.EM_X86_64)
		checkBinary(t, filepath.Join(dist, "linux_arm64", "lakeside"), elf.EM_AARCH64)
	})
	ok = t.Run("scripts", func(t *testing.T) { h.checkScripts(t) }) && ok
	ok = t.Run("deb contents", func(t *testing.T) {
		for _, arch := range []string{"amd64", "arm64"} {
			h.checkDebContents(t, filepath.Join(dist, "lakeside_"+version+"_"+arch+".deb"), version, arch)
		}
	}) && ok
	ok = t.Run("rpm", func(t *testing.T) {
		for _, arch := range []string{"x86_64", "aarch64"} {
			h.checkRPM(t, filepath.Join(dist, "lakeside-"+version+"."+arch+".rpm"), version, arch)
		}
	}) && ok
	if !ok {
		t.FailNow()
	}

	if !t.Run("install", func(t *testing.T) { h.checkInstall(t, deb, version) }) {
		t.FailNow()
	}
	if !t.Run("idempotent scripts", func(t *testing.T) { h.checkIdempotent(t, deb, version) }) {
		t.FailNow()
	}
	if !t.Run("systemctl when systemd runs", func(t *testing.T) { h.checkSystemctlCalls(t, version) }) {
		t.FailNow()
	}
	if !t.Run("upgrade", func(t *testing.T) { h.checkUpgrade(t, version) }) {
		t.FailNow()
	}
	t.Run("remove and purge", func(t *testing.T) { h.checkRemoveAndPurge(t) })
}

// newHarness prepares the fake systemctl and the environment of the
// commands the test runs.
func newHarness(t *testing.T) *harness {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	fakeBin := t.TempDir()
	h := &harness{
		root:       root,
		systemctl:  filepath.Join(fakeBin, "systemctl.log"),
		packageDir: filepath.Join(root, "packaging", "scripts"),
	}
	fake := "#!/bin/sh\necho \"$*\" >>" + h.systemctl + "\n"
	if err := os.WriteFile(filepath.Join(fakeBin, "systemctl"), []byte(fake), 0o755); err != nil {
		t.Fatalf("fake systemctl: %v", err)
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "LC_ALL", "VERSION", "DIST", "PACKAGE_ARCHS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOOS", "GOARCH":
			continue
		}
		h.env = append(h.env, kv)
	}
	h.env = append(h.env, "LC_ALL=C",
		"PATH="+fakeBin+":"+os.Getenv("PATH")+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	return h
}

// requirePrerequisites fails the test, with what to do, when it cannot
// run here.
func (h *harness) requirePrerequisites(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the package test installs the .deb with dpkg: run it as root")
	}
	for _, tool := range []struct{ name, from string }{
		{"dpkg", "dpkg"}, {"dpkg-deb", "dpkg"}, {"dpkg-query", "dpkg"},
		{"rpm", "rpm"}, {"systemd-analyze", "systemd"}, {"make", "make"},
		{"unshare", "util-linux"}, {"getent", "libc-bin"}, {"userdel", "passwd"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			t.Fatalf("%s not found: run `make deps` (it installs the Debian package %s)", tool.name, tool.from)
		}
	}
	if _, err := os.Stat(filepath.Join(h.root, "bin", "nfpm")); err != nil {
		t.Fatalf("bin/nfpm not found: run `make deps` (it builds nfpm into bin/): %v", err)
	}
	if _, err := os.Stat("/bin/kill"); err != nil {
		t.Fatal("/bin/kill not found: the package depends on procps; run `make deps`")
	}
	if status, err := h.output("dpkg-query", "-W", "-f=${Status}", "lakeside"); err == nil && status != "" {
		t.Fatalf("a lakeside package is on this machine (%s); the test installs and purges it: remove it first with dpkg -P lakeside", status)
	}
	for _, dir := range []string{stateDir, configDir} {
		if _, err := os.Lstat(dir); err == nil {
			t.Fatalf("%s exists but no lakeside package is installed; the test would delete it: move it away first", dir)
		}
	}
}

// restoreMachine purges the package when the test ends, and deletes the
// lakeside user and group if the test created them (the package itself
// keeps them, as is customary for system users).
func (h *harness) restoreMachine(t *testing.T) {
	_, userErr := user.Lookup("lakeside")
	_, groupErr := user.LookupGroup("lakeside")
	t.Cleanup(func() {
		if status, err := h.output("dpkg-query", "-W", "-f=${Status}", "lakeside"); err == nil && status != "" {
			if out, err := h.output("dpkg", "--purge", "lakeside"); err != nil {
				t.Errorf("cleanup: dpkg --purge lakeside: %v\n%s", err, out)
			}
		}
		for _, dir := range []string{stateDir, configDir} {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		if _, err := user.Lookup("lakeside"); userErr != nil && err == nil {
			if out, err := h.output("userdel", "lakeside"); err != nil {
				t.Errorf("cleanup: userdel lakeside: %v\n%s", err, out)
			}
		}
		if _, err := user.LookupGroup("lakeside"); groupErr != nil && err == nil {
			if out, err := h.output("groupdel", "lakeside"); err != nil {
				t.Errorf("cleanup: groupdel lakeside: %v\n%s", err, out)
			}
		}
	})
}

// version returns the version `make` derives from git and checks that
// dpkg and rpm accept it.
func (h *harness) version(t *testing.T) string {
	t.Helper()
	version := h.run(t, "make", "-s", "--no-print-directory", "-C", h.root, "version")
	if !regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`).MatchString(version) {
		t.Fatalf("make version: %q is not a version both dpkg and rpm accept (a digit first, then letters, digits, '.', '+', '~')", version)
	}
	h.run(t, "dpkg", "--validate-version", version)
	return version
}

// checkBinary checks that the binary at path is a static executable for
// the machine.
func checkBinary(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("binary: %v", err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s is built for %v, want %v", path, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (CGO_ENABLED=0 makes it static)", path)
		}
	}
}

// checkScripts checks the maintainer scripts without running them: they
// parse as POSIX sh, guard every systemctl call, and create the user from
// the same entry as the sysusers.d file.
func (h *harness) checkScripts(t *testing.T) {
	for _, name := range []string{"preinstall.sh", "postinstall.sh", "preremove.sh", "postremove.sh"} {
		path := filepath.Join(h.packageDir, name)
		h.run(t, "sh", "-n", path)
		text := readFile(t, path)
		if !strings.HasPrefix(text, "#!/bin/sh\n") {
			t.Errorf("%s: does not start with #!/bin/sh", name)
		}
		checkGuarded(t, name, text)
	}
	pre := shellFunction(t, readFile(t, filepath.Join(h.packageDir, "preinstall.sh")), "create_user")
	post := shellFunction(t, readFile(t, filepath.Join(h.packageDir, "postinstall.sh")), "create_user")
	if pre != post {
		t.Errorf("create_user differs between preinstall.sh and postinstall.sh:\n%s\n---\n%s", pre, post)
	}
	m := regexp.MustCompile(`--inline \\\n\s*'([^']*)'`).FindStringSubmatch(pre)
	if m == nil {
		t.Fatalf("create_user: no systemd-sysusers --inline entry in:\n%s", pre)
	}
	var conf string
	for _, line := range strings.Split(readFile(t, filepath.Join(h.root, "packaging", "sysusers.conf")), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			conf = line
		}
	}
	if !slices.Equal(strings.Fields(m[1]), strings.Fields(conf)) {
		t.Errorf("create_user's entry %q differs from sysusers.conf's %q", m[1], conf)
	}
	if !strings.Contains(pre, "useradd --system") {
		t.Errorf("create_user has no useradd --system fallback:\n%s", pre)
	}
}

// checkGuarded checks that every systemctl call in a shell script stands
// alone on its line, right under the guard.
func checkGuarded(t *testing.T, name, text string) {
	t.Helper()
	prev := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.Contains(line, "systemctl") && !strings.HasPrefix(line, "#") {
			if !strings.HasPrefix(line, "systemctl ") || prev != guard {
				t.Errorf("%s:%d: systemctl call %q is not right under %q", name, i+1, line, guard)
			}
		}
		prev = line
	}
}

// shellFunction returns the text of the function name in a shell script,
// from its first line to the closing brace at the start of a line.
func shellFunction(t *testing.T, text, name string) string {
	t.Helper()
	start := strings.Index(text, "\n"+name+"() {\n")
	if start < 0 {
		t.Fatalf("no function %s", name)
	}
	end := strings.Index(text[start:], "\n}\n")
	if end < 0 {
		t.Fatalf("function %s does not end", name)
	}
	return text[start+1 : start+end+2]
}

// checkDebContents checks a .deb's metadata and file list without
// installing it.
func (h *harness) checkDebContents(t *testing.T, deb, version, arch string) {
	t.Helper()
	fields := h.run(t, "dpkg-deb", "--showformat=${Package} ${Version} ${Architecture} ${Depends}", "--show", deb)
	if want := "lakeside " + version + " " + arch + " procps"; fields != want {
		t.Errorf("%s: %q, want %q", filepath.Base(deb), fields, want)
	}
	var got []string
	for _, line := range strings.Split(h.run(t, "dpkg-deb", "--contents", deb), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		got = append(got, strings.TrimPrefix(f[5], "."))
	}
	var want []string
	for _, e := range packaged() {
		if !e.dir {
			want = append(want, e.path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s holds files %q, want %q", filepath.Base(deb), got, want)
	}
}

// checkRPM queries an .rpm: name, version and architecture, the file list
// with modes and owners, the configuration files and the scripts.
func (h *harness) checkRPM(t *testing.T, rpm, version, arch string) {
	t.Helper()
	name := filepath.Base(rpm)
	if got := h.run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{ARCH}", rpm); got != "lakeside "+version+" "+arch {
		t.Errorf("%s: %q, want %q", name, got, "lakeside "+version+" "+arch)
	}
	var want []string
	for _, e := range packaged() {
		want = append(want, e.path)
	}
	slices.Sort(want)
	got := strings.Split(h.run(t, "rpm", "-qlp", rpm), "\n")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("rpm -qlp %s: %q, want %q", name, got, want)
	}
	attrs := map[string]string{}
	for _, line := range strings.Split(h.run(t, "rpm", "-qp", "--qf", "[%{FILENAMES} %{FILEMODES:octal} %{FILEUSERNAME} %{FILEGROUPNAME}\n]", rpm), "\n") {
		path, rest, _ := strings.Cut(line, " ")
		attrs[path] = rest
	}
	for _, e := range packaged() {
		typ := "100"
		if e.dir {
			typ = "40"
		}
		if want := fmt.Sprintf("%s%o %s %s", typ, e.mode, e.owner, e.group); attrs[e.path] != want {
			t.Errorf("%s: %s is %q, want %q (mode owner group)", name, e.path, attrs[e.path], want)
		}
	}
	if got := h.run(t, "rpm", "-qp", "--configfiles", rpm); got != configPath {
		t.Errorf("rpm -qp --configfiles %s: %q, want %q", name, got, configPath)
	}
	scripts := h.run(t, "rpm", "-qp", "--scripts", rpm)
	for _, kind := range []string{"preinstall", "postinstall", "preuninstall", "postuninstall"} {
		if !strings.Contains(scripts, kind+" scriptlet (using /bin/sh):") {
			t.Errorf("rpm -qp --scripts %s: no %s scriptlet", name, kind)
		}
	}
	if !strings.Contains(scripts, guard+"\n\t\tsystemctl ") {
		t.Errorf("rpm -qp --scripts %s: no systemctl call under %q", name, guard)
	}
	checkGuarded(t, name, scripts)
}

// checkInstall installs the .deb and checks what it put on the machine.
func (h *harness) checkInstall(t *testing.T, deb, version string) {
	h.run(t, "dpkg", "--install", deb)
	h.checkInstalled(t, version)
	h.checkNoSystemctl(t)

	for _, e := range packaged() {
		if e.src != "" && readFile(t, e.path) != readFile(t, filepath.Join(h.root, e.src)) {
			t.Errorf("%s differs from %s", e.path, e.src)
		}
	}
	for suffix, script := range map[string]string{"preinst": "preinstall.sh", "postinst": "postinstall.sh", "prerm": "preremove.sh", "postrm": "postremove.sh"} {
		if readFile(t, "/var/lib/dpkg/info/lakeside."+suffix) != readFile(t, filepath.Join(h.packageDir, script)) {
			t.Errorf("the installed %s is not packaging/scripts/%s", suffix, script)
		}
	}
	conffiles := h.run(t, "dpkg-query", "-W", "-f=${Conffiles}", "lakeside")
	var paths []string
	for _, line := range strings.Split(conffiles, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			paths = append(paths, f[0])
		}
	}
	if !slices.Equal(paths, []string{configPath}) {
		t.Errorf("conffiles: %q, want only %s", conffiles, configPath)
	}

	u, err := user.Lookup("lakeside")
	if err != nil {
		t.Fatalf("the package did not create the lakeside user: %v", err)
	}
	if uid, _ := strconv.Atoi(u.Uid); uid <= 0 || uid >= 1000 {
		t.Errorf("lakeside has uid %s, want a system uid (1-999)", u.Uid)
	}
	if g, err := user.LookupGroupId(u.Gid); err != nil || g.Name != "lakeside" {
		t.Errorf("lakeside's primary group is %s (%v), want lakeside", u.Gid, err)
	}
	passwd := strings.Split(h.run(t, "getent", "passwd", "lakeside"), ":")
	if len(passwd) != 7 || passwd[5] != stateDir || passwd[6] != "/usr/sbin/nologin" {
		t.Errorf("getent passwd lakeside: %q, want home %s and shell /usr/sbin/nologin", passwd, stateDir)
	}

	if out := h.run(t, "systemd-analyze", "verify", unitPath); out != "" {
		t.Errorf("systemd-analyze verify %s is not silent:\n%s", unitPath, out)
	}
	h.checkUnit(t, unitPath)
}

// TestUnit checks the repository's unit file as TestPackages checks the
// installed one, without building or installing anything: its resource
// limits and its exposure rated by `systemd-analyze security`.
func TestUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze not found: run `make deps` (it installs the Debian package systemd)")
	}
	h := newHarness(t)
	h.checkUnit(t, filepath.Join(h.root, "systemd", "lakeside.service"))
}

// checkUnit checks the unit file at path: its resource limits (see
// checkResourceLimits) and an overall exposure of at most maxExposure.
func (h *harness) checkUnit(t *testing.T, path string) {
	t.Helper()
	checkResourceLimits(t, serviceSettings(t, readFile(t, path)))
	security := h.run(t, "systemd-analyze", "security", "--offline=yes", path)
	m := regexp.MustCompile(`Overall exposure level for lakeside\.service: ([0-9.]+)`).FindStringSubmatch(security)
	if m == nil {
		t.Fatalf("systemd-analyze security: no overall exposure level in:\n%s", security)
	}
	score, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("systemd-analyze security: exposure %q: %v", m[1], err)
	}
	t.Logf("systemd-analyze security --offline=yes: overall exposure %.1f (at most %.1f allowed)", score, maxExposure)
	if score > maxExposure {
		t.Errorf("systemd-analyze security: exposure %.1f > %.1f:\n%s", score, maxExposure, security)
	}
}

// What the agent needs at most with the default settings, which the
// unit's limits must leave room for.
const (
	// goMemoryLimit is the Go runtime's soft memory limit
	// (cmd/lakeside/tuning_gc.go).
	goMemoryLimit = 128 << 20
	// clientQueueBytes is the most one live stream client's send queue
	// holds (agent/internal/live/server.go).
	clientQueueBytes = 16 << 20
	// liveConnections is the most connections the live view keeps open
	// (maxConnections in agent/internal/live/guard.go), each of which may
	// hold a thread in a blocking read.
	liveConnections = 1024
)

// checkResourceLimits checks that the unit limits memory, threads and
// descriptors, with room for what the agent needs: the memory of the Go
// runtime's soft limit and every stream client's full send queue below
// MemoryHigh, MemoryHigh below MemoryMax, more tasks than the live view
// has connections, and a descriptor limit whose quarter (the live view's
// share) allows all of them.
func checkResourceLimits(t *testing.T, settings map[string]string) {
	t.Helper()
	high := unitBytes(t, settings, "MemoryHigh")
	hard := unitBytes(t, settings, "MemoryMax")
	tasks := unitNumber(t, settings, "TasksMax")
	files := unitNumber(t, settings, "LimitNOFILE")
	if t.Failed() {
		return
	}
	if need := int64(goMemoryLimit + config.DefaultMaxClients*clientQueueBytes); high <= need {
		t.Errorf("MemoryHigh is %d bytes, not above the %d the agent may need by default (GOMEMLIMIT and %d full stream queues)", high, need, config.DefaultMaxClients)
	}
	if high >= hard {
		t.Errorf("MemoryHigh (%d bytes) is not below MemoryMax (%d bytes)", high, hard)
	}
	if tasks <= liveConnections {
		t.Errorf("TasksMax is %d, not above the live view's %d connections", tasks, liveConnections)
	}
	if files/4 < liveConnections {
		t.Errorf("LimitNOFILE is %d: a quarter of it is below the live view's %d connections", files, liveConnections)
	}
}

// serviceSettings returns the settings of a unit file's [Service] section;
// a setting given more than once has its last value.
func serviceSettings(t *testing.T, unit string) map[string]string {
	t.Helper()
	settings := map[string]string{}
	section := ""
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("unit: %q is not a setting", line)
			}
			settings[strings.TrimSpace(key)] = strings.TrimSpace(value)
		}
	}
	return settings
}

// unitNumber returns a unit setting that is a plain number; it fails the
// test when the setting is missing or not one ("infinity" included).
func unitNumber(t *testing.T, settings map[string]string, key string) int64 {
	t.Helper()
	v, ok := settings[key]
	if !ok {
		t.Errorf("unit: no %s= in [Service]", key)
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		t.Errorf("unit: %s=%s is not a positive number", key, v)
	}
	return n
}

// unitBytes returns a unit setting that is a size in bytes with systemd's
// optional suffix K, M, G or T (powers of 1024).
func unitBytes(t *testing.T, settings map[string]string, key string) int64 {
	t.Helper()
	v, ok := settings[key]
	if !ok || v == "" {
		t.Errorf("unit: no %s= in [Service]", key)
		return 0
	}
	shift := map[string]int{"K": 10, "M": 20, "G": 30, "T": 40}[v[len(v)-1:]]
	digits := v
	if shift > 0 {
		digits = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 {
		t.Errorf("unit: %s=%s is not a size", key, v)
		return 0
	}
	return n << shift
}

// checkInstalled checks the installed package's files, their modes and
// owners, the state directory and the version the binary prints.
func (h *harness) checkInstalled(t *testing.T, version string) {
	t.Helper()
	if got := h.run(t, "dpkg-query", "-W", "-f=${Status} ${Version}", "lakeside"); got != "install ok installed "+version {
		t.Errorf("dpkg-query: %q, want installed %s", got, version)
	}
	for _, e := range packaged() {
		checkEntry(t, e)
	}
	checkEntry(t, entry{path: stateDir, mode: 0o750, owner: "lakeside", group: "lakeside", dir: true})
	if got := h.run(t, binPath, "version"); got != "lakeside "+version {
		t.Errorf("lakeside version: %q, want %q (the package's version)", got, "lakeside "+version)
	}
}

// checkEntry checks the type, mode and owner of an installed path.
func checkEntry(t *testing.T, e entry) {
	t.Helper()
	fi, err := os.Lstat(e.path)
	if err != nil {
		t.Errorf("installed: %v", err)
		return
	}
	if fi.IsDir() != e.dir || (!e.dir && !fi.Mode().IsRegular()) {
		t.Errorf("%s: is %v", e.path, fi.Mode().Type())
	}
	if fi.Mode().Perm() != e.mode || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		t.Errorf("%s: mode %v, want %v", e.path, fi.Mode(), e.mode)
	}
	st := fi.Sys().(*syscall.Stat_t)
	owner, group := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	if owner != e.owner || group != e.group {
		t.Errorf("%s: owned by %s:%s, want %s:%s", e.path, owner, group, e.owner, e.group)
	}
}

// checkIdempotent runs the maintainer scripts again, as dpkg and rpm would
// on a repeated install or upgrade, twice each, and reinstalls the same
// .deb: none of it may change the machine.
func (h *harness) checkIdempotent(t *testing.T, deb, version string) {
	writeFile(t, filepath.Join(stateDir, "package-test-state"), "state\n")
	before := snapshot(t)
	for _, args := range [][]string{
		{"preinstall.sh", "install"}, {"preinstall.sh", "upgrade", version},
		{"postinstall.sh", "configure", ""}, {"postinstall.sh", "configure", version},
		{"preinstall.sh", "1"}, {"preinstall.sh", "2"},
		{"postinstall.sh", "1"}, {"postinstall.sh", "2"},
	} {
		for range 2 {
			h.run(t, "sh", append([]string{filepath.Join(h.packageDir, args[0])}, args[1:]...)...)
			if after := snapshot(t); after != before {
				t.Fatalf("sh %s changed the machine:\nbefore:\n%s\nafter:\n%s", strings.Join(args, " "), before, after)
			}
		}
	}
	h.run(t, "dpkg", "--install", deb)
	if after := snapshot(t); after != before {
		t.Fatalf("reinstalling the same .deb changed the machine:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	h.checkNoSystemctl(t)
}

// snapshot describes what the maintainer scripts may touch: the lakeside
// user and group, the state and configuration directories, their modes,
// owners and contents.
func snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, file := range []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"} {
		for _, line := range strings.Split(readFile(t, file), "\n") {
			if strings.HasPrefix(line, "lakeside:") || strings.Contains(line, ":lakeside") {
				fmt.Fprintf(&b, "%s: %s\n", file, line)
			}
		}
	}
	for _, root := range []string{stateDir, configDir} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			fmt.Fprintf(&b, "%s %v %d:%d", path, fi.Mode(), st.Uid, st.Gid)
			if fi.Mode().IsRegular() {
				fmt.Fprintf(&b, " %q", readFile(t, path))
			}
			b.WriteString("\n")
			return nil
		})
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	return b.String()
}

// checkSystemctlCalls runs the maintainer scripts as if systemd were the
// init system, in a private mount namespace where /run/systemd/system
// exists, and checks which systemctl calls they make.
func (h *harness) checkSystemctlCalls(t *testing.T, version string) {
	before := snapshot(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"preinstall.sh", "install"}, nil},
		{[]string{"postinstall.sh", "configure", ""}, []string{"daemon-reload"}},
		{[]string{"postinstall.sh", "configure", version}, []string{"daemon-reload", "try-restart lakeside.service"}},
		{[]string{"postinstall.sh", "1"}, []string{"daemon-reload"}},
		{[]string{"postinstall.sh", "2"}, []string{"daemon-reload", "try-restart lakeside.service"}},
		{[]string{"preremove.sh", "upgrade", version}, nil},
		{[]string{"preremove.sh", "1"}, nil},
		{[]string{"preremove.sh", "remove"}, []string{"disable --now lakeside.service"}},
		{[]string{"preremove.sh", "0"}, []string{"disable --now lakeside.service"}},
		{[]string{"postremove.sh", "upgrade", version}, nil},
		{[]string{"postremove.sh", "1"}, nil},
		{[]string{"postremove.sh", "remove"}, []string{"daemon-reload"}},
		{[]string{"postremove.sh", "0"}, []string{"daemon-reload"}},
	} {
		if err := os.Remove(h.systemctl); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		h.runAsUnderSystemd(t, append([]string{filepath.Join(h.packageDir, c.args[0])}, c.args[1:]...))
		if got := h.systemctlCalls(t); !slices.Equal(got, c.want) {
			t.Errorf("%s with systemd running called systemctl %q, want %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	if after := snapshot(t); after != before {
		t.Fatalf("the scripts changed the machine:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := os.Remove(h.systemctl); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// runAsUnderSystemd runs a maintainer script where /run/systemd/system
// exists, as on a machine booted with systemd: in a private mount namespace
// when the kernel allows one, otherwise by creating the directory on this
// machine for the duration of the script (it has no systemd, so nothing else
// reads it).
func (h *harness) runAsUnderSystemd(t *testing.T, script []string) {
	t.Helper()
	if exec.Command("unshare", "--mount", "true").Run() == nil {
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec sh "$@"`, "sh"}, script...)
		h.run(t, "unshare", args...)
		return
	}
	const dir = "/run/systemd/system"
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s exists: this machine runs systemd, and the test would call the real systemctl", dir)
	}
	created := "/run/systemd"
	if _, err := os.Stat(created); err == nil {
		created = dir
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(created)
	h.run(t, "sh", script...)
}

// checkUpgrade edits the installed configuration, rebuilds the package
// with a higher version and installs it: the edit and the state survive.
func (h *harness) checkUpgrade(t *testing.T, version string) {
	next := version + ".1"
	h.run(t, "dpkg", "--compare-versions", next, "gt", version)
	dist := t.TempDir()
	h.run(t, "make", "-C", h.root, "package", "VERSION="+next, "DIST="+dist, "PACKAGE_ARCHS=amd64")

	f, err := os.OpenFile(configPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("# edited by the operator\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	edited := readFile(t, configPath)
	writeFile(t, filepath.Join(stateDir, "package-test-state"), "state before the upgrade\n")

	h.run(t, "dpkg", "--install", filepath.Join(dist, "lakeside_"+next+"_amd64.deb"))
	h.checkInstalled(t, next)
	h.checkNoSystemctl(t)
	if readFile(t, configPath) != edited {
		t.Errorf("the upgrade replaced the edited %s", configPath)
	}
	if got := readFile(t, filepath.Join(stateDir, "package-test-state")); got != "state before the upgrade\n" {
		t.Errorf("the upgrade changed the state: %q", got)
	}
	for _, suffix := range []string{".dpkg-dist", ".dpkg-new", ".dpkg-old"} {
		if _, err := os.Lstat(configPath + suffix); err == nil {
			t.Errorf("the upgrade left %s", configPath+suffix)
		}
	}
}

// checkRemoveAndPurge removes the package (state and configuration stay),
// then purges it (both go, the lakeside user stays).
func (h *harness) checkRemoveAndPurge(t *testing.T) {
	edited := readFile(t, configPath)
	h.run(t, "dpkg", "--remove", "lakeside")
	if got := h.run(t, "dpkg-query", "-W", "-f=${Status}", "lakeside"); got != "deinstall ok config-files" {
		t.Errorf("after dpkg --remove: %q, want deinstall ok config-files", got)
	}
	for _, path := range []string{binPath, unitPath, sysusersPath, licensePath, readmePath, alertsPath, alertsDir, shareDir} {
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("dpkg --remove left %s", path)
		}
	}
	if got := readFile(t, filepath.Join(stateDir, "package-test-state")); got != "state before the upgrade\n" {
		t.Errorf("dpkg --remove changed the state: %q", got)
	}
	if readFile(t, configPath) != edited {
		t.Errorf("dpkg --remove changed %s", configPath)
	}

	h.run(t, "dpkg", "--purge", "lakeside")
	if out, err := h.output("dpkg-query", "-W", "-f=${Status}", "lakeside"); err == nil && out != "" {
		t.Errorf("after dpkg --purge: %q, want no package", out)
	}
	for _, path := range []string{stateDir, configDir} {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("dpkg --purge left %s (%v)", path, err)
		}
	}
	if _, err := user.Lookup("lakeside"); err != nil {
		t.Errorf("dpkg --purge deleted the lakeside user: system users stay: %v", err)
	}
	h.checkNoSystemctl(t)
}

// checkNoSystemctl checks that no maintainer script called systemctl:
// systemd is not the init system where the test runs.
func (h *harness) checkNoSystemctl(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		return
	}
	if calls := h.systemctlCalls(t); len(calls) > 0 {
		t.Errorf("a maintainer script called systemctl %q although systemd does not run", calls)
	}
}

// systemctlCalls returns the argument lists the fake systemctl recorded.
func (h *harness) systemctlCalls(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(h.systemctl)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
}

// run runs a command and returns its output, trimmed; it fails the test
// when the command fails.
func (h *harness) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := h.output(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// output runs a command and returns its combined output, trimmed.
func (h *harness) output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = h.env
	cmd.Dir = h.root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// readFile returns the contents of a file; it fails the test when the file
// cannot be read.
func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// writeFile writes a file with mode 0640; it fails the test when it cannot.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
}

// TestConfigDocumentsEveryKey checks that the packaged configuration
// mentions every key the agent accepts, as a key or a commented-out key,
// under its section, and no key the agent does not accept, so that the
// documentation and the Go types cannot drift apart.
func TestConfigDocumentsEveryKey(t *testing.T) {
	documented := documentedKeys(readFile(t, "lakeside.yaml"))
	known := map[string]bool{}
	for _, key := range configKeys(reflect.TypeFor[config.Config](), "") {
		known[key] = true
		if !documented[key] {
			t.Errorf("lakeside.yaml does not document %s", key)
		}
	}
	for key := range documented {
		if !known[key] {
			t.Errorf("lakeside.yaml documents %s, which the agent does not accept", key)
		}
	}
}

// configKeys returns the YAML key paths of a configuration struct: its
// sections and their keys.
func configKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, prefix+name)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			keys = append(keys, configKeys(f.Type, prefix+name+".")...)
		}
	}
	return keys
}

// documentedKeys returns the key paths written in a commented YAML file:
// lines "key:" and commented-out "# key:", nested by their indentation. A
// commented-out key has at most one word of value, so that prose in a
// comment such as "# initial: copy the rows" is not taken for a key.
func documentedKeys(text string) map[string]bool {
	keyLine := regexp.MustCompile(`^( *)([a-z_]+):( |$)`)
	commentedValue := regexp.MustCompile(`^ *[a-z_]+:( +\S+)? *$`)
	type level struct {
		indent int
		key    string
	}
	var stack []level
	keys := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		body := strings.TrimLeft(line, " ")
		if c, ok := strings.CutPrefix(body, "#"); ok {
			line = line[:len(line)-len(body)] + strings.TrimPrefix(c, " ")
			if !commentedValue.MatchString(line) {
				continue
			}
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		path := m[2]
		if len(stack) > 0 {
			path = stack[len(stack)-1].key + "." + m[2]
		}
		keys[path] = true
		stack = append(stack, level{indent, path})
	}
	return keys
}

// TestVersionFromGit checks the Makefile's rule that turns `git describe`
// into a version dpkg and rpm accept, in a scratch repository: before any
// tag, on a tag, after it, with uncommitted changes, on a pre-release tag,
// and without git. Each version from git must sort after the one before.
func TestVersionFromGit(t *testing.T) {
	for _, tool := range []string{"git", "make", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run `make deps`", tool)
		}
	}
	dir := t.TempDir()
	home := t.TempDir()
	makefile, err := filepath.Abs("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "VERSION" && name != "MAKEFLAGS" && name != "MFLAGS" && name != "MAKELEVEL" && !strings.HasPrefix(name, "GIT_") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() string {
		t.Helper()
		return run("make", "-s", "--no-print-directory", "-f", makefile, "version")
	}

	var versions []string
	check := func(pattern string) {
		t.Helper()
		v := version()
		if !regexp.MustCompile(`^` + pattern + `$`).MatchString(v) {
			t.Errorf("version %q does not match %s", v, pattern)
		}
		run("dpkg", "--validate-version", v)
		if strings.ContainsAny(v, "-:") {
			t.Errorf("version %q has a '-' or ':', which rpm refuses in a version", v)
		}
		if n := len(versions); n > 0 {
			run("dpkg", "--compare-versions", v, "gt", versions[n-1])
		}
		versions = append(versions, v)
	}

	check(`0\.0\.0~unknown`)
	versions = nil // unrelated to the versions from git
	run("git", "init", "-q")
	writeFile(t, filepath.Join(dir, "f"), "1\n")
	run("git", "add", "f")
	run("git", "commit", "-q", "-m", "one")
	check(`0\.0\.0~git1\.g[0-9a-f]{7,}`)
	run("git", "tag", "v1.2.3")
	check(`1\.2\.3`)
	run("git", "commit", "-q", "--allow-empty", "-m", "two")
	check(`1\.2\.3\+git1\.g[0-9a-f]{7,}`)
	writeFile(t, filepath.Join(dir, "f"), "2\n")
	check(`1\.2\.3\+git1\.g[0-9a-f]{7,}\.dirty`)
	run("git", "commit", "-q", "-a", "-m", "three")
	run("git", "tag", "v1.3.0-rc1")
	check(`1\.3\.0~rc1`)
	run("git", "commit", "-q", "--allow-empty", "-m", "four")
	run("git", "tag", "v1.3.0")
	check(`1\.3\.0`)
	t.Logf("versions: %q", versions)
}
