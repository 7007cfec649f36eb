// Package keyhash is the keyed hash (SipHash-2-4) Tollgate uses wherever a
// value must be hashed so that outsiders can neither predict nor aim it.
package keyhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// Hasher is SipHash-2-4 under one 128-bit key. The zero value is not
// usable; call New.
type Hasher struct {
	k0, k1 uint64
}

// New derives a hasher from secret for one purpose: hashers derived from
// one secret with different labels are independent.
func New(secret []byte, label string) Hasher {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(label))
	sum := mac.Sum(nil)
	return Hasher{
		k0: binary.LittleEndian.Uint64(sum[0:8]),
		k1: binary.LittleEndian.Uint64(sum[8:16]),
	}
}

// FromKey returns the hasher with the given 128-bit key.
func FromKey(k0, k1 uint64) Hasher { return Hasher{k0, k1} }

// String hashes s. It does not allocate.
//
// String and Bytes are not inlined: inlined into another package, the call
// to the generic sum lost its escape information there and moved the
// caller's stack buffers to the heap.
//
//go:noinline
func (h Hasher) String(s string) uint64 { return sum(h.k0, h.k1, s) }

// Bytes hashes b. It does not allocate, and b does not escape.
//
//go:noinline
func (h Hasher) Bytes(b []byte) uint64 { return sum(h.k0, h.k1, b) }

// Uint64 hashes one 64-bit value, as Bytes hashes its 8 little-endian
// bytes, without a buffer.
func (h Hasher) Uint64(v uint64) uint64 {
	v0 := h.k0 ^ 0x736f6d6570736575
	v1 := h.k1 ^ 0x646f72616e646f6d
	v2 := h.k0 ^ 0x6c7967656e657261
	v3 := h.k1 ^ 0x7465646279746573
	v3 ^= v
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= v
	const last = uint64(8) << 56 // the length, with no bytes left over
	v3 ^= last
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= last
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// Mix is the splitmix64 finalizer: a bijection with good avalanche, for
// combining values that are already keyed hashes.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// sum is SipHash-2-4.
func sum[T string | []byte](k0, k1 uint64, s T) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(s)
	for len(s) >= 8 {
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0 ^= m
		s = s[8:]
	}
	// The last block: the 0 to 7 bytes left, little-endian, under the
	// length. Read as two loads that may overlap (a byte both set is set
	// alike), not byte by byte.
	m := uint64(n) << 56
	switch r := len(s); {
	case r >= 4:
		m |= uint64(le32(s, 0)) | uint64(le32(s, r-4))<<(8*(r-4))
	case r >= 2:
		m |= uint64(le16(s, 0)) | uint64(le16(s, r-2))<<(8*(r-2))
	case r == 1:
		m |= uint64(s[0])
	}
	v3 ^= m
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xff
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	return v0 ^ v1 ^ v2 ^ v3
}

// le32 reads the 4 bytes of s at i, little-endian.
func le32[T string | []byte](s T, i int) uint32 {
	s = s[i : i+4]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// le16 reads the 2 bytes of s at i, little-endian.
func le16[T string | []byte](s T, i int) uint16 {
	s = s[i : i+2]
	return uint16(s[0]) | uint16(s[1])<<8
}

func round(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}
