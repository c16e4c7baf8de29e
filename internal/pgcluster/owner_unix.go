//go:build unix

package pgcluster

import (
	"os"
	"syscall"
)

// statOwner returns the numeric owner and group of fi, or -1 if unknown.
func statOwner(fi os.FileInfo) (uid, gid int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(st.Uid), int(st.Gid)
}
