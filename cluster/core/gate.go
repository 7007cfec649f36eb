package core

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// The gate: whether this node is in its own ring, counting the keys the
// ring gives it.
//
// Joining. A node with seeds starts outside its ring: it forwards what has
// a reachable owner and decides the rest by fallback, and its driver
// announces it as joining, so the others leave it out of their rings too.
// Once a seed answered (Joined) and it knows a member (or a probe interval
// passed without one), it sends the counters it kept from before (a
// snapshot read back: RestoreCounters) to their owners as copies
// (ModeCopy, naming the run that counted them: each owner counts them once
// against what it holds of that run, never two copies of its counts), and
// once all are acknowledged it enters its ring. The keys that move to it
// then come through the hand-off like any joining node's; a node that
// entered alone takes the keys it owns from the members it then learns of
// (see joinedLate).
//
// Leaving. A node that leaves steps out of its ring at once, hands every
// counter to its new owner, and refuses transfers that would add counts
// to it; its driver waits until all are acknowledged (Drained).
//
// Declared dead. A node that hears from a peer that the peer declared it
// dead (a Pong with Dead) stops counting at once: the peer may start, or
// have started, its keys from their replicas. It sends everything it holds
// to the owners as copies and joins again under a new join epoch; if it
// then knows no member (it took every other node for dead), it takes the
// keys it owns from the members it learns of again, like a node that
// entered alone (see joinedLate). A node
// that took over a dead node's keys answers its pings with Dead until it
// pings with an epoch later than the one it had then, and hands keys to it
// as copies, since it may still hold older counts of them. A leaving node
// told so does the same but for joining again: it may have been cut off
// while it left, and the others, which never heard it leave, took its keys
// over; under the new epoch they answer its pings again, and what it still
// holds (what it admitted in fallback among it) reaches them before it
// goes. Ignored, every ping of its run would be told Dead, the peers would
// stay down to it, and it would leave with those counts.

// gate holds the node's standing in its own ring. It is safe for
// concurrent use.
type gate struct {
	isMember atomic.Bool
	leaving  atomic.Bool
	wasOut   atomic.Bool   // declared dead: what it held went out as copies
	entered  atomic.Bool   // it entered its ring through the gate: joining, or again after it was declared dead
	epoch    atomic.Uint64 // join epoch, sent in pings

	mu      sync.Mutex
	ready   bool   // it may join: a seed answered, or it has none
	readyAt int64  // mono: when Joined was called
	held    []Kept // what earlier runs kept, to send to their owners before joining
	took    map[string]tookRecord
}

// tookRecord is a node whose keys this node took over, as of its join
// epoch then (0: not known yet, learnt from its next ping).
type tookRecord struct {
	inc   uint64
	epoch uint64
}

func newGate(member bool) *gate {
	g := &gate{took: map[string]tookRecord{}}
	g.isMember.Store(member)
	g.ready = member
	g.epoch.Store(1)
	return g
}

func (g *gate) member() bool      { return g.isMember.Load() && !g.leaving.Load() }
func (g *gate) isLeaving() bool   { return g.leaving.Load() }
func (g *gate) evicted() bool     { return g.wasOut.Load() }
func (g *gate) enteredLate() bool { return g.entered.Load() }
func (g *gate) joinEpoch() uint64 { return g.epoch.Load() }

// tookOver records that this node takes over x's keys as of x's epoch.
func (g *gate) tookOver(x Peer, epoch uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.took[x.Name]; ok && r.inc == x.Inc && r.epoch >= epoch {
		return
	}
	g.took[x.Name] = tookRecord{inc: x.Inc, epoch: epoch}
}

