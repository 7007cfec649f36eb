package core

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Accessors the node's driver needs beside the protocol.

// ReleaseFallback gives up a lease this node claimed in fallback for an
// owner it could not reach, if it holds it, and reports whether it did.
func (c *Core) ReleaseFallback(now time.Time, key limiter.Key, id uint64) bool {
	defer c.fallback.wrote()
	return c.fallback.engine.Release(now, key, id)
}

// ReplicaOf returns the replica this node keeps of k for its owner, if it
// keeps one: tests compare it with the owner's counter.
func (c *Core) ReplicaOf(k limiter.Key) (limiter.State, bool) {
	s, _, ok := c.replicas.get(k)
	return s, ok
}
