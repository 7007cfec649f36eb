package core

import (
	"sync"

	"github.com/tollgate/tollgate/limiter"
)

// dirtyShardCount is how many parts the set of changed keys is split
// into, each with its own lock, so owners noting changes on many cores at
// once seldom wait for each other (one lock would be taken by every
// counted request).
const dirtyShardCount = 32

// dirtyKeys is the set of keys an owner changed since it last replicated.
// The zero value is an empty set.
type dirtyKeys struct {
	shards [dirtyShardCount]dirtyShard
}

type dirtyShard struct {
	mu   sync.Mutex
	keys map[limiter.Key]struct{}
	_    [48]byte // a cache line of its own
}

// shard returns the part of the set that holds k.
func (d *dirtyKeys) shard(k limiter.Key) *dirtyShard {
	return &d.shards[(uint64(k)*0x9E3779B97F4A7C15)>>(64-5)]
}

// add records k; the shard's lock is held.
func (s *dirtyShard) add(k limiter.Key) {
	if s.keys == nil {
		s.keys = make(map[limiter.Key]struct{})
	}
	s.keys[k] = struct{}{}
}

// noteKey records one changed key.
func (d *dirtyKeys) noteKey(k limiter.Key) {
	s := d.shard(k)
	s.mu.Lock()
	s.add(k)
	s.mu.Unlock()
}

// note records the keys of reqs, and client unless it is 0.
func (d *dirtyKeys) note(reqs []limiter.Request, client limiter.Key) {
	for i := range reqs {
		d.noteKey(reqs[i].Key)
	}
	if client != 0 {
		d.noteKey(client)
	}
}

// noteStates records changed keys, given as states.
func (d *dirtyKeys) noteStates(states []limiter.State) {
	for i := range states {
		d.noteKey(states[i].Key)
	}
}

// noteKeys records changed keys.
func (d *dirtyKeys) noteKeys(keys []limiter.Key) {
	for _, k := range keys {
		d.noteKey(k)
	}
}

// drain returns the keys noted and starts a new set.
func (d *dirtyKeys) drain() []limiter.Key {
	var out []limiter.Key
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		if len(s.keys) > 0 { // an empty map costs a walk of its buckets all the same
			for k := range s.keys {
				out = append(out, k)
			}
			clear(s.keys)
		}
		s.mu.Unlock()
	}
	return out
}

// len returns how many keys are noted.
func (d *dirtyKeys) len() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n += len(s.keys)
		s.mu.Unlock()
	}
	return n
}
