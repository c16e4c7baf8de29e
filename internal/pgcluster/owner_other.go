//go:build !unix

package pgcluster

import "os"

// statOwner returns -1 for owner and group: they are not known here.
func statOwner(fi os.FileInfo) (uid, gid int) { return -1, -1 }
