package main

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// terminalWriter writes what the commands print with its control
// characters escaped. Table and column names, values, S3 error bodies and
// client requests reach the output of status, check, resync and the others,
// and an escape sequence among them could clear or forge lines on the
// operator's terminal. Newlines and tabs pass; every other C0 character,
// DEL and bytes that are not UTF-8 are written as \xNN, C1 characters as
// \u00NN (which JSON reads as the same character).
type terminalWriter struct {
	w io.Writer
	// partial is the start of a character cut at the end of a write.
	partial []byte
}

func (t *terminalWriter) Write(p []byte) (int, error) {
	buf := append(t.partial, p...)
	// A character cut at the end waits for the rest.
	cut := len(buf)
	for i := len(buf) - 1; i >= max(0, len(buf)-utf8.UTFMax+1); i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	out := escapeControls(nil, buf[:cut])
	t.partial = append([]byte(nil), buf[cut:]...)
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes a character left cut at the end, escaped.
func (t *terminalWriter) flush() error {
	if len(t.partial) == 0 {
		return nil
	}
	out := escapeControls(nil, t.partial)
	t.partial = nil
	_, err := t.w.Write(out)
	return err
}

// escapeControls appends b to dst with its control characters escaped.
func escapeControls(dst, b []byte) []byte {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			dst = fmt.Appendf(dst, `\x%02x`, b[0])
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f:
			dst = fmt.Appendf(dst, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			dst = fmt.Appendf(dst, `\u%04x`, r)
		default:
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst
}
