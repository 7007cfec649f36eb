package core

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/internal/keyhash"
	"github.com/tollgate/tollgate/limiter"
)

// Counters out of reach. A dead member's keys start, at the node that takes
// them over, from their replicas: their successor kept them. Where that
// successor was declared dead too (the key's owner and its successor, by the
// ring the hand-off started from, both gone: two crashes, or a crash and a
// split that put the successor on the other side), no node this one hears
// from holds a copy of the key's counter, and the copy may well live on,
// on the far side of a split, to come back when the split heals (a
// replica this node kept of the key from an earlier ring, in which it was
// the successor, fell behind once the owner replicated elsewhere: it is no
// copy of the counter either; see replicaStore.supersede). Counted
// from what arrived (what the others admitted in fallback), the key would
// admit its whole limit again. The node that takes it over decides it by
// fallback instead, as an owner without a majority does, until a counter of
// it arrives (its holder, back, sends the replica on, or the counters it
// held as it stopped), until neither run that held it can come back with
// one (both were replaced by later runs: they crashed, and their counts are
// lost as a crash loses them), or until the hand-off window has passed since
// the hand-off began: then it counts what it has, as a hand-off ended by the
// window does. Such a key may move on meanwhile (a new run of its owner
// joins and owns it again, and finds nothing of it where it pulls it): a
// node answers pulls and seal queries with the gaps it knows (Unreached),
// and the asker decides the keys it owns in them by fallback too, for
// what is left of the window. The counter that node held of the key, if
// it moves on with it (handed over, given in a pull's reply), is no
// counter of it either: counted by fallback, it holds what was admitted
// in fallback, and names neither run that died holding the key. A
// counter ends the gap only where it holds the counts of one of those
// runs (its own run, or a run its Holds names), or names no run at all
// (a copy or a replica whose run is not said, taken for the key's as
// ever); else, taken for the key's counter, it let the node the key
// moved to count the key from the fallback counts while the counter
// lived on (seed 1795873206313035546 of the simulator).

// A hand-off completes here once every source sealed to this node, but the
// dead runs' keys it moved to other nodes (those whose successors, by the
// ring it started from, were others: their heirs) settle there only by
// hand-offs of their own, which wait for this node's seal among the
// others. Until this node sealed to an heir, the heir counts none of them:
// the replicas it keeps are their only copies beside the dead runs'
// counters. An heir that dies before (a crash a moment after it took a
// frozen owner for dead) leaves them out of reach as if it had died with
// the runs it was taking over: the hand-off that takes the heir over
// leaves the gap of the ring the first one started from, with the heir
// among its dead (see heirsOf). Counted from nothing by the node they
// move to, they would admit their whole limit again while the dead
// owner's counter lives on.

// reachGap is what one hand-off took over from dead members: the keys whose
// owner and successor, in the ring the hand-off started from, both died.
type reachGap struct {
	ring  *Ring             // the stable ring of the hand-off
	dead  map[string]uint64 // its members that died, by run (the plan's: never changed)
	until int64             // mono: the end of the hand-off's window
	// evicted is, for a gap this node's own eviction left (see
	// evictedOutOfReach), its run: its counters, coming back, are not the
	// keys' counters (the successor they went to may have started the
	// keys from their replicas and counted beyond them), and found holds
	// the keys whose other counters arrived.
	evicted Peer
	found   map[limiter.Key]bool
}

// reachedRuns is what came to a node of a key's counters: whether one named
// no run, and the runs whose counts the others hold (their own run, the
// runs their Holds name).
type reachedRuns struct {
	unnamed bool
	runs    []Peer
}

// reachedRunsOf is what a counter of k of the run of (none: not said) that
// holds the counts holds names says of whose counts it holds.
func reachedRunsOf(k limiter.Key, of Peer, holds []Held) reachedRuns {
	var a reachedRuns
	if of.Name != "" {
		a.runs = append(a.runs, of)
	}
	for _, h := range holds {
		if h.State.Key == k && !slices.Contains(a.runs, h.Run) {
			a.runs = append(a.runs, h.Run)
		}
	}
	a.unnamed = len(a.runs) == 0
	return a
}

// with returns a and b together.
func (a reachedRuns) with(b reachedRuns) reachedRuns {
	a.unnamed = a.unnamed || b.unnamed
	for _, p := range b.runs {
		if !slices.Contains(a.runs, p) {
			a.runs = append(slices.Clip(a.runs), p)
		}
	}
	return a
}

