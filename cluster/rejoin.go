package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Joining. A node configured with seeds to join does not count any key as
// its owner until it has joined: before that its ring holds the other nodes
// it knows of, not itself (none at first), so it decides by its fallback
// mode for keys with no reachable owner and forwards the others to their
// owners, and it announces itself as joining in its metadata, so the others
// leave it out of their rings too. Once a seed has answered (or JoinWait
// has passed with none answering: it is then a cluster of one until one
// does), it sends the counters it holds from before (a snapshot read back,
// or what it held before a pause) to their owners, which keep the newer of
// theirs and these (never the sum), then puts itself in its ring, and only
// then lets the others route to it. So a node that restarts never counts
// alone a key that another node counts, and when keys move to it, it pulls
// their counters from the node that counted them meanwhile, as any node
// that joins does.
//
// Pauses. A node that finds itself paused (the process stopped, or starved)
// for long enough that the others may have declared it dead (see
// pauseLimit) stops counting at once: the others may have started its keys
// from their replicas and counted them since. It joins again as above,
// its counters sent to the keys' owners as older copies.

// JoinWait is how long a node configured with seeds waits for one to
// answer before it counts alone.
const JoinWait = 5 * time.Second

// msgRestore carries counters that may be older copies of the receiver's
// own; it keeps the newer of each (limiter.Engine.MergeNewer).
const msgRestore byte = 10

// joinGate says whether the node counts as a member of its own ring, and
// holds the counters it will send to their owners once it has joined.
type joinGate struct {
	member    atomic.Bool  // in its own ring: it counts the keys it owns
	announced atomic.Bool  // its metadata lets the others route to it
	beat      atomic.Int64 // Unix ns of the last heartbeat
	beatCPU   atomic.Int64 // the process's CPU time then, ns
	joining   atomic.Bool  // a join is under way
	wake      chan struct{}

	announceMu sync.Mutex // memberlist's UpdateNode is not safe concurrently

	mu   sync.Mutex
	held []limiter.State // older copies, for their owners once joined
}

// initGate sets the gate of a node created with cfg: a node with seeds to
// join starts outside its ring.
func (n *Node) initGate() {
	n.gate.wake = make(chan struct{}, 1)
	alone := len(n.cfg.Join) == 0
	n.gate.member.Store(alone)
	n.gate.announced.Store(alone)
}

// pauseLimit is how long a pause must be for this node to assume the
// others may have declared it dead: memberlist's shortest suspicion timeout
// is SuspicionMult probe intervals, so three quarters of that, and at least
// a second (scheduling delays on a busy machine are not pauses).
func (n *Node) pauseLimit() time.Duration {
	g := n.cfg.Gossip
	return max(time.Duration(g.SuspicionMult)*g.ProbeInterval*3/4, time.Second)
}

// heartbeatEvery is how often the node notes that it runs.
const heartbeatEvery = 50 * time.Millisecond

// heartbeat notes every heartbeatEvery that the node runs, until it stops;
// a beat long after the last one means it was paused.
func (n *Node) heartbeat() {
	defer n.wg.Done()
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			n.tick(now)
		case <-n.stop:
			return
		}
	}
}

// owning reports whether this node may count the keys its ring says it
// owns: it has joined, and has not just come back from a pause long enough
// for the others to have taken its keys over (which it notices here, before
// counting anything).
func (n *Node) owning() bool {
	n.checkPause(time.Now())
	return n.gate.member.Load()
}

// checkPause notices, at now, that the node was paused since its last
// heartbeat long enough for the others to have declared it dead, and stops
// it counting.
func (n *Node) checkPause(now time.Time) {
	if b := n.gate.beat.Load(); b != 0 && now.UnixNano()-b > int64(n.pauseLimit()) && n.wasStopped(now) {
		n.paused()
	}
}

// tick records that the node runs; a tick long after the last one means it
// was paused.
func (n *Node) tick(now time.Time) {
	n.checkPause(now)
	cpu, _ := cpuTime()
	n.gate.beatCPU.Store(int64(cpu))
	n.gate.beat.Store(now.UnixNano())
}

// wasStopped tells a late heartbeat of a stopped process (SIGSTOP, a frozen
// VM: it used next to no CPU since the last beat) from one of a busy
// process whose heartbeat waited for its turn (its other goroutines ran).
// Where CPU time is unknown, every late heartbeat counts as a pause.
func (n *Node) wasStopped(now time.Time) bool {
	cpu, ok := cpuTime()
	if !ok {
		return true
	}
	wall := now.UnixNano() - n.gate.beat.Load()
	used := int64(cpu) - n.gate.beatCPU.Load()
	return used < wall/20 // under 5 % of one core
}

