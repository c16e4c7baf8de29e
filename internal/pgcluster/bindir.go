package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrBinariesNotFound is returned (wrapped) when no PostgreSQL server
// binaries can be located.
var ErrBinariesNotFound = errors.New("PostgreSQL server binaries not found: run make deps")

// debianBinGlob matches the per-version server binary directories that the
// Debian and Ubuntu PostgreSQL packages install.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir locates the directory holding the PostgreSQL server binaries
// (initdb, pg_ctl, postgres). It uses $PG_BINDIR if set, else the highest
// versioned /usr/lib/postgresql/*/bin that contains initdb, else the output of
// `pg_config --bindir`. It returns an error wrapping ErrBinariesNotFound when
// nothing usable is found.
func FindBinDir(ctx context.Context) (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("PG_BINDIR=%s: %w", dir, err)
		}
		return dir, nil
	}

	if dir := highestDebianBinDir(); dir != "" {
		return dir, nil
	}

	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		if err == nil {
			dir := strings.TrimSpace(string(out))
			if checkBinDir(dir) == nil {
				return dir, nil
			}
		}
	}
	return "", ErrBinariesNotFound
}

// checkBinDir reports whether dir contains the binaries this package runs.
func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("%w (%s missing)", ErrBinariesNotFound, name)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w (%s not executable)", ErrBinariesNotFound, name)
		}
	}
	return nil
}

// highestDebianBinDir returns the usable /usr/lib/postgresql/<version>/bin
// directory with the highest version, or "" if there is none.
func highestDebianBinDir() string {
	dirs, _ := filepath.Glob(debianBinGlob)
	var usable []string
	for _, dir := range dirs {
		if checkBinDir(dir) == nil {
			usable = append(usable, dir)
		}
	}
	if len(usable) == 0 {
		return ""
	}
	slices.SortFunc(usable, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	return usable[len(usable)-1]
}

// compareVersions compares dotted numeric versions such as "9.6" and "15";
// non-numeric parts sort before numeric ones.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y string
		if i < len(as) {
			x = as[i]
		}
		if i < len(bs) {
			y = bs[i]
		}
		xn, xerr := strconv.Atoi(x)
		yn, yerr := strconv.Atoi(y)
		switch {
		case xerr == nil && yerr == nil:
			if xn != yn {
				return xn - yn
			}
		case xerr != nil && yerr == nil:
			return -1
		case xerr == nil && yerr != nil:
			return 1
		default:
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
		}
	}
	return 0
}
