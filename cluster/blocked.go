package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/tollgate/tollgate/limiter"
)

// blockedCache remembers the keys an owner denied, until they may pass, so
// a node answers them itself without a call. Its entries belong to a
// generation of the shared values: when those change (tier limits, say),
// every remembered denial is void at once.
//
// It holds nothing until started (the cache runs goroutines), and a
// blockedCache that was never started, or was closed, remembers nothing.
// A blockedCache is safe for concurrent use, close included: calls under
// way when it closes finish against the cache before it is closed.
type blockedCache struct {
	mu    sync.RWMutex // R: reading and writing entries; W: replacing the cache
	cache *ristretto.Cache[uint64, blockedEntry]
	gen   atomic.Uint64 // entries of older generations are void
}

// blockedEntry is a denial remembered: until when, and under which
// generation of the shared values.
type blockedEntry struct {
	until int64
	gen   uint64
}

// start creates the cache, holding up to size keys.
func (b *blockedCache) start(size int) error {
	c, err := ristretto.NewCache(&ristretto.Config[uint64, blockedEntry]{
		NumCounters: int64(size) * 10,
		MaxCost:     int64(size),
		BufferItems: 64,
	})
	if err != nil {
		return fmt.Errorf("creating the blocked cache: %w", err)
	}
	b.mu.Lock()
	b.cache = c
	b.mu.Unlock()
	return nil
}

// close stops the cache; it remembers nothing from then on.
func (b *blockedCache) close() {
	b.mu.Lock()
	c := b.cache
	b.cache = nil
	b.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// answer fills res and reports true if one of the keys is known to be
// denied until later than now.
func (b *blockedCache) answer(now time.Time, reqs []limiter.Request, res []limiter.Result) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	c := b.cache
	if c == nil {
		return false
	}
	ns, gen := now.UnixNano(), b.gen.Load()
	for i := range reqs {
		e, ok := c.Get(uint64(reqs[i].Key))
		if !ok || e.until <= ns || e.gen != gen {
			continue
		}
		for j := range res {
			res[j] = limiter.Result{Allowed: true, Remaining: -1}
		}
		wait := time.Duration(e.until - ns)
		res[i] = limiter.Result{Reset: wait, RetryAfter: wait}
		return true
	}
	return false
}

// remember keeps the denied keys of an owner's answer until they may pass.
// A full concurrency zone is not remembered: a slot may free at any moment,
// and a holder of a lease is let in even at the cap.
func (b *blockedCache) remember(now time.Time, reqs []limiter.Request, res []limiter.Result) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	c := b.cache
	if c == nil {
		return
	}
	gen := b.gen.Load()
	for i := range res {
		if !res[i].Allowed && res[i].RetryAfter > 0 && reqs[i].Limit.Algorithm != limiter.Concurrency {
			e := blockedEntry{until: now.Add(res[i].RetryAfter).UnixNano(), gen: gen}
			c.SetWithTTL(uint64(reqs[i].Key), e, 1, res[i].RetryAfter)
		}
	}
}

// forget drops k.
func (b *blockedCache) forget(k limiter.Key) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.cache != nil {
		b.cache.Del(uint64(k))
	}
}

// forgetAll voids every remembered denial: they were decided under shared
// values that just changed.
func (b *blockedCache) forgetAll() { b.gen.Add(1) }

// wait returns once the entries remembered so far can be read.
func (b *blockedCache) wait() {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.cache != nil {
		b.cache.Wait()
	}
}