// holds reports whether counters of k that came as a says hold the counts
// of k's counter that g leaves out of reach: they name no run, or name
// k's owner or successor in g's ring (runs that died holding it).
func (g *reachGap) holds(k limiter.Key, a reachedRuns) bool {
	if a.unnamed {
		return true
	}
	first, second := g.ring.top2(k.Route())
	for _, i := range []int{first, second} {
		if i >= 0 && slices.Contains(a.runs, g.ring.member(i).Peer()) {
			return true
		}
	}
	return false
}

// lacks reports whether g leaves k without a reachable counter at self:
// k's owner and successor in g's ring both died, self is not the
// successor's run (a later run of it holds no replica), and one of the two
// runs may still come back (gone: a later run replaced it). For a gap
// this node's own eviction left, the run evicted is no run that may come
// back with counts: its counters came back here, or are on their way
// (the evicted run is this one). Only the successor they went to may: once
// a later run replaced it, what it counted beyond them died with it, and
// the keys count on from what is here
// (TestAKeyWhoseEvictedCounterWentToASuccessorThatDiedUncountedIsInReach;
// one that counted beyond them left a replica, which ends the gap:
// TestAKeyWhoseEvictedCounterWentToASuccessorThatRestartedIsInReach).
func (g *reachGap) lacks(k limiter.Key, self Peer, gone func(Peer) bool) bool {
	first, second := g.ring.top2(k.Route())
	if first < 0 || second < 0 {
		return false
	}
	o, s := g.ring.member(first), g.ring.member(second)
	if s.Peer() == self || g.dead[o.Name] != o.Inc || g.dead[s.Name] != s.Inc {
		return false
	}
	if g.evicted.Name != "" {
		for _, x := range []Member{o, s} {
			if x.Peer() != g.evicted && !gone(x.Peer()) {
				return true
			}
		}
		return false
	}
	return !gone(o.Peer()) || !gone(s.Peer())
}

// heirsOf is a hand-off this node completed that took dead runs over: the
// members of the ring it started from that lived on, by run, to which
// this node had not sealed then (each an heir of the dead runs' keys it
// succeeded them in), while the hand-off window lasts. A seal this node
// gives one later does not make it less of an heir: the answer may be
// lost, the heir's hand-off still under way, and should it die then it
// never counted those keys. One that did count them left its replicas at
// its successor, which end the gap its death leaves (see reachGap.holds).
type heirsOf struct {
	ring  *Ring             // the stable ring of the hand-off
	dead  map[string]uint64 // its members that died, by run
	heirs map[string]uint64 // not sealed to as the hand-off completed
	until int64             // mono: the end of the hand-off's window
}

// outOfReach holds the gaps of this node's hand-offs while their windows
// last, what arrived since of the counters of keys (see reachedRuns), and
// the heirs of its hand-offs that may not have counted their keys yet. It
// is safe for concurrent use, and cheap to ask when it holds no gap.
type outOfReach struct {
	mu    sync.Mutex
	gaps  []reachGap
	found map[limiter.Key]reachedRuns
	n     atomic.Int32 // len(gaps)
	heirs []heirsOf
}

// add records gap; found is what this node holds already of the keys'
// counters.
func (r *outOfReach) add(gap reachGap, found map[limiter.Key]reachedRuns) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaps = append(r.gaps, gap)
	r.n.Store(int32(len(r.gaps)))
	r.foundLocked(found)
}

// addHeirs records the heirs of a hand-off of plan from stable completed
// here, to which this node has not sealed, until until.
func (r *outOfReach) addHeirs(stable *Ring, plan *handoffPlan, heirs map[string]uint64, until int64, m int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heirs = slices.DeleteFunc(r.heirs, func(x heirsOf) bool { return m >= x.until })
	if len(heirs) > 0 {
		r.heirs = append(r.heirs, heirsOf{ring: stable, dead: plan.deadInc, heirs: heirs, until: until})
	}
}

// diedHeirs returns, for a hand-off that takes the runs of dead over and
// began at since, the gaps the heirs among them leave: each with the ring
// the hand-off they were heirs of started from, and its dead runs and
// those heirs as its dead.
func (r *outOfReach) diedHeirs(dead map[string]uint64, since int64) []reachGap {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []reachGap
	for _, x := range r.heirs {
		if since >= x.until {
			continue
		}
		var all map[string]uint64
		for name, inc := range x.heirs {
			if dead[name] == inc {
				if all == nil {
					all = maps.Clone(x.dead)
				}
				all[name] = inc
			}
		}
		if all != nil {
			out = append(out, reachGap{ring: x.ring, dead: all})
		}
	}
	return out
}