// saysDead reports whether a ping from x at epoch (counting: x is a member
// under it) must be told that this node took its keys over; a later epoch
// (x joined again since) clears the record.
func (g *gate) saysDead(x Peer, epoch uint64, counting bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.took[x.Name]
	switch {
	case !ok:
		return false
	case r.inc != x.Inc:
		delete(g.took, x.Name)
		return false
	case r.epoch == 0 && !counting:
		// x learnt from another node that it was declared dead, and joins
		// again: the run taken over counted under an earlier epoch. What x
		// sends under this one (what it held, as it stopped) is taken.
		r.epoch = epoch - 1
		g.took[x.Name] = r
		return false
	case r.epoch == 0:
		r.epoch = epoch
		g.took[x.Name] = r
		return true
	case epoch > r.epoch:
		delete(g.took, x.Name)
		return false
	}
	return true
}

// tookOverAt reports whether this node took over x's keys as of x's
// epoch (or at an epoch it does not know yet).
func (g *gate) tookOverAt(x Peer, epoch uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.took[x.Name]
	return ok && r.inc == x.Inc && (r.epoch == 0 || epoch <= r.epoch)
}

// Joined tells the core that a seed answered (or that it waited long
// enough for one): it sends the copies it kept to their owners and enters
// its ring once they are acknowledged (see mayJoinLocked).
func (c *Core) Joined(now time.Time) {
	g := c.gate
	g.mu.Lock()
	if g.ready {
		g.mu.Unlock()
		return
	}
	g.ready = true
	g.readyAt = c.mono(now)
	g.mu.Unlock()
	c.tickGate(now)
}

// mayJoinLocked reports whether the node may send its copies and enter
// its ring: a seed answered, and it knows a member. A node with seeds that
// knows none yet waits a probe interval for its driver to list them: the
// driver says a seed answered as soon as it did, and lists the members it
// learnt a moment later. Sending its copies meanwhile, it would keep them
// all, as the owner of every key; entering its ring alone, it would count
// every key from nothing while the others count them too. The wait counts
// only time the node ran: one that stood still meanwhile (its driver's
// member list queued behind the pause) waits a probe interval again from
// the pause's end. g.mu is held.
func (c *Core) mayJoinLocked(now time.Time) bool {
	g := c.gate
	if !g.ready {
		return false
	}
	from := max(g.readyAt, c.stood.resumed.Load())
	return !c.cfg.Joining || len(c.known.Load().members) > 0 || c.mono(now) >= from+int64(c.cfg.ProbeInterval)
}

// Kept is what a run of a node kept of its counters (and reputations,
// grants, leases) for a later run of the node to read back when it
// starts: a snapshot.
type Kept struct {
	// Run is the run that counted them. None (a snapshot of a format that
	// did not name it): its counters are copies, possibly older, of counts
	// the cluster may hold and have added to since, which nothing tells
	// apart from other counts of the key: their owners keep the newer of
	// theirs and these, never the sum.
	Run Peer
	// At is when the run kept them, in Unix ns.
	At int64
	// States are the counters, reputations, grants and leases kept.
	States []limiter.State
	// Holds are the other runs' counts the counters hold (see
	// Transfer.Holds).
	Holds []Held
	// Applied are the transfers of what other nodes admitted that the run
	// had applied to these counters and whose senders may not have had
	// them acknowledged: a sender that gives one up, the run gone, sends
	// its counts on in place of it, and the copies of these counters must
	// not add them again (see Transfer.Applied).
	Applied []KeptApplied
	// Resent are the counts sent again in place of transfers to runs
	// taken for dead that the counters hold (see Transfer.Resent): a
	// counter of such a run that comes saying it applied one must not add
	// them again.
	Resent []Resent
}

// KeptApplied is a transfer a run applied whose counts all joined the
// counters it kept: its sender's run and number, and the keys of its
// counts.
type KeptApplied struct {
	From Peer
	Seq  uint64
	Keys []limiter.Key
}

// keptNamedWithin is how long after a run kept its counters a later run
// sends them naming that run: while every record of that run's counts
// that the cluster's counters may hold (taken from its replicas, or from
// its counters handed over or sent on, all after it kept them) is still
// remembered (appliedKeep), with room for their delivery. Past it they go
// as copies that name no run: the newer stands.
const keptNamedWithin = appliedKeep / 2

