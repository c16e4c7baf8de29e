package main

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeFileInfo is the fs.FileInfo of a file with a given mode and owner.
type fakeFileInfo struct {
	mode fs.FileMode
	uid  uint32
}

func (f fakeFileInfo) Name() string       { return "environment" }
func (f fakeFileInfo) Size() int64        { return 0 }
func (f fakeFileInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeFileInfo) ModTime() time.Time { return time.Time{} }
func (f fakeFileInfo) IsDir() bool        { return false }
func (f fakeFileInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid} }

// TestCheckEnvironmentOwner checks which modes and owners of the
// environment file are refused, for a command run by root and by another
// user.
func TestCheckEnvironmentOwner(t *testing.T) {
	t.Parallel()
	const path = "/etc/lakeside/environment"
	tests := []struct {
		mode     fs.FileMode
		owner    uint32
		runner   int
		wantText string // "" when accepted
	}{
		{0o600, 0, 0, ""},
		{0o640, 0, 998, ""},
		{0o600, 998, 998, ""},
		{0o444, 0, 0, ""},
		{0o666, 0, 0, "group- and world-writable (mode 0666)"},
		{0o660, 0, 0, "group-writable (mode 0660)"},
		{0o602, 0, 0, "world-writable (mode 0602)"},
		{0o600, 998, 0, "is owned by uid 998"},
		{0o600, 1000, 998, "neither root nor the user running lakeside (uid 998"},
	}
	for _, tc := range tests {
		err := checkEnvironmentOwner(path, fakeFileInfo{mode: tc.mode, uid: tc.owner}, tc.runner)
		switch {
		case tc.wantText == "" && err != nil:
			t.Errorf("mode %04o, owner %d, run by %d: %v, want accepted", tc.mode, tc.owner, tc.runner, err)
		case tc.wantText != "" && (err == nil || !strings.Contains(err.Error(), tc.wantText)):
			t.Errorf("mode %04o, owner %d, run by %d: %v, want an error containing %q", tc.mode, tc.owner, tc.runner, err, tc.wantText)
		case err != nil && !strings.Contains(err.Error(), "run ch"):
			t.Errorf("mode %04o, owner %d: %q does not say the command that fixes it", tc.mode, tc.owner, err)
		}
	}
}
