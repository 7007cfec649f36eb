package core

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Peers. For every other node a core keeps whether calls reach it, when
// it last heard from it, and its lease: until when this node may count the
// keys that node would take over if this node died (their successor).
//
// Reach. A peer is reachable until a call to it fails (no answer within the
// driver's patience), or until it is declared dead. It is then down: its
// keys are decided by fallback, and one ping at a time probes it. When a
// ping is answered, it is recovering: what this node admitted in fallback
// for its keys is sent to it, and only once it has acknowledged all of it
// (and nothing more waits) is it reachable again, so an owner never
// decides without what was admitted in its absence. Its keys are the keys
// it owns by a ring it is a member of: a peer that answers while it is out
// of the ring (declared dead, and answering again before the others took
// its keys over) stays recovering until a ring lists it again, and what
// this node holds for the keys that ring gives back to it reaches it
// before this node calls it for them.
//
// Leases. A node may count a key it owns only while it holds a lease from
// the key's successor: the successor answered a ping sent at t0, which lets
// this node count until t0 + LeaseTime by its own clock. A node that has
// declared a peer dead starts the peer's keys from their replicas only once
// it has not heard from the peer for LeaseTime (and an eighth more, for the
// two clocks' drift), so a node that was paused, or cut off, has stopped
// counting before anyone else starts. A node told by a peer that it was
// declared dead stops counting at once and joins again.

// reach says whether calls go to a peer.
type reach int32

const (
	reachable  reach = iota
	down             // calls failed: its keys go to fallback
	recovering       // it answers again: fallback counts are on their way to it
)

// peerState is what a core knows of one other node's run.
type peerState struct {
	peer Peer

	reach atomic.Int32 // a reach
	lease atomic.Int64 // mono ns until which this node may count keys this peer succeeds
	heard atomic.Int64 // mono ns of the last message from it
	// answered: a message from this run of it has come since its state
	// was made, or it was made while a majority answered this node (a
	// node joining or starting again, which the members vouch for). Until
	// then it is no node that answers this one: a run that has just
	// started, or lost its majority, has no word that a peer it hears of
	// for the first time is on its side of a split. Counted as answering,
	// a run that started again on the small side of a split took a
	// majority of its ring there, and counted keys the other side counts.
	answered atomic.Bool
	epoch    atomic.Uint64 // its join epoch, from its last ping

	// mayCancel: the mono ns until which it may give up on a take item
	// this node admitted for it, and send a cancel (0: none admitted);
	// owesNothing: the mono ns a ping was sent that it answered owing
	// nothing not applied here. A leaving node waits for the second to
	// pass the first (see Core.callersSettled).
	mayCancel   atomic.Int64
	owesNothing atomic.Int64
	// pinged: the mono ns of its last ping here, not yet taken by a
	// refusal of a transfer to it (see Core.refusedRetry): a receiver that
	// refuses counts for want of a lease pings their sender at once, and
	// holds the lease once the answer reaches it.
	pinged atomic.Int64

	mu       sync.Mutex
	pinging  bool  // a ping is in flight
	nextPing int64 // mono ns
	failures int
}

func (p *peerState) reachState() reach { return reach(p.reach.Load()) }

// calls reports whether take calls go to the peer.
func (p *peerState) calls() bool { return p.reachState() == reachable }

// leased reports whether this node may count, at m, the keys p succeeds.
func (p *peerState) leased(m int64) bool { return p == nil || p.lease.Load() > m }

// noteHeard records a message from the peer at m, and reports whether
// it is the first from it.
func (p *peerState) noteHeard(m int64) (first bool) {
	first = !p.answered.Load() && !p.answered.Swap(true)
	for {
		h := p.heard.Load()
		if h >= m || p.heard.CompareAndSwap(h, m) {
			return first
		}
	}
}

// renew extends the lease to until, if that is later.
func (p *peerState) renew(until int64) {
	for {
		l := p.lease.Load()
		if l >= until || p.lease.CompareAndSwap(l, until) {
			return
		}
	}
}

// peerTable holds the state of every other node a core knows: the members
// of its ring and the nodes leaving. A peerTable is safe for concurrent use.
type peerTable struct {
	mu     sync.RWMutex
	peers  map[string]*peerState
	sorted []*peerState // peers by name, made again by match; never changed in place
}

func newPeerTable() *peerTable { return &peerTable{peers: make(map[string]*peerState)} }

// get returns the state of the node called name, or nil.
func (t *peerTable) get(name string) *peerState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[name]
}

// all returns every peer's state, sorted by name. The slice is shared:
// read it, never change it.
func (t *peerTable) all() []*peerState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.sorted
}