// Keep returns what this run keeps of states, counters of its engine read
// for a snapshot at now: naming this run, the other runs' counts the
// counters hold, and the transfers applied to them whose senders may not
// have had them acknowledged (those of keys states all hold). The counters
// of those transfers' keys are read again: one applied after the driver
// read states is in them too.
func (c *Core) Keep(now time.Time, states []limiter.State) Kept {
	var applied []KeptApplied
	if counted := c.countedApplied(); len(counted) > 0 {
		in := keySet(states)
		again := map[limiter.Key]bool{}
		for _, a := range counted {
			if allIn(a.Keys, in) {
				applied = append(applied, a)
				for _, k := range a.Keys {
					again[k] = true
				}
			}
		}
		if len(again) > 0 {
			states = readAgain(states, again, c.engine.StatesOf(now, slices.Sorted(maps.Keys(again))))
		}
	}
	var keys []limiter.Key
	for _, s := range states {
		if s.Kind < limiter.KindGrant {
			keys = append(keys, s.Key)
		}
	}
	holds := sortHolds(append(c.replicas.heldOf(keys), c.replicas.ownHeld(c.self, states)...))
	return Kept{Run: c.self, At: now.UnixNano(), States: states, Holds: holds, Applied: applied, Resent: c.replicas.resentHeldOf(keys)}
}

// countedApplied returns, sorted by sender and number, the transfers of
// what others admitted that this run applied, whose senders may not have
// had them acknowledged, and whose counts all joined its counters: at
// once, or later (kept in fallback first for want of a majority, or
// waiting for their keys), their counts going on naming the transfer as
// applied here (Core.carried).
func (c *Core) countedApplied() []KeptApplied {
	return c.in.counted(func(a KeptApplied) bool {
		return c.carried.held.holds(Applied{From: a.From, Seq: a.Seq, By: c.self}, a.Keys)
	})
}

// readAgain returns states with the counters of the keys again replaced by
// those read again (now), where the engine still holds them.
func readAgain(states []limiter.State, again map[limiter.Key]bool, now []limiter.State) []limiter.State {
	cur := make(map[limiter.Key]limiter.State, len(now))
	for _, s := range now {
		if s.Kind < limiter.KindGrant {
			cur[s.Key] = s
		}
	}
	out := slices.Clone(states)
	for i, s := range out {
		if n, ok := cur[s.Key]; ok && again[s.Key] && s.Kind < limiter.KindGrant {
			out[i] = n
		}
	}
	return out
}

// keySet returns the keys of the counters among states.
func keySet(states []limiter.State) map[limiter.Key]bool {
	set := make(map[limiter.Key]bool, len(states))
	for _, s := range states {
		if s.Kind < limiter.KindGrant {
			set[s.Key] = true
		}
	}
	return set
}

// allIn reports whether keys, not empty, are all in set.
func allIn(keys []limiter.Key, set map[limiter.Key]bool) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return len(keys) > 0
}