// export returns the gaps whose windows last at m, to pass on.
func (r *outOfReach) export(m int64) []Unreached {
	if r.n.Load() == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Unreached
	for _, g := range r.gaps {
		if m < g.until {
			out = append(out, g.unreached(m))
		}
	}
	return out
}

// takeGaps records the gaps another node passed on, from m; found is
// what this node holds already of the keys' counters. A gap it knows
// already keeps its window. It returns how many it added.
func (r *outOfReach) takeGaps(hasher keyhash.Hasher, us []Unreached, m int64, found map[limiter.Key]reachedRuns) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	added := 0
	for _, u := range us {
		if u.Within <= 0 || len(u.Dead) < 2 {
			continue
		}
		ms := make([]Member, len(u.Ring))
		for i, x := range u.Ring {
			ms[i] = Member{Name: x.Name, Inc: x.Inc}
		}
		g := reachGap{ring: NewRing(hasher, ms), dead: make(map[string]uint64, len(u.Dead)), until: m + int64(u.Within)}
		for _, d := range u.Dead {
			g.dead[d.Name] = d.Inc
		}
		if slices.ContainsFunc(r.gaps, func(x reachGap) bool {
			return x.ring.Fingerprint() == g.ring.Fingerprint() && maps.Equal(x.dead, g.dead)
		}) {
			continue
		}
		r.gaps = append(r.gaps, g)
		added++
	}
	r.n.Store(int32(len(r.gaps)))
	if added > 0 {
		r.foundLocked(found)
	}
	return added
}

// lacks reports whether k, which self owns, lacks a reachable counter at
// m.
func (r *outOfReach) lacks(k limiter.Key, self Peer, m int64, gone func(Peer) bool) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.gaps {
		g := &r.gaps[i]
		if g.evicted.Name == "" && g.holds(k, r.found[k]) || g.evicted.Name != "" && g.found[k] {
			continue
		}
		if m < g.until && g.lacks(k, self, gone) {
			return true
		}
	}
	return false
}

