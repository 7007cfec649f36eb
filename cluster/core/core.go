package core

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Core is one node's part in counting every key in exactly one place: who
// owns which key, moving counts when ownership changes, deciding for owners
// that cannot be reached, and keeping replicas for owners that may die. It
// is a state machine: time and messages come in as arguments, messages to
// send go out through its outbox, and it runs no goroutine, reads no clock
// and opens no socket. A driver feeds it: in a running node, memberlist and
// the peer RPC (package cluster); in tests, a simulator on a virtual clock.
//
// A Core is safe for concurrent use, and its parts each keep their state
// behind their own lock. Driven from one goroutine with the same inputs, it
// does the same: every message it sends is built in a deterministic order.
type Core struct {
	cfg   Config
	self  Peer
	epoch time.Time // origin of the core's monotonic readings
	log   *slog.Logger

	engine     *limiter.Engine // the counters this node owns
	reputation atomic.Pointer[limiter.ReputationPolicy]

	view   atomic.Pointer[view]            // what it routes by now
	viewMu sync.Mutex                      // serializes changes of the view
	known  atomic.Pointer[membershipState] // what the driver said of the others: replaced whole, under viewMu
	// sealedRuns holds the runs (Peer → mono of the seal, int64) that
	// sealed to this node's hand-off: a leaving run in it handed over all
	// it held of this node's keys, its leave is known complete here (see
	// runDied). Kept for appliedKeep after the last seal.
	sealedRuns sync.Map
	// calling counts this node's take items awaiting their owners' answers:
	// a leaving node is not drained while one is out (its owner may have
	// counted it; stopped then, its client is never answered).
	calling atomic.Int64

	peers      *peerTable    // breakers, leases and liveness of the others
	out        *outbox       // messages to send, transfers until acknowledged
	in         *inbox        // transfers applied, by sender
	takes      *takeLog      // outcomes of take items served, by caller
	handoff    *handoffState // keys moving here, while a hand-off is under way
	sealsGiven sealsGiven    // the nodes this node sealed to, and under which ring
	lent       *lentKeys     // keys given to a node that owns them by a newer ring
	handed     *handedKeys   // keys whose counters went to another node, and where
	fallback   *fallback     // decides for owners that cannot be reached
	replicas   *replicaStore // counters kept for the owners this node succeeds
	carried    appliedMarks  // transfers of bare additions the counts of a key hold
	unreached  outOfReach    // keys taken over whose counters are out of reach
	dirty      dirtyKeys     // keys changed here since the last replication
	appliedLog appliedLog    // transfers applied here since the last replication
	gate       *gate         // in its own ring or not, and why
	settling   heldSettles   // settlements waiting for their keys' counters
	stood      standstill    // its own pauses, and what it waits for after one
	unrefunded heldRefunds   // units given back while unsure of its keys, waiting (see holdRefund)

	blocked *slotCache[blockedEntry] // keys owners denied, until they may pass
	told    *slotCache[int64]        // remaining counts owners reported
	scores  *slotCache[float64]      // clients' scores their owners reported
	blockGn atomic.Uint64            // denials of older generations are void

	// answering: a majority of the nodes this node knows of answer it
	// (see updateAnswering); without one it counts nothing as an owner.
	answering atomic.Bool
	regained  atomic.Bool // a majority answers again: replicas kept meanwhile go on
	// lacked: a tick found this member without a majority, after it had
	// had one, and none has found it with one again since (see
	// tickStandstill); hadMajority: this run has had a majority.
	lacked      atomic.Bool
	hadMajority atomic.Bool
	// unheard: no majority answers this node yet, but one would if the
	// peers it has not heard from since it learned of them, whose calls
	// have not failed, answered (see peerState.answered): its keys wait
	// for them rather than go to fallback.
	unheard     atomic.Bool
	answeringMu sync.Mutex

	// goneWait: the mono ns the earliest lease from this node of a gone
	// run runs out, among the runs whose loans, replicas or counters given
	// to them wait for it (see leaseRunsLocked); 0: none wait.
	goneWait atomic.Int64

	takeSeq atomic.Uint64 // numbers take items sent
	stats   Stats

	// completing, if set, is called as a hand-off completes, before dead
	// members' replicas are promoted: tests measure what they lack.
	completing func(plan *handoffPlan)
	// promoting, if set, is called as replicas of owner's counts become
	// a key's counter (here, or sent on to its owner): tests measure what
	// they lack of a run that still counts.
	promoting func(owner Peer, states []limiter.State)

	tickMu        sync.Mutex
	lastReplicate int64
	lastSweep     int64
	lastReconcile int64
	strayAt       int64 // mono: when to look for counters counted under an older view

	replicaRingsMu sync.Mutex
	replicaRings   []*Ring // the latest rings replicas were acknowledged by, newest first
}