// paused stops counting as an owner and joins again: what this node counted
// is sent to the keys' owners as older copies.
func (n *Node) paused() {
	if !n.gate.member.CompareAndSwap(true, false) {
		return
	}
	n.gate.announced.Store(false)
	n.gate.beat.Store(time.Now().UnixNano())
	n.log.Warn("this node was paused long enough to be declared dead; joining again before counting")
	st := n.state.Load()
	now := time.Now()
	owned := n.engine.Extract(now, func(k limiter.Key) bool {
		m, _ := st.ring.Owner(k.Route())
		return m.Name == n.name
	}, 0)
	n.hold(owned)
	go func() { // not in n.wg (a request may start it as the node stops): it ends with n.stop
		n.requestRebuild() // its keys go to the others' owners at once
		n.announce()       // joining: the others leave it out
		n.settle(true)
	}()
}

// hold keeps states to send to their owners once joined.
func (n *Node) hold(states []limiter.State) {
	if len(states) == 0 {
		return
	}
	n.gate.mu.Lock()
	n.gate.held = append(n.gate.held, states...)
	n.gate.mu.Unlock()
}

// RestoreCounters takes counters this node kept before it started (a
// snapshot): they may be older copies of counts the cluster holds now. A
// standalone node merges them. A node that has not joined yet keeps them
// until it has, then sends those of keys it owns or keeps replicas of to
// their owners, which keep the newer of theirs and these; a node that has
// joined sends them at once.
func (n *Node) RestoreCounters(states []limiter.State) {
	if len(states) == 0 {
		return
	}
	if n.standalone {
		n.engine.Merge(time.Now(), states)
		return
	}
	n.hold(states)
	if n.gate.member.Load() && n.running.Load() && !n.gate.joining.Load() {
		go n.deliverHeld(n.state.Load().ring) // bounded: sendRestore gives up with n.stop or its deadline
	}
}

// wakeJoin makes a join waiting for its next try try at once: a member
// appeared.
func (n *Node) wakeJoin() {
	if n.gate.member.Load() {
		return
	}
	select {
	case n.gate.wake <- struct{}{}:
	default:
	}
}

// settle runs once this node has joined (or given up waiting): it waits
// for its ring of the other members, sends the held counters to their
// owners, puts itself in its ring and then lets the others route to it.
func (n *Node) settle(joined bool) {
	n.gate.joining.Store(true)
	defer n.gate.joining.Store(false)
	others := n.settledRing(func(r *Ring) bool { return !r.Has(n.name) })
	n.awaitPeers(others)
	n.deliverHeld(others)
	n.gate.member.Store(true)
	n.requestRebuild()
	n.settledRing(func(r *Ring) bool { return r.Has(n.name) })
	n.gate.announced.Store(true)
	n.announce()
	if joined {
		n.log.Info("joined: counting the keys this node owns", "members", n.state.Load().ring.Len())
	} else {
		n.log.Warn("no seed answered within the join wait; counting alone until one does", "join_wait", JoinWait.String())
	}
}

