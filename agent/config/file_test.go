package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesUnsuitableFiles checks that a configuration that is
// not a regular file, or is larger than MaxFileBytes, is refused without
// being read, and that a file of exactly the limit is read.
func TestLoadRefusesUnsuitableFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxFileBytes+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/dev/zero": "read config: /dev/zero is a character device, not a regular file",
		dir:         "is a directory, not a regular file",
		big:         "is 1048577 bytes, larger than the 1 MiB limit",
	} {
		_, err := Load(path)
		if !errors.Is(err, ErrUnsuitableFile) || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want ErrUnsuitableFile and %q", path, err, want)
		}
	}
	limit := filepath.Join(dir, "limit.yaml")
	if err := os.WriteFile(limit, []byte(strings.Repeat("#", MaxFileBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(limit); errors.Is(err, ErrUnsuitableFile) || !strings.Contains(err.Error(), "the file is empty") {
		t.Errorf("Load(file of MaxFileBytes) = %v, want it read (and found empty)", err)
	}
}
