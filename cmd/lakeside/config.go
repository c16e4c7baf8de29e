package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lakeside/lakeside/agent/config"
)

// environmentFile is the name, next to the configuration file, of the file of
// VAR=value lines the service reads secrets from (EnvironmentFile= in the
// unit), so that ${VAR} in the configuration expands the same way for the
// commands an operator runs by hand.
const environmentFile = "environment"

// loadConfig loads the configuration at path after taking into the
// environment the variables of the environment file next to it that are not
// set already. An environment file that cannot be read is named in the error
// when the configuration does not load without it; one that is not a
// regular file of at most config.MaxFileBytes, or that others may write,
// is refused (see checkEnvironmentOwner).
//
// Both files are read whole in the background, so that a signal that ends
// ctx ends the wait at once, whatever the files are stored on.
func loadConfig(ctx context.Context, path string) (*config.Config, error) {
	type result struct {
		cfg *config.Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := loadConfigFiles(path)
		done <- result{cfg, err}
	}()
	select {
	case r := <-done:
		return r.cfg, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("load config %s: %w", path, context.Cause(ctx))
	}
}

// loadConfigFiles is loadConfig without the context.
func loadConfigFiles(path string) (*config.Config, error) {
	envPath := filepath.Join(filepath.Dir(path), environmentFile)
	data, fi, readErr := config.ReadSmallFile(envPath, config.MaxFileBytes)
	if errors.Is(readErr, config.ErrUnsuitableFile) {
		// Not one that the user running the command may not read: a wrong
		// file in its place.
		return nil, readErr
	}
	if readErr == nil {
		if err := checkEnvironmentOwner(envPath, fi, os.Getuid()); err != nil {
			return nil, err
		}
		vars, err := parseEnvironment(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envPath, err)
		}
		for _, kv := range vars {
			if _, set := os.LookupEnv(kv[0]); !set {
				os.Setenv(kv[0], kv[1])
			}
		}
	}
	cfg, err := config.Load(path)
	if err != nil && readErr != nil && !errors.Is(readErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s was not read: %v)", err, envPath, readErr)
	}
	return cfg, err
}

// checkEnvironmentOwner refuses an environment file that someone other than
// root and the user uid running the command may change: its variables
// become the agent's secrets and settings (the DSN, the S3 keys, the HTTP
// token), so whoever may write it controls the agent. The error says why
// and the command that fixes it.
func checkEnvironmentOwner(path string, fi fs.FileInfo, uid int) error {
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		who := "group-writable"
		switch {
		case perm&0o022 == 0o022:
			who = "group- and world-writable"
		case perm&0o002 != 0:
			who = "world-writable"
		}
		return fmt.Errorf("%s is %s (mode %04o), so others could change the agent's secrets and settings: run chmod 600 %s", path, who, perm, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if owner := int(st.Uid); owner != 0 && owner != uid {
		return fmt.Errorf("%s is owned by %s, neither root nor the user running lakeside (%s), who could change the agent's secrets and settings: run chown root %s (or chown to the user running lakeside)",
			path, describeUser(owner), describeUser(uid), path)
	}
	return nil
}

// describeUser names a user id for a message: "uid 1000 (alice)", or
// "uid 1000" when the name is unknown.
func describeUser(uid int) string {
	id := strconv.Itoa(uid)
	if u, err := user.LookupId(id); err == nil && u.Username != "" {
		return "uid " + id + " (" + u.Username + ")"
	}
	return "uid " + id
}

// parseEnvironment reads systemd's environment file format: VAR=value lines,
// blank lines and lines starting with # or ; ignored, a value optionally in
// double or single quotes.
func parseEnvironment(data []byte) ([][2]string, error) {
	var vars [][2]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d: want VAR=value", n)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		vars = append(vars, [2]string{name, value})
	}
	return vars, sc.Err()
}
