package cluster

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
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

	watching atomic.Bool // a ping waits for the peer to answer again
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

// Calls to an owner that is slow, not gone. A call's deadline (the peer
// timeout) is when a caller stops waiting for an owner that has gone
// silent, not for one that is busy: when it passes, the caller gives up on
// the call (and decides it by fallback) only if nothing at all came from the
// peer while it waited, and it was itself running. An owner that keeps
// answering other calls is alive but behind, and the caller keeps waiting
// for its answer, which is the decision, up to patience (ten peer
// timeouts); deciding in fallback beside a live owner would let both admit.
//
// An owner that was given up on and answers again is used again at once:
// when a breaker opens, a ping waits on the peer's connection, and as soon
// as it is answered the node sends the owner what it admitted in fallback
// and closes the breaker, rather than counting the owner's keys in fallback
// until the breaker's backoff has passed while the owner answers others.

// patience bounds how long a caller waits for a peer that answers other
// calls but not this one.
func (n *Node) patience() time.Duration { return 10 * n.cfg.CallTimeout }

// await sends c, made at sent, to p and waits for its reply, as described
// above.
func (n *Node) await(p *peer, c *call, sent time.Time) error {
	now := monoNanos(sent)
	c.wait = patience{timeout: int64(n.cfg.CallTimeout), since: now, base: stalled(now), until: now + int64(n.patience())}
	return p.do(c, sent.Add(n.cfg.CallTimeout))
}

// patience is how a patient call's deadline moves. Only the peer's
// watcher reads and writes it, once the call is queued.
type patience struct {
	timeout int64 // the peer timeout
	since   int64 // clock when the peer was last heard from, or the call made
	base    int64 // the process's stalls up to since
	until   int64 // clock past which the call is given up on regardless
	graced  bool  // the caller stalled and was given time to read
}

// extend is called by p's watcher when c's deadline has come: it moves the
// deadline and reports true if c should still wait, as described above.
func (w *patience) extend(c *call, p *peer, now int64) bool {
	st := stalled(now)
	if p.heard.Load() > w.since {
		w.since, w.base = now, st // it answered something: alive, behind
	}
	// How long the peer has been silent while this process ran (while it
	// did not, it could not have read an answer either).
	silent := now - w.since - (st - w.base)
	if silent < w.timeout && now < w.until {
		c.due = now + w.timeout - silent
		return true
	}
	if st > w.base && !w.graced {
		// This process stalled while the call waited: an answer may have
		// arrived meanwhile, not read yet. Let the reader run first.
		w.graced = true
		c.due = now + 2*int64(stallTick)
		return true
	}
	return false
}

// watchReturn waits, while p's breaker is open, for p to answer a ping on a
// live connection; then it sends p's node what this node admitted in
// fallback and closes the breaker. One watcher runs per peer at most.
func (n *Node) watchReturn(p *peer) {
	if !p.breaker.open() || !p.breaker.watching.CompareAndSwap(false, true) {
		return
	}
	go func() {
		stopped := false
		defer func() {
			p.breaker.watching.Store(false)
			if !stopped && p.breaker.open() {
				n.watchReturn(p) // it opened again as this watcher ended
			}
		}()
		for p.breaker.open() {
			select {
			case <-n.stop:
				stopped = true
				return
			case <-p.stop:
				stopped = true
				return
			default:
			}
			if !p.connected.Load() {
				if stopped = !p.sleep(n.cfg.CallTimeout); stopped {
					return
				}
				continue
			}
			if err := p.do(newCall(msgPing), time.Now().Add(n.patience())); err != nil {
				if stopped = !p.sleep(n.cfg.CallTimeout); stopped {
					return
				}
				continue
			}
			if !n.sendFallback(p, time.Now(), n.state.Load().ring) {
				if stopped = !p.sleep(n.cfg.CallTimeout); stopped {
					return
				}
				continue
			}
			if p.breaker.open() {
				p.breaker.success()
				n.log.Info("peer answers again: counting its keys exactly", "peer", p.member.Name)
			}
			return
		}
	}()
}

// answered records that a call to p succeeded. A closed breaker stays
// closed; an open one closes only once p's node has heard what this node
// admitted in fallback meanwhile: at once if the call was the probe (which
// sends that first), else by the watcher, which does so.
func (n *Node) answered(p *peer, probe bool) {
	if probe {
		p.breaker.success()
		return
	}
	if !p.breaker.open() {
		return
	}
	n.watchReturn(p)
}

// The process's own stalls. A process that is not running (stopped,
// descheduled on a busy machine) reads no answers: the time it spends so
// is not the peer's silence. A watchdog ticks every stallTick and adds up
// how late its ticks come.
const (
	stallTick  = 5 * time.Millisecond
	stallSlack = time.Millisecond // a tick later than this: the process did not run
)

var stalls struct {
	once  sync.Once
	total atomic.Int64 // nanoseconds the process was seen not running
	tick  atomic.Int64 // clock of the last tick
}

// watchStalls starts the process's watchdog, once.
func watchStalls() {
	stalls.once.Do(func() {
		stalls.tick.Store(clock())
		go func() {
			t := time.NewTicker(stallTick)
			for range t.C {
				now := clock()
				if late := now - stalls.tick.Load() - int64(stallTick); late > int64(stallSlack) {
					stalls.total.Add(late)
				}
				stalls.tick.Store(now)
			}
		}()
	})
}

// stalled returns how long, up to now (by clock), the process was seen not
// running, counting a watchdog tick overdue now as a stall under way.
func stalled(now int64) int64 {
	total := stalls.total.Load()
	if t := stalls.tick.Load(); t != 0 {
		if late := now - t - int64(stallTick); late > int64(stallSlack) {
			total += late
		}
	}
	return total
}
