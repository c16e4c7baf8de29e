package delta

import (
	"encoding/binary"
	"fmt"
)

// z85Alphabet is the alphabet of Z85 (ZeroMQ RFC 32), the Base85 variant
// the Delta protocol encodes deletion vector ids and inline deletion
// vectors with.
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85Encode encodes data, padded with zero bytes to a multiple of four as
// Delta does, in Z85: five characters for every four bytes.
func z85Encode(data []byte) string {
	padded := data
	if r := len(data) % 4; r != 0 {
		padded = make([]byte, len(data)+4-r)
		copy(padded, data)
	}
	out := make([]byte, 0, len(padded)/4*5)
	for i := 0; i < len(padded); i += 4 {
		v := binary.BigEndian.Uint32(padded[i:])
		var chunk [5]byte
		for j := 4; j >= 0; j-- {
			chunk[j] = z85Alphabet[v%85]
			v /= 85
		}
		out = append(out, chunk[:]...)
	}
	return string(out)
}

// z85Decode decodes Z85 text, whose length must be a multiple of five,
// into four bytes for every five characters.
func z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("z85: length %d is not a multiple of 5", len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := range 5 {
			d := z85Digit(s[i+j])
			if d < 0 {
				return nil, fmt.Errorf("z85: invalid character %q at %d", s[i+j], i+j)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return nil, fmt.Errorf("z85: group at %d overflows 32 bits", i)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(v))
	}
	return out, nil
}

// z85Digit returns the value of a Z85 character, or -1.
func z85Digit(c byte) int {
	for i := range len(z85Alphabet) {
		if z85Alphabet[i] == c {
			return i
		}
	}
	return -1
}