// blockedEntry is a denial remembered: until when, and under which
// generation of the shared values.
type blockedEntry struct {
	until int64
	gen   uint64
}

// Stats counts what a core did, for status pages and tests.
type Stats struct {
	Received       atomic.Uint64 // counters received in transfers that add
	Pulled         atomic.Uint64 // counters this node pulled from their previous owners
	PullCalls      atomic.Uint64 // pulls sent
	Reconciled     atomic.Uint64 // fallback counters sent to (or merged at) their owners
	ReplicaStates  atomic.Uint64 // counters sent to successors
	FromReplica    atomic.Uint64 // counters started from a dead owner's replica
	Duplicates     atomic.Uint64 // transfers received again and not applied again
	Cancelled      atomic.Uint64 // take items given up on by their callers
	Activations    atomic.Uint64 // times a peer's keys went to fallback
	HandoffsForced atomic.Uint64 // hand-offs ended by HandoffWindow rather than by seals
	// SealedFallbacks counts requests decided by fallback on a NotYetMine
	// from an owner this node had sealed to: what they admitted may reach
	// that owner only after it started counting their keys.
	SealedFallbacks atomic.Uint64
}

// view is the membership a core routes by. A view is immutable: a change
// builds a new one.
type view struct {
	ring   *Ring
	self   int          // index of this node in ring, -1 if not a member
	peers  []*peerState // aligned with ring's members; nil at self
	stable *Ring        // the ring of the last completed hand-off
	// owned is the latest ring before this one whose hand-off completed
	// with this node a member: the keys it owned there it held every count
	// of, or nil.
	owned      *Ring
	ho         *handoffPlan // nil when no hand-off is under way
	standalone bool         // a ring of this node alone, never networked
	shareOf    int          // nodes that may count a key in fallback: members less its owner, at least 1
	// quorum: the ring holds a majority of the nodes this node knows of,
	// the dead not yet forgotten included. A node without one is on the
	// small side of a split (or was paused and sees nobody yet): it counts
	// nothing as an owner and takes no dead member's keys over, so the two
	// sides of a split never count a key each.
	quorum bool
	voters int // the nodes a majority is counted of
}

// New returns a core for cfg, not yet a member of any ring but its own (and
// not of that one when it has seeds to join).
func New(cfg Config, now time.Time) *Core {
	cfg.setDefaults()
	c := &Core{
		cfg:      cfg,
		self:     cfg.Self.Peer(),
		epoch:    now,
		log:      cfg.Logger,
		engine:   cfg.Engine,
		peers:    newPeerTable(),
		out:      newOutbox(),
		in:       newInbox(),
		takes:    newTakeLog(),
		handoff:  newHandoffState(),
		lent:     newLentKeys(cfg.Engine.Stats().MaxKeys),
		handed:   newHandedKeys(cfg.Engine.Stats().MaxKeys),
		fallback: newFallback(cfg.Engine.Stats().MaxKeys, cfg.Fallback, cfg.FallbackRatio),
		replicas: newReplicaStore(cfg.Engine.Stats().MaxKeys),
		gate:     newGate(!cfg.Joining),
		blocked:  newSlotCache[blockedEntry](cfg.CacheSlots),
		told:     newSlotCache[int64](cfg.CacheSlots),
		scores:   newSlotCache[float64](cfg.CacheSlots),
	}
	c.out.epoch = c.gate.joinEpoch
	c.stood.after = int64(cfg.CallTimeout)
	c.known.Store(&membershipState{})
	c.viewMu.Lock()
	c.rerouteLocked(now)
	c.viewMu.Unlock()
	return c
}

