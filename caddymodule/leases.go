package caddymodule

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// heldLeases are the leases one request holds in lease zones: renewed while
// the request is alive, and those of its own (not named) released when its
// response ends.
type heldLeases struct {
	decider decider
	reqs    []limiter.Request
	named   []bool
	timer   *time.Timer

	mu   sync.Mutex // a renewal and the release never interleave
	done bool
}

// hold starts renewing the leases every half TTL.
func (l *heldLeases) hold() {
	ttl := l.reqs[0].Limit.Window
	for _, r := range l.reqs[1:] {
		ttl = min(ttl, r.Limit.Window)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(ttl/2, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.done {
			return // released: a renewal now would claim the slots again
		}
		l.decider.Take(time.Now(), l.reqs, make([]limiter.Result, len(l.reqs)))
		l.timer.Reset(ttl / 2)
	})
}

// release stops renewing and gives back the request's own leases.
func (l *heldLeases) release() {
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
	l.timer.Stop()
	now := time.Now()
	for i, r := range l.reqs {
		if !l.named[i] {
			l.decider.Release(now, r.Key, r.LeaseID)
		}
	}
}