// settledRing waits (a bounded while) until the ring the node routes by is
// the one its member table makes and satisfies ok, and returns it.
func (n *Node) settledRing(ok func(*Ring) bool) *Ring {
	deadline := time.Now().Add(2 * time.Second)
	for {
		want := NewRing(n.hasher, n.currentMembers())
		r := n.state.Load().ring
		if r.Fingerprint() == want.Fingerprint() && ok(r) || time.Now().After(deadline) {
			return r
		}
		n.requestRebuild()
		select {
		case <-n.stop:
			return r
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// awaitPeers waits (a bounded while) until this node is connected to every
// other member of ring: the keys that move to it are pulled from them.
func (n *Node) awaitPeers(ring *Ring) {
	deadline := time.Now().Add(2 * time.Second)
	for _, m := range ring.Members() {
		for m.Name != n.name && time.Now().Before(deadline) {
			if p := n.peers.get(m.Name); p != nil && p.connected.Load() {
				break
			}
			select {
			case <-n.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// deliverHeld sends the held counters of keys this node owns or succeeds
// (in ring with this node) to their owners in ring, as older copies; the
// others are dropped (their owners hold them). Counters for this node
// itself, or whose owner cannot be reached, are kept here the same way.
func (n *Node) deliverHeld(ring *Ring) {
	n.gate.mu.Lock()
	held := n.gate.held
	n.gate.held = nil
	n.gate.mu.Unlock()
	if len(held) == 0 {
		return
	}
	now := time.Now()
	self := *n.self.Load()
	members := ring.Members()
	if !ring.Has(n.name) {
		members = append(members, self)
	}
	with := NewRing(n.hasher, members)
	byOwner := make(map[string][]limiter.State)
	dropped := 0
	for _, s := range held {
		route := s.Key.Route()
		owner, _ := with.Owner(route)
		succ, _ := with.Successor(route)
		if owner.Name != n.name && succ.Name != n.name {
			dropped++
			continue
		}
		to, ok := ring.Owner(route)
		if !ok {
			to = self
		}
		byOwner[to.Name] = append(byOwner[to.Name], s)
	}
	restored := 0
	for name, states := range byOwner {
		if name == n.name {
			n.engine.MergeNewer(now, states)
			n.dirty.noteStates(states)
			restored += len(states)
			continue
		}
		if err := n.sendRestore(name, states); err != nil {
			n.log.Warn("sending restored counters to their owner failed; dropping them", "to", name, "counters", len(states), "error", err.Error())
			continue
		}
		restored += len(states)
	}
	n.log.Info("restored counters kept before joining: the newer of each at its owner", "counters", restored, "not_ours", dropped)
}

// sendRestore sends states to a peer as older copies.
func (n *Node) sendRestore(name string, states []limiter.State) error {
	deadline := time.Now().Add(max(20*n.cfg.CallTimeout, 2*time.Second))
	var p *peer
	for {
		if p = n.peers.get(name); p != nil && p.connected.Load() {
			break
		}
		if time.Now().After(deadline) {
			return errUnavailable
		}
		n.requestRebuild()
		select {
		case <-n.stop:
			return errClosed
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, part := range splitStates(states, handoffFrameBytes) {
		e := &encoder{}
		encodeStates(e, part)
		c := newCall(msgRestore)
		c.body = e.b
		if err := p.do(c, deadline); err != nil {
			return err
		}
	}
	return nil
}

// applyRestore keeps the newer of this node's counters and older copies
// sent by a node that joined.
// A key this node keeps a replica of, not promoted yet, has the newer kept
// in the replica: promoting it then adds what others admitted in fallback
// to it, never this copy on top of the replica.
func (n *Node) applyRestore(now time.Time, states []limiter.State) {
	rest := n.replicas.newer(states)
	n.engine.MergeNewer(now, rest)
	n.dirty.noteStates(rest)
}

// unpulledTake decides for keys this node owns but could not pull yet
// (the node that counted them does not answer): it counts them here, in
// its own engine, within the fallback limits, so what it admits adds up
// with what it pulls later and the fallback share is not given afresh with
// every reconciliation.
func (n *Node) unpulledTake(now time.Time, op action, client limiter.Key, reqs []limiter.Request, res []limiter.Result) (bool, float64) {
	if n.fallback.mode() != FallbackLocal {
		return n.fallbackTake(now, op, client, reqs, res)
	}
	var buf [8]limiter.Request
	scaled, _ := n.fallbackLimits(client, reqs, buf[:])
	return n.local(now, op, client, scaled, res)
}

// announce gossips the node's metadata, without holding up its stop.
func (n *Node) announce() {
	if n.ml == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.gate.announceMu.Lock()
		defer n.gate.announceMu.Unlock()
		n.ml.UpdateNode(time.Second)
	}()
	select {
	case <-done:
	case <-n.stop:
	}
}

// holdWhileJoining makes a request that arrives while this node is joining
// (again) wait, a bounded while, for it to have joined: the others' owners
// are then connected and its own keys pulled, where deciding at once could
// only be by fallback, blind to what the owners counted.
func (n *Node) holdWhileJoining() {
	if n.gate.member.Load() || !n.running.Load() {
		return
	}
	deadline := time.Now().Add(max(5*n.cfg.CallTimeout, 500*time.Millisecond))
	for !n.gate.member.Load() && time.Now().Before(deadline) {
		select {
		case <-n.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// rememberOwnTold keeps, for a while after a membership change, what this
// node itself answered as an owner, as it keeps what other owners answer:
// a key it counted may move away (to a node that joins or comes back), and
// if that node cannot be reached at first, this node's fallback starts from
// what it last knew rather than from a fresh fallback share.
func (n *Node) rememberOwnTold(now time.Time, op action, reqs []limiter.Request, res []limiter.Result) {
	if op != actTake {
		return
	}
	if st := n.state.Load(); st.prev != nil && now.Sub(st.changed) <= n.cfg.HandoffWindow {
		n.rememberTold(reqs, res)
	}
}