// NewStandalone returns a core that owns every key and never talks to
// anyone: Tollgate without a cluster, paying nothing for one.
func NewStandalone(engine *limiter.Engine, now time.Time) *Core {
	c := New(Config{Self: Member{Name: "local"}, Engine: engine, CacheSlots: 64}, now)
	c.view.Store(&view{ring: c.view.Load().ring, self: 0, peers: []*peerState{nil}, stable: c.view.Load().ring, standalone: true, shareOf: 1})
	c.updateAnswering()
	return c
}

// mono returns now as nanoseconds since the core's epoch, by the
// monotonic clock when now carries one: a step of the wall clock is not a
// pause.
func (c *Core) mono(now time.Time) int64 { return int64(now.Sub(c.epoch)) }

// Self returns this run of the node.
func (c *Core) Self() Peer { return c.self }

// Engine returns the engine of the counters this node owns.
func (c *Core) Engine() *limiter.Engine { return c.engine }

// Ring returns the ring the core routes by.
func (c *Core) Ring() *Ring { return c.view.Load().ring }

// Owner returns the member that owns k by the ring the core routes by.
func (c *Core) Owner(k limiter.Key) (Member, bool) { return c.view.Load().ring.Owner(k.Route()) }

// Successor returns the member that keeps k's replica and grants its owner
// the lease to count it: the one that would own k if its owner were gone.
// ok is false while the ring has fewer than two members.
func (c *Core) Successor(k limiter.Key) (Member, bool) {
	return c.view.Load().ring.Successor(k.Route())
}

// Member reports whether this node counts the keys its ring gives it.
func (c *Core) Member() bool { return c.view.Load().self >= 0 }

// Stats returns the core's counters.
func (c *Core) Stats() *Stats { return &c.stats }

// HandoffUnderway reports whether keys may still be on their way here.
func (c *Core) HandoffUnderway() bool { return c.view.Load().ho != nil }

// SetReputation sets the reputation policy applied to zones whose owner is
// not the client's, and to fallback limits.
func (c *Core) SetReputation(p *limiter.ReputationPolicy) {
	c.reputation.Store(p)
	c.engine.SetReputation(p)
}

// SetFallback changes what the node does for owners it cannot reach; a
// ratio outside (0, 1] means DefaultFallbackRatio.
func (c *Core) SetFallback(mode FallbackMode, ratio float64) { c.fallback.set(mode, ratio) }

// Fallback returns the fallback mode and ratio in force.
func (c *Core) Fallback() (FallbackMode, float64) { return c.fallback.mode(), c.fallback.ratio() }

// FallbackKeys returns how many counters the node keeps for owners it
// could not reach.
func (c *Core) FallbackKeys() int { return c.fallback.engine.Stats().Keys }

// Outbox returns the messages waiting to be sent, and forgets them: the
// driver sends each and reports the outcome of those that expect a reply.
func (c *Core) Outbox() []Outgoing { return c.out.drain() }

// notifyOutbox tells the driver that messages wait.
func (c *Core) notifyOutbox() {
	if f := c.cfg.Hooks.Outbox; f != nil {
		f()
	}
}

// notifySettled tells the driver that waiting requests should look again.
func (c *Core) notifySettled() {
	if f := c.cfg.Hooks.Settled; f != nil {
		f()
	}
}

