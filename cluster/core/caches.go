package core

import (
	"sync"

	"github.com/tollgate/tollgate/limiter"
)

// slotCache keeps what a node heard about keys from their owners (a denial,
// a remaining count, a client's score) until it expires: a fixed table in
// which a key takes the slot it falls in, a newer key in the slot replacing
// it. It stays bounded whatever the number of keys, costs no allocation,
// and a value set is seen by the very next lookup. What it forgets is only
// a hint lost: the owner is asked again.
//
// A slotCache is safe for concurrent use.
type slotCache[V any] struct {
	locks [64]sync.Mutex
	slots []cacheSlot[V]
}

type cacheSlot[V any] struct {
	key     limiter.Key
	val     V
	expires int64 // Unix ns
}

func newSlotCache[V any](size int) *slotCache[V] {
	return &slotCache[V]{slots: make([]cacheSlot[V], max(64, size))}
}

func (c *slotCache[V]) slot(k limiter.Key) (*sync.Mutex, *cacheSlot[V]) {
	i := uint64(k) % uint64(len(c.slots))
	return &c.locks[i%uint64(len(c.locks))], &c.slots[i]
}

// get returns k's value if it is held and has not expired at now.
func (c *slotCache[V]) get(k limiter.Key, now int64) (V, bool) {
	mu, s := c.slot(k)
	mu.Lock()
	defer mu.Unlock()
	if s.key != k || s.expires <= now {
		var zero V
		return zero, false
	}
	return s.val, true
}

// last returns k's value if it is held, expired or not.
func (c *slotCache[V]) last(k limiter.Key) (V, bool) {
	mu, s := c.slot(k)
	mu.Lock()
	defer mu.Unlock()
	if s.key != k || s.expires == 0 {
		var zero V
		return zero, false
	}
	return s.val, true
}

// set holds v for k until expires.
func (c *slotCache[V]) set(k limiter.Key, v V, expires int64) {
	mu, s := c.slot(k)
	mu.Lock()
	*s = cacheSlot[V]{key: k, val: v, expires: expires}
	mu.Unlock()
}

// forget drops k.
func (c *slotCache[V]) forget(k limiter.Key) {
	mu, s := c.slot(k)
	mu.Lock()
	if s.key == k {
		*s = cacheSlot[V]{}
	}
	mu.Unlock()
}
