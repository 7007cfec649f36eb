package limiter

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
)

// Key identifies one counter: one rendered key in one zone, as a keyed hash.
//
// The high 32 bits are the route of the rendered key (the same in every zone,
// so all of one client's counters live on one owner); the low 32 bits mix in
// the zone. Two distinct rendered keys share a Key with probability about
// 2^-64 per pair. The raw key is never stored.
type Key uint64

// Route returns the part of k that decides which node owns it.
func (k Key) Route() uint32 { return uint32(k >> 32) }

// ZoneKey combines the hash of a rendered key (Hasher.Sum64) with a zone's
// seed (Hasher.Zone) into the key of that zone's counter.
func ZoneKey(keyHash, zoneSeed uint64) Key {
	return Key(keyHash&0xffffffff00000000 | mix64(keyHash^zoneSeed)&0xffffffff)
}

// Hasher is a keyed hash (SipHash-2-4) for rendered keys. Without its secret
// nobody can predict where a key lands, so nobody can aim many keys at one
// shard or one node. The zero value is not usable; call NewHasher.
type Hasher struct {
	k0, k1 uint64
}

// NewHasher derives a hashing key from secret.
func NewHasher(secret []byte) Hasher {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("tollgate key hash v1"))
	sum := mac.Sum(nil)
	return Hasher{
		k0: binary.LittleEndian.Uint64(sum[0:8]),
		k1: binary.LittleEndian.Uint64(sum[8:16]),
	}
}

// Sum64 returns the keyed hash of s. It does not allocate.
func (h Hasher) Sum64(s string) uint64 {
	return siphash(h.k0, h.k1, s)
}

// Zone returns the seed of the zone with the given identity.
func (h Hasher) Zone(id string) uint64 {
	return siphash(h.k0^0x7a6f6e65, h.k1, id) // "zone"
}

// mix64 is the splitmix64 finalizer: a bijection with good avalanche.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// siphash is SipHash-2-4 over a string.
func siphash(k0, k1 uint64, s string) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	n := len(s)
	for len(s) >= 8 {
		m := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		v3 ^= m
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
		v0 ^= m
		s = s[8:]
	}
	m := uint64(n) << 56
	for i := len(s) - 1; i >= 0; i-- {
		m |= uint64(s[i]) << (8 * uint(i))
	}
	v3 ^= m
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	v0 ^= m
	v2 ^= 0xff
	for range 4 {
		v0, v1, v2, v3 = sipRound(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

func sipRound(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
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