// Tick lets time pass: pings and probes, transfers sent again, the
// hand-off's progress, replication, the join, and sweeps. The driver calls
// it often (every ReplicateEvery or so).
func (c *Core) Tick(now time.Time) {
	m := c.mono(now)
	c.tickMu.Lock()
	replicate := m-c.lastReplicate >= int64(c.cfg.ReplicateEvery)
	if replicate {
		c.lastReplicate = m
	}
	sweep := m-c.lastSweep >= int64(time.Second)
	if sweep {
		c.lastSweep = m
	}
	stray := c.strayAt != 0 && m >= c.strayAt
	if stray {
		c.strayAt = 0
	}
	reconcile := m-c.lastReconcile >= int64(c.cfg.CallTimeout)
	if reconcile {
		c.lastReconcile = m
	}
	c.tickMu.Unlock()

	v := c.view.Load()
	if v.standalone {
		return
	}
	c.tickStandstill(now, m)
	c.tickPeers(now, m, v)
	c.tickTransfers(now, m)
	c.tickHandoff(now, m)
	c.tickSettles(now)
	c.tickRefunds(now)
	if stray {
		c.pushStray(now)
	}
	if reconcile {
		c.reconcile(now, v)
	}
	if replicate {
		c.replicate(now, m)
	}
	c.tickGate(now)
	if c.unreached.expire(m) {
		c.foldFallback(now, c.view.Load(), nil) // their keys count what they hold now
	}
	if c.regained.Swap(false) {
		c.viewMu.Lock()
		if v := c.view.Load(); c.majority(v) {
			c.handOverReplicas(now, v)
		}
		c.viewMu.Unlock()
	}
	if sweep {
		c.fallback.sweep(now)
		c.replicas.sweep(now)
		c.replicas.forgetApplied(m)
		c.takes.forgetAdopted(m - int64(appliedKeep))
		c.forgetSealedRuns(m - int64(appliedKeep))
		c.in.sweep(m, c.peers)
		c.in.forget(m - int64(appliedKeep))
		c.carried.held.forget(m - int64(appliedKeep))
		c.carried.fallback.forget(m - int64(appliedKeep))
	}
	c.notifyOutbox()
}

// majority reports whether this node may count keys as their owner, and
// take a dead member's keys over, by v: v's ring holds a majority of the
// nodes it knows of, and a majority answer it.
func (c *Core) majority(v *view) bool { return v.standalone || v.quorum && c.answering.Load() }

// replicaRingsKept is how many of the latest rings this node replicated
// by it remembers.
const replicaRingsKept = 4

// noteReplicaRing records ring as the latest a successor acknowledged a
// replica by.
func (c *Core) noteReplicaRing(ring *Ring) {
	c.replicaRingsMu.Lock()
	defer c.replicaRingsMu.Unlock()
	if len(c.replicaRings) > 0 && c.replicaRings[0].Fingerprint() == ring.Fingerprint() {
		return
	}
	c.replicaRings = append([]*Ring{ring}, c.replicaRings[:min(len(c.replicaRings), replicaRingsKept-1)]...)
}

// replicaHolder returns the node that holds k's latest replica, by what
// successors acknowledged: k's successor by the latest ring this node
// owned k by and replicated by.
func (c *Core) replicaHolder(k limiter.Key) (Member, bool) {
	c.replicaRingsMu.Lock()
	defer c.replicaRingsMu.Unlock()
	for _, r := range c.replicaRings {
		owner, second := r.top2(k.Route())
		if owner >= 0 && second >= 0 && r.member(owner).Name == c.self.Name {
			return r.member(second), true
		}
	}
	return Member{}, false
}

// replicaRingOf returns the latest ring this node owned k by and
// replicated by whose successor of k is to.
func (c *Core) replicaRingOf(k limiter.Key, to Peer) (*Ring, bool) {
	c.replicaRingsMu.Lock()
	defer c.replicaRingsMu.Unlock()
	for _, r := range c.replicaRings {
		owner, second := r.top2(k.Route())
		if owner >= 0 && second >= 0 && r.member(owner).Name == c.self.Name && r.member(second).Peer() == to {
			return r, true
		}
	}
	return nil, false
}

// updateAnswering works out whether a majority of the nodes this node
// knows of (its ring's members and the dead not yet forgotten) answer it:
// itself and the members that have answered it (see peerState.answered)
// and whose calls do not fail since. A ring can look like a
// majority while the nodes on the far side of a split are declared dead
// one by one; the members that stopped answering tell it is not.
func (c *Core) updateAnswering() {
	c.answeringMu.Lock()
	defer c.answeringMu.Unlock()
	v := c.view.Load()
	if v == nil {
		return
	}
	answering, unheard := 0, 0
	for i, p := range v.peers {
		switch {
		case i == v.self || p != nil && p.reachState() != down && p.answered.Load():
			answering++
		case p != nil && p.reachState() != down:
			unheard++
		}
	}
	now := v.standalone || 2*answering > v.voters
	if now {
		c.hadMajority.Store(true)
	}
	c.unheard.Store(!now && 2*(answering+unheard) > v.voters)
	if was := c.answering.Swap(now); now && !was {
		c.regained.Store(true) // Tick sends on the replicas kept meanwhile
	}
}

