package limiter

import (
	"sync/atomic"

	"github.com/tollgate/tollgate/internal/keyhash"
)

// reputationWords is the number of 64-bit words of the reputations filter
// that belong to one shard: 512 bits.
const reputationWords = 8

// reputations tells which keys may hold a reputation record, so that a
// decision for a client in good standing (no record: a full score) reads
// nothing of its reputation and takes no lock for it. It is a bit per
// hash of the key: a key whose bit is clear holds no record, live or
// expired; one whose bit is set may.
//
// The bits of the keys of a shard are set under that shard's lock, by every
// write that stores a reputation (see shard.put and Engine.merge), and
// cleared only when the shard is swept, by rebuilding them from the records
// it still holds. They are read without the lock: a reader that holds the
// lock of any counter a penalty of the same decision wrote sees that
// penalty's bit. A record dropped another way (evicted, reset) leaves its
// bit set until the next sweep: a false "may", never a false "holds none".
//
// The words of one shard are contiguous, apart from the shards' locks, so
// that reading a bit does not share a cache line with a lock being taken.
type reputations struct {
	words [numShards * reputationWords]atomic.Uint64
}

// bitOf returns the word and bit of k.
func bitOf(k Key) (word int, bit uint64) {
	h := keyhash.Mix(uint64(k)) // its low bits are the shard (shardOf)
	i := int(h & (numShards - 1))
	b := (h >> 8) & (reputationWords*64 - 1)
	return i*reputationWords + int(b>>6), 1 << (b & 63)
}

// mayHold reports whether k may hold a reputation record.
func (f *reputations) mayHold(k Key) bool {
	w, b := bitOf(k)
	return f.words[w].Load()&b != 0
}

// add notes that k holds a reputation record. The lock of k's shard must
// be held.
func (f *reputations) add(k Key) {
	w, b := bitOf(k)
	f.words[w].Or(b)
}

// rebuild sets the bits of shard i, whose lock is held, to the records it
// holds.
func (f *reputations) rebuild(i uint32, s *shard) {
	var bits [reputationWords]uint64
	for k, v := range s.entries {
		if v.kind() == kindReputation {
			w, b := bitOf(k)
			bits[w-int(i)*reputationWords] |= b
		}
	}
	for j, b := range bits {
		f.words[int(i)*reputationWords+j].Store(b)
	}
}
