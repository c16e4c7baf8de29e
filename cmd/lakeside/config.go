package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lakeside/lakeside/agent"
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
// regular file of at most agent.MaxConfigBytes is refused.
//
// Both files are read whole in the background, so that a signal that ends
// ctx ends the wait at once, whatever the files are stored on.
func loadConfig(ctx context.Context, path string) (*agent.Config, error) {
	type result struct {
		cfg *agent.Config
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
func loadConfigFiles(path string) (*agent.Config, error) {
	envPath := filepath.Join(filepath.Dir(path), environmentFile)
	data, _, readErr := agent.ReadSmallFile(envPath, agent.MaxConfigBytes)
	if errors.Is(readErr, agent.ErrUnsuitableFile) {
		// Not one that the user running the command may not read: a wrong
		// file in its place.
		return nil, readErr
	}
	if readErr == nil {
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
	cfg, err := agent.LoadConfig(path)
	if err != nil && readErr != nil && !errors.Is(readErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s was not read: %v)", err, envPath, readErr)
	}
	return cfg, err
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
