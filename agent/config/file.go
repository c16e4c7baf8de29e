package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileBytes is the largest configuration file Load reads, and the
// largest environment file the command line reads beside it. A real file is
// a few kilobytes; the limit keeps a wrong path from filling the memory.
const MaxFileBytes = 1 << 20

// ErrUnsuitableFile is matched (errors.Is) by the errors of ReadSmallFile
// that refuse a file for its kind or its size, rather than fail to open or
// read it.
var ErrUnsuitableFile = errors.New("unsuitable file")

// unsuitableFileError is an error of ReadSmallFile that matches
// ErrUnsuitableFile.
type unsuitableFileError struct{ msg string }

func (e *unsuitableFileError) Error() string { return e.msg }

// Is reports whether target is ErrUnsuitableFile.
func (e *unsuitableFileError) Is(target error) bool { return target == ErrUnsuitableFile }

// unsuitable returns an unsuitableFileError with a formatted message.
func unsuitable(format string, args ...any) error {
	return &unsuitableFileError{msg: fmt.Sprintf(format, args...)}
}

// ReadSmallFile reads the regular file at path, which must hold at most
// limit bytes, and returns its contents and what the open file reports
// about itself, so that checks of its owner and mode are about the very
// file read. Anything but a regular file (a device such as /dev/zero, a
// named pipe, a directory) is refused before a byte is read: it is opened
// without blocking, so a pipe with no writer cannot hold the caller up.
// Errors name the path and say how to fix the problem; those about the
// kind or the size of the file match ErrUnsuitableFile.
func ReadSmallFile(path string, limit int64) ([]byte, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, unsuitable("%s is %s, not a regular file (give the path of the file itself)", path, describeFileType(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, nil, unsuitable("%s is %d bytes, larger than the %s limit (is it the right file?)", path, fi.Size(), formatBytes(limit))
	}
	// The file may grow between Stat and ReadAll: read one byte past the
	// limit to tell.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > limit {
		return nil, nil, unsuitable("%s is larger than the %s limit (is it the right file?)", path, formatBytes(limit))
	}
	return data, fi, nil
}

// describeFileType names the kind of a file that is not regular.
func describeFileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// formatBytes writes a byte count for a message, in KiB or MiB when it is
// at least one of them.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
