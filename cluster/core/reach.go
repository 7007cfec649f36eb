package core

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Counters out of reach. A dead member's keys start, at the node that takes
// them over, from their replicas: their successor kept them. Where that
// successor was declared dead too (the key's owner and its successor, by the
// ring the hand-off started from, both gone: two crashes, or a crash and a
// split that put the successor on the other side), no node this one hears
// from holds a copy of the key's counter, and the copy may well live on,
// on the far side of a split, to come back when the split heals. Counted
// from what arrived (what the others admitted in fallback), the key would
// admit its whole limit again. The node that takes it over decides it by
// fallback instead, as an owner without a majority does, until a counter of
// it arrives (its holder, back, sends the replica on, or the counters it
// held as it stopped), until neither run that held it can come back with
// one (both were replaced by later runs: they crashed, and their counts are
// lost as a crash loses them), or until the hand-off window has passed since
// the hand-off began: then it counts what it has, as a hand-off ended by the
// window does.

// reachGap is what one hand-off took over from dead members: the keys whose
// owner and successor, in the ring the hand-off started from, both died.
type reachGap struct {
	ring  *Ring             // the stable ring of the hand-off
	dead  map[string]uint64 // its members that died, by run (the plan's: never changed)
	until int64             // mono: the end of the hand-off's window
}

// lacks reports whether g leaves k without a reachable counter at self:
// k's owner and successor in g's ring both died, self is not the
// successor, and one of the two runs may still come back (gone: a later
// run replaced it).
func (g *reachGap) lacks(k limiter.Key, self string, gone func(Peer) bool) bool {
	first, second := g.ring.top2(k.Route())
	if first < 0 || second < 0 {
		return false
	}
	o, s := g.ring.member(first), g.ring.member(second)
	if s.Name == self || g.dead[o.Name] != o.Inc || g.dead[s.Name] != s.Inc {
		return false
	}
	return !gone(o.Peer()) || !gone(s.Peer())
}

// outOfReach holds the gaps of this node's hand-offs while their windows
// last, and the keys whose counters arrived since. It is safe for
// concurrent use, and cheap to ask when empty.
type outOfReach struct {
	mu    sync.Mutex
	gaps  []reachGap
	found map[limiter.Key]bool
	n     atomic.Int32 // len(gaps)
}

// add records the gap a hand-off of plan from stable leaves until until;
// found are the keys whose counters this node holds already.
func (r *outOfReach) add(stable *Ring, plan *handoffPlan, until int64, found []limiter.Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = append(r.gaps, reachGap{ring: stable, dead: plan.deadInc, until: until})
	r.n.Store(int32(len(r.gaps)))
	r.foundLocked(found)
}

// lacks reports whether k, which self owns, lacks a reachable counter at
// m.
func (r *outOfReach) lacks(k limiter.Key, self string, m int64, gone func(Peer) bool) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.found[k] {
		return false
	}
	for i := range r.gaps {
		if m < r.gaps[i].until && r.gaps[i].lacks(k, self, gone) {
			return true
		}
	}
	return false
}

// expire drops the gaps whose windows passed by m, and reports whether
// there were any.
func (r *outOfReach) expire(m int64) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expireLocked(m)
}

func (r *outOfReach) expireLocked(m int64) bool {
	kept := r.gaps[:0]
	for _, g := range r.gaps {
		if m < g.until {
			kept = append(kept, g)
		}
	}
	expired := len(kept) < len(r.gaps)
	clear(r.gaps[len(kept):])
	r.gaps = kept
	r.n.Store(int32(len(kept)))
	if len(kept) == 0 {
		r.found = nil
	}
	return expired
}

// reached records that counters of the keys states carry arrived here.
func (r *outOfReach) reached(states []limiter.State) {
	if r.n.Load() == 0 || len(states) == 0 {
		return
	}
	keys := make([]limiter.Key, len(states))
	for i, s := range states {
		keys[i] = s.Key
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foundLocked(keys)
}

func (r *outOfReach) foundLocked(keys []limiter.Key) {
	if len(r.gaps) == 0 || len(keys) == 0 {
		return
	}
	if r.found == nil {
		r.found = map[limiter.Key]bool{}
	}
	for _, k := range keys {
		r.found[k] = true
	}
}

// lacksCounter reports whether k, which this node owns, lacks a reachable
// counter at m: fallback decides it (see outOfReach).
func (c *Core) lacksCounter(k limiter.Key, m int64) bool {
	return c.unreached.n.Load() > 0 && c.unreached.lacks(k, c.self.Name, m, c.replaced)
}

// replaced reports whether a later run of p's node was seen: p is gone,
// and what it held with it.
func (c *Core) replaced(p Peer) bool {
	r, ok := c.known.Load().latest(p.Name)
	return ok && r.inc > p.Inc
}

// reachedCounters records that counters of the keys states carry arrived
// (and were counted, or sent on): those whose counters were out of reach
// count from now on, with what this node admitted for them in fallback.
func (c *Core) reachedCounters(now time.Time, states []limiter.State) {
	if c.unreached.n.Load() == 0 {
		return
	}
	m := c.mono(now)
	var keys []limiter.Key
	for _, s := range states {
		if c.lacksCounter(s.Key, m) {
			keys = append(keys, s.Key)
		}
	}
	c.unreached.reached(states)
	if len(keys) > 0 {
		c.foldFallback(now, c.view.Load(), keys)
	}
}