// addEvicted records the gap this node's eviction left: its run's
// counters went to to, the successor that kept their replicas, which this
// node takes for dead now; to may have started the keys from those
// replicas (the others declared this run dead) and counted beyond them.
// The keys ring gives this run and then to are out of reach until until,
// or until a counter of them that is not this run's arrives. It reports
// whether the gap is new.
func (r *outOfReach) addEvicted(ring *Ring, run, to Peer, until int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	dead := map[string]uint64{run.Name: run.Inc, to.Name: to.Inc}
	for i := range r.gaps {
		if g := &r.gaps[i]; g.evicted == run && g.ring.Fingerprint() == ring.Fingerprint() && maps.Equal(g.dead, dead) {
			g.until = max(g.until, until)
			return false
		}
	}
	r.gaps = append(r.gaps, reachGap{ring: ring, dead: dead, until: until, evicted: run, found: map[limiter.Key]bool{}})
	r.n.Store(int32(len(r.gaps)))
	return true
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

// reached records that counters of the keys states carry, of the run
// of, holding the counts holds names, arrived here.
func (r *outOfReach) reached(states []limiter.State, of Peer, holds []Held) {
	if r.n.Load() == 0 || len(states) == 0 {
		return
	}
	found := make(map[limiter.Key]reachedRuns, len(states))
	for _, s := range states {
		found[s.Key] = found[s.Key].with(reachedRunsOf(s.Key, of, holds))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.foundLocked(found)
	for i := range r.gaps {
		if g := &r.gaps[i]; g.evicted.Name != "" && g.evicted != of {
			for k := range found {
				g.found[k] = true
			}
		}
	}
}

func (r *outOfReach) foundLocked(found map[limiter.Key]reachedRuns) {
	if len(r.gaps) == 0 || len(found) == 0 {
		return
	}
	if r.found == nil {
		r.found = map[limiter.Key]reachedRuns{}
	}
	for k, a := range found {
		r.found[k] = r.found[k].with(a)
	}
}

// passUnreached returns the gaps this node knows, to pass on in a reply,
// and the one its hand-off under way leaves once it completes: a node
// whose hand-off from members that died together has not completed seals
// the keys an asker owns all the same, and the asker, settling them on
// that seal, would count from nothing a key whose owner and successor are
// both among those dead.
func (c *Core) passUnreached(now time.Time) []Unreached {
	m := c.mono(now)
	var out []Unreached
	if v := c.view.Load(); v != nil && v.ho != nil && v.stable != nil {
		for _, g := range c.gapsOf(v.ho, v.stable) {
			if m < g.until {
				out = append(out, g.unreached(m))
			}
		}
	}
	if c.unreached.n.Load() == 0 {
		return out
	}
	return append(out, c.unreached.export(m)...)
}

// gapsOf returns the gaps a hand-off of plan from stable leaves once it
// completes, for its window: the keys whose owner and successor by stable
// both died, and those whose heirs died (see heirsOf).
func (c *Core) gapsOf(plan *handoffPlan, stable *Ring) []reachGap {
	if len(plan.deadInc) == 0 {
		return nil
	}
	until := plan.since + int64(c.cfg.HandoffWindow)
	var out []reachGap
	if len(plan.deadInc) > 1 {
		out = append(out, reachGap{ring: stable, dead: plan.deadInc, until: until})
	}
	for _, g := range c.unreached.diedHeirs(plan.deadInc, plan.since) {
		g.until = until
		out = append(out, g)
	}
	return out
}

// unreached is g as passed on at m.
func (g *reachGap) unreached(m int64) Unreached {
	u := Unreached{Within: time.Duration(g.until - m)}
	for _, x := range g.ring.members {
		u.Ring = append(u.Ring, x.Peer())
	}
	for name, inc := range g.dead {
		u.Dead = append(u.Dead, Peer{Name: name, Inc: inc})
	}
	slices.SortFunc(u.Dead, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return u
}

// takeUnreached records the gaps a node passed on to this one: the keys
// this node owns in them are decided by fallback until their counters
// come, but those whose counters arrived here already: waiting for their
// keys to settle, or counted here, started from a dead run's replica or
// restored from an earlier run's snapshot (counted without a gap here, a
// restored counter was taken for lacking when a gap came later, and its
// key decided by fallback for the gap's window:
// TestACounterRestoredBeforeAGapCameIsInReach).
func (c *Core) takeUnreached(now time.Time, us []Unreached) {
	if len(us) == 0 {
		return
	}
	found := c.replicas.reachedHere()
	h := c.handoff
	h.mu.Lock()
	for k, mk := range h.keys {
		if a, ok := mk.reached(); ok {
			found[k] = found[k].with(a)
		}
	}
	h.mu.Unlock()
	if n := c.unreached.takeGaps(c.cfg.Hasher, us, c.mono(now), found); n > 0 {
		c.log.Info("keys out of reach where they come from: decided by fallback until a counter of theirs comes", "node", c.self.Name, "gaps", n)
	}
}

// lacksCounter reports whether k, which this node owns, lacks a reachable
// counter at m: fallback decides it (see outOfReach).
func (c *Core) lacksCounter(k limiter.Key, m int64) bool {
	return c.unreached.n.Load() > 0 && c.unreached.lacks(k, c.self, m, c.replaced)
}

// replaced reports whether a later run of p's node was seen: p is gone,
// and what it held with it.
func (c *Core) replaced(p Peer) bool {
	r, ok := c.known.Load().latest(p.Name)
	return ok && r.inc > p.Inc
}

// reachedCounters records that counters of the keys states carry arrived
// (and were counted, or sent on): those whose counters were out of reach
// count from now on, with what this node admitted for them in fallback,
// where these hold their counters' counts (see reachGap.holds). of is the
// run whose counters they are, holds the other runs' counts they hold.
func (c *Core) reachedCounters(now time.Time, states []limiter.State, of Peer, holds []Held) {
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
	c.unreached.reached(states, of, holds)
	keys = slices.DeleteFunc(keys, func(k limiter.Key) bool { return c.lacksCounter(k, m) })
	if len(keys) > 0 {
		c.foldFallback(now, c.view.Load(), keys)
	}
}

// evictedOutOfReach records, for the counters of this run's eviction that
// went to to, which this node takes for dead now, that their keys are out
// of reach (see outOfReach.addEvicted): to, their successor, kept their
// replicas, and the others, which declared this run dead, took the keys
// over from them there. Counted from these counters when they come back
// (the node that owns the keys now, by this node's ring, gets them in
// their place), the keys would admit again what to admitted.
func (c *Core) evictedOutOfReach(now time.Time, to Peer, states []limiter.State) {
	until := c.mono(now) + int64(c.cfg.HandoffWindow)
	added := 0
	for _, s := range states {
		ring, ok := c.replicaRingOf(s.Key, to)
		if ok && c.unreached.addEvicted(ring, c.self, to, until) {
			added++
		}
	}
	if added > 0 {
		c.log.Info("evicted counters' successor out of reach: their keys are decided by fallback until a counter of theirs comes", "node", c.self.Name, "peer", to.Name)
	}
}
