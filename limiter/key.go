package limiter

import "github.com/tollgate/tollgate/internal/keyhash"

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
	return Key(keyHash&0xffffffff00000000 | keyhash.Mix(keyHash^zoneSeed)&0xffffffff)
}

// Hasher hashes rendered keys and zone identities under a secret. Without
// the secret nobody can predict where a key lands, so nobody can aim many
// keys at one shard or one node. The zero value is not usable; call
// NewHasher.
type Hasher struct {
	keys, zones keyhash.Hasher
}

// NewHasher derives a Hasher from secret.
func NewHasher(secret []byte) Hasher {
	return Hasher{
		keys:  keyhash.New(secret, "tollgate key hash v1"),
		zones: keyhash.New(secret, "tollgate zone seed v1"),
	}
}

// Sum64 returns the keyed hash of a rendered key. It does not allocate.
func (h Hasher) Sum64(s string) uint64 { return h.keys.String(s) }

// Zone returns the seed of the zone with the given identity.
func (h Hasher) Zone(id string) uint64 { return h.zones.String(id) }

// Sum64Bytes is Sum64 for a key held in bytes.
func (h Hasher) Sum64Bytes(b []byte) uint64 { return h.keys.Bytes(b) }