// match keeps a state for every member of ring but self and every node
// leaving or joining (others), a fresh one for a node whose run changed, and
// returns the states aligned with ring's members (nil at self). A new peer
// is heard from at m (it was just seen) and holds no lease yet; it answers
// (peerState.answered) if vouched: a majority answers this node.
func (t *peerTable) match(ring *Ring, others []Member, self string, m int64, vouched bool) []*peerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := make(map[string]Peer, ring.Len()+len(others))
	for _, x := range ring.members {
		want[x.Name] = x.Peer()
	}
	for _, x := range others {
		if w, in := want[x.Name]; !in || w.Inc < x.Inc {
			want[x.Name] = x.Peer()
		}
	}
	delete(want, self)
	for name, p := range t.peers {
		if w, ok := want[name]; !ok || w.Inc != p.peer.Inc {
			delete(t.peers, name)
		}
	}
	for name, peer := range want {
		if _, ok := t.peers[name]; !ok {
			p := &peerState{peer: peer}
			p.heard.Store(m)
			p.answered.Store(vouched)
			t.peers[name] = p
		}
	}
	t.sorted = make([]*peerState, 0, len(t.peers))
	for _, p := range t.peers {
		t.sorted = append(t.sorted, p)
	}
	slices.SortFunc(t.sorted, func(a, b *peerState) int { return strings.Compare(a.peer.Name, b.peer.Name) })
	out := make([]*peerState, ring.Len())
	for i, x := range ring.members {
		if x.Name != self {
			out[i] = t.peers[x.Name]
		}
	}
	return out
}

// tickPeers pings every peer each ProbeInterval (renewing leases), probes
// peers that are down, and brings recovering peers back once what was
// admitted in fallback for their keys has reached them.
func (c *Core) tickPeers(now time.Time, m int64, v *view) {
	for _, p := range c.peers.all() {
		switch p.reachState() {
		case recovering:
			c.recover(now, v, p)
		}
		p.mu.Lock()
		due := !p.pinging && m >= p.nextPing
		if due {
			p.pinging = true
			p.nextPing = m + int64(c.cfg.ProbeInterval)
		}
		p.mu.Unlock()
		if due {
			c.out.request(p.peer, c.ping(), m, nil)
		}
	}
}

// ping is what this node's pings say of it.
func (c *Core) ping() Ping {
	return Ping{Epoch: c.gate.joinEpoch(), Counting: c.gate.isMember.Load()}
}

// pingNow pings the peer at once unless a ping is in flight: a request
// waits for its lease.
func (c *Core) pingNow(p *peerState, m int64) {
	p.mu.Lock()
	send := !p.pinging
	if send {
		p.pinging = true
		p.nextPing = m + int64(c.cfg.ProbeInterval)
	}
	p.mu.Unlock()
	if send {
		c.out.request(p.peer, c.ping(), m, nil)
		c.notifyOutbox()
	}
}

// pinged records the answer to a ping sent at sent: a live peer renews the
// lease; one that declared this node dead makes it stop counting.
func (c *Core) pinged(now time.Time, p *peerState, sent int64, pong Pong) {
	m := c.mono(now)
	p.mu.Lock()
	p.pinging = false
	p.failures = 0
	p.mu.Unlock()
	first := p.noteHeard(m)
	if pong.Dead {
		c.stood.unreached(p.peer)
		c.evict(now, p.peer.Name)
		return
	}
	p.renew(sent + int64(c.cfg.LeaseTime))
	if p.reachState() == down {
		p.reach.Store(int32(recovering))
		c.updateAnswering()
		c.recover(now, c.view.Load(), p)
	} else if first {
		c.updateAnswering()
	}
	c.stood.answered(p.peer, sent, pong, func(seq uint64) bool { return c.in.has(p.peer, seq) })
	if !slices.ContainsFunc(pong.Owed, func(seq uint64) bool { return !c.in.has(p.peer, seq) }) {
		raise(&p.owesNothing, sent)
	}
	c.notifySettled()
}

// raise sets a to v if v is later.
func raise(a *atomic.Int64, v int64) {
	for {
		x := a.Load()
		if x >= v || a.CompareAndSwap(x, v) {
			return
		}
	}
}

// callerPatience bounds how long a caller waits for the answer to a take
// item before it gives up on it, decides the request by fallback and
// cancels the item (ten call timeouts: see takeLogSize).
func (c *Core) callerPatience() int64 { return 10 * int64(c.cfg.CallTimeout) }

// noteAdmittedFor records that this node admitted a take item for the
// run from at m.
func (c *Core) noteAdmittedFor(from Peer, m int64) {
	if p := c.peers.get(from.Name); p != nil && p.peer.Inc == from.Inc {
		raise(&p.mayCancel, m+c.callerPatience())
	}
}

// callersSettled reports whether every peer this node admitted take items
// for has answered a ping, sent once it could no longer be waiting on one
// of them, owing this node nothing it has not applied: no cancel of an
// item this node counted is still on its way. A leaving node waits for
// that before it goes: its counters, handed over, hold what it admitted,
// and a cancel only it can apply (it alone knows whether it counted the
// item) would otherwise never be, beside the caller's fallback count of
// the same request. A caller whose calls failed silentFailures times in a
// row is not waited for: stopped or cut off, its cancel would come after
// the leave timed out, and waiting for it only holds the leave (and a
// new run of this node) back.
func (c *Core) callersSettled() bool {
	for _, p := range c.peers.all() {
		if p.owesNothing.Load() < p.mayCancel.Load() && !p.silent() {
			return false
		}
	}
	return true
}

