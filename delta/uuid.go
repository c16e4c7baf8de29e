package delta

import (
	"crypto/rand"
	"fmt"
)

// newUUID returns a random (version 4) UUID string.
func newUUID() (string, error) {
	b, err := newUUIDBytes()
	if err != nil {
		return "", err
	}
	return formatUUID(b), nil
}

// newUUIDBytes returns the 16 bytes of a random (version 4) UUID.
func newUUIDBytes() ([16]byte, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return b, fmt.Errorf("uuid: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b, nil
}

// formatUUID returns the canonical text of a UUID, such as
// "61d16c75-6994-46b7-a15b-8b538852e50e".
func formatUUID(b [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
