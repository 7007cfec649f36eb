package cluster

import (
	"math/rand/v2"
	"sync"
	"time"
)

// breaker keeps calls away from a peer that failed: after a failure it is
// open for a backoff (doubling from 250ms up to 5s, with ±20% jitter so
// nodes do not probe in step); when the backoff has passed, one call goes
// through as a probe; its success closes the breaker, its failure opens it
// again. Every caller that is allowed a call records how it went; a probe
// whose outcome is never recorded is given up on after probeGiveUp, so the
// breaker can never stay half-open.
type breaker struct {
	mu         sync.Mutex
	failures   int
	openTill   time.Time
	probing    bool
	probeSince time.Time
}

// probeGiveUp is how long a probe may go unresolved before another call is
// allowed to probe.
const probeGiveUp = 2 * breakerMax

const (
	breakerBase = 250 * time.Millisecond
	breakerMax  = 5 * time.Second
)

// allow reports whether a call may go to the peer now.
func (b *breaker) allow(now time.Time) bool {
	ok, _ := b.admit(now)
	return ok
}

// admit reports whether a call may go to the peer now, and whether it is
// the probe of an open breaker.
func (b *breaker) admit(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failures == 0 {
		return true, false
	}
	if now.Before(b.openTill) || b.probing && now.Sub(b.probeSince) < probeGiveUp {
		return false, false
	}
	b.probing, b.probeSince = true, now
	return true, true
}

// success records a call that worked.
func (b *breaker) success() {
	b.mu.Lock()
	b.failures, b.probing = 0, false
	b.mu.Unlock()
}

// failure records a call that failed and reports whether the breaker just
// opened (it was closed before).
func (b *breaker) failure(now time.Time) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	opened = b.failures == 0
	b.failures++
	backoff := breakerBase << min(b.failures-1, 5)
	backoff = min(backoff, breakerMax)
	jitter := 0.8 + 0.4*rand.Float64()
	b.openTill = now.Add(time.Duration(float64(backoff) * jitter))
	b.probing = false
	return opened
}

// open reports whether calls are being kept away.
func (b *breaker) open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures > 0
}