// pingFailed records a ping that got no answer; the next goes out a call
// timeout later.
func (c *Core) pingFailed(now time.Time, p *peerState) {
	m := c.mono(now)
	p.mu.Lock()
	p.pinging = false
	p.nextPing = m + int64(c.cfg.CallTimeout)
	p.mu.Unlock()
	c.peerFailed(p)
	if c.stood.unreached(p.peer) {
		c.notifySettled()
	}
}

// peerFailed records that a call to p got no answer: its keys go to
// fallback until it answers a ping again.
func (c *Core) peerFailed(p *peerState) {
	p.mu.Lock()
	p.failures++
	p.mu.Unlock()
	was := reach(p.reach.Swap(int32(down)))
	if was != down {
		c.updateAnswering()
	}
	if was == reachable {
		c.stats.Activations.Add(1)
		c.log.Warn("peer unreachable: counting its keys in fallback", "node", c.self.Name, "peer", p.peer.Name)
	}
	c.notifySettled()
}

// recover sends a recovering peer what this node admitted in fallback for
// the keys it owns, and makes it reachable once nothing of that is left
// unacknowledged: neither this node's fallback counts nor the counts it
// passes on to it (what others admitted in fallback, sent here while this
// node counted its keys), nor cancels and refunds. A peer outside the ring
// owns no key by it: it recovers once a ring lists it again.
func (c *Core) recover(now time.Time, v *view, p *peerState) {
	if i, ok := v.ring.index(p.peer.Name); !ok || v.ring.member(i).Inc != p.peer.Inc {
		return
	}
	if c.reconcileTo(now, v, p.peer) {
		return // sent now: wait for the acknowledgement
	}
	if c.out.pendingFor(p.peer.Name, purposeReconcile, purposeForward, purposeCancel, purposeRefund) > 0 {
		return
	}
	if p.reach.CompareAndSwap(int32(recovering), int32(reachable)) {
		c.log.Info("peer answers again: counting its keys exactly", "node", c.self.Name, "peer", p.peer.Name)
		c.notifySettled()
	}
}

// downDead makes down the peers declared dead that calls still went to:
// gossip found them failed, and what this node admits for their keys until
// they are listed again must reach them before it calls them again (see
// recover). Each is pinged at once: one that answers is recovering. viewMu
// is held.
func (c *Core) downDead(known *membershipState, m int64) {
	for _, d := range known.dead {
		if p := c.peers.get(d.Name); p != nil && p.peer == d && p.reach.CompareAndSwap(int32(reachable), int32(down)) {
			c.stats.Activations.Add(1)
			c.log.Warn("peer declared dead: counting its keys in fallback until it answers again", "node", c.self.Name, "peer", d.Name)
			c.pingNow(p, m)
		}
	}
}

// heardAll returns when each peer run was last heard from.
func (t *peerTable) heardAll() map[Peer]int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[Peer]int64, len(t.peers))
	for _, p := range t.peers {
		out[p.peer] = p.heard.Load()
	}
	return out
}

// heardOf returns when this node last heard from the run p, if it keeps
// its state: what heardAll would hold for it, read now.
func (t *peerTable) heardOf(p Peer) (int64, bool) {
	s := t.get(p.Name)
	if s == nil || s.peer != p {
		return 0, false
	}
	return s.heard.Load(), true
}

// heardMap is a heardAll taken at one moment.
type heardMap map[Peer]int64

// of returns when the run p was last heard from, as the map recorded it.
func (h heardMap) of(p Peer) (int64, bool) {
	at, ok := h[p]
	return at, ok
}

// noteHeard records a message from the run from. A message from another
// run of the node (a later run, started before this node heard of it)
// says nothing of the run the peer state is of: counted for it, it would
// keep a dead run's lease alive, and with it the transfers waiting for
// that run (see deadReceivers) and the takeover of its keys.
func (c *Core) noteHeard(from Peer, now time.Time) {
	if p := c.peers.get(from.Name); p != nil && p.peer.Inc == from.Inc {
		if p.noteHeard(c.mono(now)) {
			c.updateAnswering()
		}
	}
}

// Reachable reports whether calls go to the node called name now.
func (c *Core) Reachable(name string) bool {
	p := c.peers.get(name)
	return p != nil && p.calls()
}

// silent reports whether calls to the peer have failed silentFailures
// times in a row: it may be stopped or cut off for long.
func (p *peerState) silent() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures >= silentFailures
}

// silentFailures is how many calls in a row a peer fails before a
// leaving node stops waiting for its cancels.
const silentFailures = 3