// quorumLocked reports whether ring holds a majority of the nodes this
// node knows of: its members and the dead ones (the driver forgets a dead
// node after a while, and then it no longer counts). Nodes leaving or
// joining do not count, nor does a dead node that announced it was
// leaving: it counts nothing on any side of a split, and memberlist
// reports a node that left gracefully as one that died
// (TestNodesThatLeftDoNotCountForAMajorityThoughReportedDead). viewMu is
// held.
func (c *Core) quorumLocked(ring *Ring) (quorum bool, voters int) {
	voters = ring.Len()
	known := c.known.Load()
	for _, d := range known.dead {
		if r, ok := known.run(d); ring.Has(d.Name) || ok && r.leaving {
			continue
		}
		voters++
	}
	return 2*ring.Len() > voters, voters
}

// others returns the nodes that are not members: leaving, joining, and
// dead (until the driver forgets them: a dead member's silence decides
// when its keys are taken over).
func (k membershipState) others() []Member {
	out := append(slices.Clone(k.leaving), k.joining...)
	for _, d := range k.dead {
		out = append(out, Member{Name: d.Name, Inc: d.Inc})
	}
	return out
}

// run returns what is known of the run p.
func (k membershipState) run(p Peer) (seenRun, bool) {
	for _, r := range k.seen[p.Name] {
		if r.inc == p.Inc {
			return r, true
		}
	}
	return seenRun{}, false
}

// latest returns the latest run of name seen.
func (k membershipState) latest(name string) (seenRun, bool) {
	runs := k.seen[name]
	if len(runs) == 0 {
		return seenRun{}, false
	}
	return runs[len(runs)-1], true
}

// rePlace puts what arrived for keys moving here, under the view before,
// where it belongs under the view now: still waiting, counted, or sent on.
// What others sent goes on as it came (purposeForward), not as this node's
// own counters: additions stay additions if their receiver refuses them
// and the view changes again (a counter handed over and refused is placed
// anew as a copy, which would swallow what others admitted), and a peer
// that gets back the keys they belong to is called again only once it has
// them (see recover). This node's own counters that came back (handed over
// to a receiver that went) go on as its hand-off: if it is declared dead
// while they are refused, they are counters it holds (see evict), which
// their taker weighs against the replicas it started from, not additions
// on top of them.
func (c *Core) rePlace(now time.Time, a arrived) {
	c.debugCounts("arrived for keys not settled, placed anew: copies", a.bases)
	c.debugCounts("arrived for keys not settled, placed anew: additions", a.adds)
	c.debugCounts("arrived for keys not settled, placed anew: own counters", a.owns)
	c.debugCounts("arrived for keys not settled, placed anew: whole copies", a.copies)
	c.placeBases(now, a)
	c.placeAdds(now, a.adds)
	c.placeAs(now, Transfer{Mode: ModeAdd, Own: true}, purposeHandoff, a.owns)
	c.place(now, ModeCopy, purposeForward, a.copies)
	c.placeArrivals(now, a.counters)
	c.refundEach(now, a.refunds)
}

// placeAdds places anew the additions that arrived for keys not settled
// (what others admitted in fallback), each key's naming the transfers of
// bare additions its counts hold that this node applied, or that came
// named with them (see keyApplied), as a pull's answer names them: the
// record goes with the counts. It stays here too (of, not take): counts
// placed here again, their key still moving here and this node without a
// majority, wait without renewing it. Placed anew naming nothing, they
// were added again where their sender, its transfer here unacknowledged
// and this run taken for gone, had sent them again in its place.
func (c *Core) placeAdds(now time.Time, adds []limiter.State) {
	var lists [][]Applied
	var groups [][]limiter.State
	for _, s := range adds {
		list := c.carried.held.of([]limiter.Key{s.Key})
		i := slices.IndexFunc(lists, func(l []Applied) bool { return slices.Equal(l, list) })
		if i < 0 {
			i = len(lists)
			lists, groups = append(lists, list), append(groups, nil)
		}
		groups[i] = append(groups[i], s)
	}
	for i, group := range groups {
		c.placeAs(now, Transfer{Mode: ModeAdd, Applied: lists[i]}, purposeForward, group)
	}
}