// RestoreCounters takes counters an earlier run of this node kept (a
// snapshot): copies, possibly older, of counts the cluster may hold now.
// Before the node joins they wait; after, they go to their owners at once.
// Where they name the run that counted them, each owner weighs them like
// any counter that names its run (see Transfer.CountersOf): counted once
// against what it holds of that run and of the runs they hold counts of,
// added to other counts (what others admitted in fallback meanwhile).
// Where they do not, the owner keeps the newer of its count and theirs.
func (c *Core) RestoreCounters(now time.Time, k Kept) {
	if len(k.States) == 0 {
		return
	}
	c.replicas.noteRestored(c.mono(now), k)
	g := c.gate
	g.mu.Lock()
	if !c.mayJoinLocked(now) {
		g.held = append(g.held, k)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	c.deliverHeld(now, []Kept{k})
}

// deliverHeld sends what earlier runs kept to the owners, those of keys
// this node would own or succeed (the others' owners and successors hold
// them already), as copies (ModeCopy) naming the run that kept them while
// that is recent enough to be weighed (see keptNamedWithin).
func (c *Core) deliverHeld(now time.Time, held []Kept) {
	v := c.view.Load()
	with := v.ring
	if v.self < 0 {
		with = NewRing(c.cfg.Hasher, append(v.ring.Members(), c.cfg.Self))
	}
	for _, k := range held {
		var keep []limiter.State
		for _, s := range k.States {
			owner, second := with.top2(s.Key.Route())
			if with.member(owner).Name == c.self.Name || second >= 0 && with.member(second).Name == c.self.Name {
				keep = append(keep, s)
			}
		}
		like := Transfer{Mode: ModeCopy}
		named := k.Run.Name != "" && now.UnixNano()-k.At <= int64(keptNamedWithin)
		if named {
			like.CountersOf, like.Holds, like.Applied = k.Run, holdsOf(k.Holds, keep), appliedIn(k.Applied, keep)
			like.Resent = resentOf(k.Resent, keep)
			// A transfer the earlier run applied, sent again to this run
			// in place of it (its acknowledgement was lost), is in these
			// copies: skipped here, it counts once.
			c.replicas.noteApplied(c.mono(now), k.Run, like.Applied)
		}
		if !named {
			// Sent as copies that name no run, with no record of whose
			// counts they hold: this run's record of them says so too
			// (see restoredUnnamed).
			c.replicas.unnameRestored(k.States)
		}
		c.placeAs(now, like, purposeHeld, sortStates(keep))
		if named {
			c.log.Info("restoring counters kept from before: weighed at their owners by the run that counted them", "node", c.self.Name, "run", k.Run.Name, "run_inc", k.Run.Inc, "counters", len(keep), "not_ours", len(k.States)-len(keep))
		} else {
			c.log.Info("restoring counters kept from before: the newer of each at its owner", "node", c.self.Name, "counters", len(keep), "not_ours", len(k.States)-len(keep))
		}
	}
}

// appliedIn returns, of applied, the transfers all of whose keys states
// hold: the copies sent carry their counts.
func appliedIn(applied []KeptApplied, states []limiter.State) []Applied {
	if len(applied) == 0 {
		return nil
	}
	in := keySet(states)
	var out []Applied
	for _, a := range applied {
		if allIn(a.Keys, in) {
			out = append(out, Applied{From: a.From, Seq: a.Seq})
		}
	}
	return out
}

// tickGate enters the ring once the node may join and every copy it sent
// is acknowledged.
func (c *Core) tickGate(now time.Time) {
	g := c.gate
	if g.isMember.Load() || g.leaving.Load() {
		return
	}
	g.mu.Lock()
	ready := c.mayJoinLocked(now)
	var held []Kept
	if ready {
		held, g.held = g.held, nil
	}
	g.mu.Unlock()
	c.deliverHeld(now, held)
	if !ready || c.out.pendingFor("", purposeHeld) > 0 {
		return
	}
	c.viewMu.Lock()
	if g.isMember.Load() || g.leaving.Load() {
		c.viewMu.Unlock()
		return
	}
	g.isMember.Store(true)
	g.wasOut.Store(false)
	g.entered.Store(true)
	c.rerouteLocked(now)
	c.viewMu.Unlock()
	c.log.Info("joined: counting the keys this node owns", "node", c.self.Name, "members", c.view.Load().ring.Len(), "epoch", g.joinEpoch())
	if f := c.cfg.Hooks.Member; f != nil {
		f(true)
	}
	c.notifySettled()
}

// Leave steps this node out of its ring and hands every counter to its new
// owner; Drained reports when all are acknowledged.
func (c *Core) Leave(now time.Time) {
	c.viewMu.Lock()
	c.gate.leaving.Store(true)
	c.rerouteLocked(now)
	c.viewMu.Unlock()
	if f := c.cfg.Hooks.Member; f != nil {
		f(false)
	}
	c.reconcile(now, c.view.Load())
	c.notifyOutbox()
	c.notifySettled()
}

// Leaving reports whether the node is leaving.
func (c *Core) Leaving() bool { return c.gate.isLeaving() }

// Drained reports whether a leaving node has handed everything over: no
// transfer unacknowledged but replicas, nothing left in fallback, no
// counter in its engine, no units given back waiting for their counter
// (see refundAfterCounter) or for the node to know where their keys are
// counted (see holdRefund: a node in no ring, cut off, holds them until
// the ring names their owners again), no cancel of a take item it admitted still
// on its way to it (see callersSettled), and no take item of its own
// awaiting its owner's answer (the owner may have counted it: stopped
// then, the node never answers its client, and the unit stays counted
// for nobody; given up on, its cancel is a transfer like the others). A
// hand-off given up on because its receiver was
// declared dead comes back to the engine while no member is left to take
// it (the node is cut off): it is held, not handed over, until the split
// heals and the ring names its owner again.
func (c *Core) Drained() bool {
	return c.calling.Load() == 0 && c.HandedOver()
}

// HandedOver reports whether a leaving node has handed everything over
// and been told so (Drained but for its own take items still awaiting
// their owners' answers, which Calling counts). A node that keeps
// forwarding requests as it leaves may find none out only now and then:
// its driver tells the two apart when it stops waiting.
func (c *Core) HandedOver() bool {
	return c.out.moving("") == 0 &&
		c.fallback.empty() &&
		c.engine.Stats().Keys == 0 &&
		c.settling.empty() &&
		!c.unrefunded.waiting() &&
		c.callersSettled()
}

// Calling returns how many of this node's take items await their
// owners' answers now.
func (c *Core) Calling() int64 { return c.calling.Load() }

// evict stops this node counting, because by told it that it was declared
// dead: everything it holds goes to the owners as copies, and it pings
// under a new epoch, joining again unless it is leaving.
func (c *Core) evict(now time.Time, by string) {
	g := c.gate
	c.viewMu.Lock()
	if !g.isMember.Load() {
		c.viewMu.Unlock()
		return
	}
	g.isMember.Store(false)
	g.wasOut.Store(true)
	g.epoch.Add(1)
	c.out.retag()
	held := c.engine.Extract(now, func(limiter.Key) bool { return true }, 0)
	named := c.replicas.gaveAway(c.mono(now), c.self, held)
	holds := sortHolds(append(c.replicas.takeHeld(keysOf(held)), named...))
	// Its own counters it was handing over, and that their receivers
	// refused (so never applied), are counters it holds like the others;
	// so are the counters of its engine in flight now (not the counts it
	// passes on for others, which stay additions) if their receivers
	// refuse them.
	for _, pt := range c.out.refusedNotFor(func(pt *pendingTransfer) bool {
		// Replicas of a dead run sent on are not counters this node holds.
		return (pt.purpose == purposeHandoff || pt.purpose == purposePull) && pt.t.Mode.carriesCounts() && pt.t.ReplicaOf.Name == ""
	}) {
		held = append(held, pt.t.States...)
		holds = append(holds, pt.t.Holds...)
		// The records of the counts sent again they hold are this
		// node's counters' again, and go out with them (sendEvicted):
		// without them, the counter of a run that applied the transfer
		// those replace, where it met them, added them again
		// (TestCountsKeptInPlaceOfATransferGoWithARefusedCounterOfANodeDeclaredDead).
		c.replicas.holdResent(c.mono(now), pt.t.Resent)
	}
	c.out.markHeldIfRefused(func(pt *pendingTransfer) bool {
		return pt.purpose == purposeHandoff && pt.t.Mode == ModeAdd && pt.t.Own
	})
	c.rerouteLocked(now)
	c.debugCounts("declared dead: the counters held here go out", held)
	c.sendEvicted(now, held, holds)
	c.viewMu.Unlock()
	c.log.Warn("declared dead by a peer: counting nothing until joined again", "node", c.self.Name, "by", by)
	if f := c.cfg.Hooks.Member; f != nil {
		f(false)
	}
	c.notifySettled()
}