// placeBases places anew the newest copies that arrived for keys not
// settled, with the runs' counts this node holds for the keys (they are
// in the copies: see noteHeld), which go with them. A copy may be of
// several counters (a replica, this node's own counter refused): it names
// none.
func (c *Core) placeBases(now time.Time, a arrived) {
	if len(a.bases) == 0 {
		return
	}
	c.placeAs(now, Transfer{Mode: ModeNewer, Holds: c.replicas.takeHeld(keysOf(a.bases))}, purposeForward, a.bases)
}

// placeArrivals places anew counters that came naming their runs, or the
// other runs' counts they hold, as they came: where they are counted,
// they are weighed against what is held there of those runs.
func (c *Core) placeArrivals(now time.Time, counters []arrival) {
	for _, a := range counters {
		if c.debugOn() {
			c.debugCounts("arrived for keys not settled, placed anew: a counter as it came", []limiter.State{a.state}, "counters_of", a.of.Name, "holds", len(a.holds), "own", a.own)
		}
		if a.own {
			c.placeAs(now, Transfer{Mode: ModeAdd, Own: true, Holds: a.holds, Resent: a.resent}, purposeHandoff, []limiter.State{a.state})
			continue
		}
		like := Transfer{Mode: ModeAdd, CountersOf: a.of, Holds: a.holds, Resent: a.resent, Last: a.last}
		if a.copy {
			like.Mode, like.Applied = ModeCopy, a.applied
		}
		a.mark(&like)
		c.placeAs(now, like, purposeForward, []limiter.State{a.state})
	}
}

// Membership is what the driver knows of the other nodes.
type Membership struct {
	// Members are the other nodes that count keys: alive, joined, not
	// leaving.
	Members []Member
	// Leaving are nodes that announced they are leaving: they count
	// nothing, but still hand over what they hold.
	Leaving []Member
	// Joining are nodes that announced themselves but have not joined
	// yet: they count nothing. A later run of a node that was a member
	// tells that the earlier run died.
	Joining []Member
	// Dead are nodes declared dead (failed, not left): what they counted
	// lives on in their replicas. A node not listed anywhere left.
	Dead []Peer
}

// membershipState is the last Membership the driver gave, and the latest
// run of each node ever seen.
type membershipState struct {
	members []Member
	leaving []Member
	joining []Member
	dead    []Peer
	seen    map[string][]seenRun // the two latest runs of each node, oldest first
}

// seenRun is the latest run of a node seen, whether it was a member, and
// whether it announced it was leaving (it hands over what it holds: it
// did not die).
type seenRun struct {
	inc     uint64
	member  bool
	leaving bool
	joining bool // it was seen joining: it joined this node's cluster, not the other way round
}

// noteSeen records the runs the lists name.
func (k *membershipState) noteSeen() {
	if k.seen == nil {
		k.seen = map[string][]seenRun{}
	}
	note := func(name string, inc uint64, member, leaving, joining bool) {
		runs := k.seen[name]
		for i := range runs {
			if runs[i].inc == inc {
				runs[i].member = runs[i].member || member
				runs[i].leaving = runs[i].leaving || leaving
				runs[i].joining = runs[i].joining || joining
				return
			}
		}
		if n := len(runs); n > 0 && runs[n-1].inc > inc {
			return // older than what is known
		}
		runs = append(runs, seenRun{inc: inc, member: member, leaving: leaving, joining: joining})
		if len(runs) > 2 {
			runs = runs[len(runs)-2:]
		}
		k.seen[name] = runs
	}
	for _, m := range k.members {
		note(m.Name, m.Inc, true, false, false)
	}
	for _, m := range k.leaving {
		note(m.Name, m.Inc, true, true, false)
	}
	for _, m := range k.joining {
		note(m.Name, m.Inc, false, false, true)
	}
	for _, d := range k.dead {
		note(d.Name, d.Inc, false, false, false)
	}
}

// joinedStable returns, for a node whose join hand-off is under way when
// its view changes again, where it takes its keys to be: its stable ring
// with the members its last view added. The stable ring of a joining node
// is only its guess at where its keys are (the ring it saw before it
// joined, perhaps a few members of many: a node declared dead that saw
// the others go one by one); a member it learnt of since may hold its keys
// (it answers a pull with them, or says where they are), and one that
// dies before the join completes is a dead member whose keys start from
// their replicas, here too.
func (c *Core) joinedStable(old *view) *Ring {
	ms := old.stable.Members()
	for _, x := range old.ring.members {
		if x.Name != c.self.Name && !old.stable.Has(x.Name) {
			ms = append(ms, x)
		}
	}
	if len(ms) == old.stable.Len() {
		return old.stable
	}
	return NewRing(c.cfg.Hasher, ms)
}

// joinedLate returns the ring this node's keys come from when it entered
// its ring before it heard of anyone (its driver said a seed answered
// before it listed the members, or no seed answered in time, or it joined
// again after it was declared dead while it took every other node for
// dead) and now learns members it never saw join: they were counting
// every key without it, those it owns now among them, so it joins them,
// and those keys come through its hand-off like any joining node's.
// Without such members it returns stable.
func (c *Core) joinedLate(known *membershipState, stable, ring *Ring) *Ring {
	var there []Member
	for _, x := range ring.members {
		if x.Name == c.self.Name {
			continue
		}
		if r, ok := known.run(x.Peer()); ok && r.joining {
			continue // it joined this node's cluster
		}
		there = append(there, x)
	}
	if len(there) == 0 {
		return stable
	}
	c.log.Info("entered the ring before hearing of its members: taking the keys it owns from them", "node", c.self.Name, "members", len(there))
	return NewRing(c.cfg.Hasher, there)
}

// SetMembership tells the core who the other nodes are. When the ring
// changes, the core hands over the counters it no longer owns and starts
// waiting for those that move to it.
func (c *Core) SetMembership(now time.Time, m Membership) {
	c.viewMu.Lock()
	known := &membershipState{
		members: slices.DeleteFunc(slices.Clone(m.Members), func(x Member) bool { return x.Name == c.self.Name }),
		leaving: slices.DeleteFunc(slices.Clone(m.Leaving), func(x Member) bool { return x.Name == c.self.Name }),
		joining: slices.DeleteFunc(slices.Clone(m.Joining), func(x Member) bool { return x.Name == c.self.Name }),
		dead:    slices.Clone(m.Dead),
		seen:    make(map[string][]seenRun, len(c.known.Load().seen)),
	}
	for name, runs := range c.known.Load().seen {
		known.seen[name] = slices.Clone(runs)
	}
	known.noteSeen()
	c.known.Store(known)
	c.rerouteLocked(now)
	c.viewMu.Unlock()
	c.notifyOutbox()
	c.notifySettled()
}

// rerouteLocked builds the view from what is known and, if the ring
// changed, moves what changed owner. viewMu is held.
func (c *Core) rerouteLocked(now time.Time) {
	known := c.known.Load()
	old := c.view.Load()
	if old != nil && old.standalone {
		return
	}
	member := c.gate.member()
	ms := slices.Clone(known.members)
	if member {
		ms = append(ms, c.cfg.Self)
	}
	ring := NewRing(c.cfg.Hasher, ms)
	selfIdx := -1
	if i, ok := ring.index(c.self.Name); ok {
		selfIdx = i
	}
	m := c.mono(now)
	if old != nil && old.ring.Fingerprint() == ring.Fingerprint() && (old.self >= 0) == (selfIdx >= 0) {
		// The same ring: who is leaving or dead, or a peer's address,
		// changed. A hand-off under way waits for the sources it has now: a
		// source that left handed everything over before it went.
		v := *old
		v.ring, v.self = ring, selfIdx
		v.quorum, v.voters = c.quorumLocked(ring)
		heard := heardMap(c.peers.heardAll())
		var moving arrived
		if old.ho != nil {
			v.ho = c.planHandoff(now, old, old.stable, ring)
			if v.ho == nil {
				v.stable = ring
			}
			moving = c.handoff.takeArrived()
			c.handoff.reset(v.ho, v.ho == nil)
		}
		v.peers = c.peers.match(ring, known.others(), c.self.Name, m, c.answering.Load())
		c.downDead(known, m)
		c.view.Store(&v)
		c.updateAnswering()
		// A borrower gone while this node's ring stayed as it was: nothing
		// else ends its loans (it may be a run this node never listed as a
		// member). Only once its lease from this node ran out: cut off, not
		// dead, it counts the key until then, and this node, counting it
		// again meanwhile, would count it beside it
		// (TestALenderWaitsForACutOffBorrowersLeaseBeforeItCountsTheKeyAgain).
		// A tick ends the loan then (see tickGone). Before the transfers to
		// it are given up on, so that their counts come here, not to it
		// again.
		c.endGoneLoansLocked(m)
		c.deadReceivers(now, heard.of)
		c.replaceRefusedLocked(now)
		c.rePlace(now, moving)
		// A run that died while this ring stayed as it was (a borrower
		// this node never listed as a member) may have replicated here
		// what it applied, the counters given to it included: its
		// replicas go where their keys are counted, as on a ring change,
		// once its lease from this node ran out (see handOverReplicas).
		if c.majority(&v) {
			c.handOverReplicas(now, &v)
		}
		return
	}
	stable := ring
	if old != nil {
		stable = old.ring
		if old.ho != nil {
			stable = old.stable // the hand-off to it never completed
			if old.ho.joined {
				stable = c.joinedStable(old)
			}
		}
	}
	if selfIdx >= 0 && c.gate.enteredLate() && stable.Len() == 1 && stable.Has(c.self.Name) {
		stable = c.joinedLate(known, stable, ring)
	}
	heard := heardMap(c.peers.heardAll()) // before the peers that are gone are dropped
	var ho *handoffPlan
	if selfIdx >= 0 {
		ho = c.planHandoff(now, old, stable, ring) // before the peers of dead members are dropped
	}
	v := &view{ring: ring, self: selfIdx, stable: stable, ho: ho}
	if old != nil {
		v.owned = old.owned
		if old.stable.Has(c.self.Name) {
			v.owned = old.stable
		}
	}
	v.quorum, v.voters = c.quorumLocked(ring)
	v.peers = c.peers.match(ring, known.others(), c.self.Name, m, c.answering.Load())
	c.downDead(known, m)
	if v.ho == nil {
		v.stable = ring
	}
	v.shareOf = max(1, max(ring.Len(), v.stable.Len())-1)
	moving := c.handoff.takeArrived()
	c.handoff.reset(v.ho, old == nil || old.ho == nil || old.stable != v.stable)
	c.view.Store(v)
	c.updateAnswering()
	if old != nil {
		c.lent.keepOwned(ring, c.self.Name, func(to Peer) bool { return c.goneLocked(to) && !c.leaseRunsLocked(to, m) })
		c.handed.keepOwned(ring, c.self.Name, func(to Peer) bool { return c.runDied(to) || c.replacedLocked(to) })
		c.deadReceivers(now, heard.of)
		c.replaceRefusedLocked(now)
		c.rePlace(now, moving)
		c.handOver(now, v)
		c.resync(now, old.ring, ring)
		c.replicas.supersede(ring, c.self.Name)
		c.sealsGiven.passed(ring)
		c.tickMu.Lock()
		c.strayAt = m + int64(c.cfg.CallTimeout)
		c.tickMu.Unlock()
		c.log.Info("cluster membership changed", "node", c.self.Name, "members", ring.Len(), "ring", ring.Fingerprint(), "member", v.self >= 0, "handoff", v.ho != nil)
		if v.ho != nil && c.debugOn() {
			c.log.Debug("hand-off waits for", "node", c.self.Name, "sources", v.ho.sources, "dead", len(v.ho.dead), "joined", v.ho.joined, "stable", v.stable.Fingerprint())
		}
	}
}
