package cluster

import (
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Successor replicas. An owner notes every key it changes and, every
// ReplicateEvery, sends the current counters of the keys changed since the
// last time to each key's successor (the node that would own it if the
// owner were gone), batched per successor. The successor keeps them as a
// replica, newer replacing older (never added). When the successor becomes
// the owner because the owner died (it is neither in the ring nor leaving),
// it starts from the replica instead of asking the dead node; a graceful
// leave hands the counters over instead. So a crash loses at most the
// changes of the last replication interval (and of a batch lost with the
// crash). Replicas are bounded (the engine's key bound), expire with their
// counters, and are cleared by a reset. A single node replicates nothing and
// pays nothing: the note is skipped when the ring has one member.

// ReplicateEvery is how often an owner sends its changed counters to their
// successors: the most a crash can lose.
const ReplicateEvery = 5 * time.Millisecond

// replicaStore holds the counters this node keeps as a successor.
type replicaStore struct {
	mu     sync.Mutex
	states map[limiter.Key]limiter.State
	max    int
}

func newReplicaStore(max int) *replicaStore {
	return &replicaStore{states: make(map[limiter.Key]limiter.State), max: max}
}

// put keeps states, replacing older ones of the same keys. A full store
// drops expired replicas first, then refuses new keys.
func (r *replicaStore) put(now time.Time, states []limiter.State) {
	ns := now.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		if _, ok := r.states[s.Key]; !ok && len(r.states) >= r.max {
			r.sweepLocked(ns)
			if len(r.states) >= r.max {
				continue
			}
		}
		r.states[s.Key] = s
	}
}

// newer keeps, for each of states whose key has a replica here, the newer
// of the two as the replica, and returns the others: older copies of an
// owner's counts meet its replica before the replica is promoted.
func (r *replicaStore) newer(states []limiter.State) (rest []limiter.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range states {
		if rep, ok := r.states[s.Key]; ok && s.Kind < limiter.KindGrant {
			r.states[s.Key] = limiter.NewerState(rep, s)
			continue
		}
		rest = append(rest, s)
	}
	return rest
}

// take removes and returns the live replica of k.
func (r *replicaStore) take(now time.Time, k limiter.Key) (limiter.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.states[k]
	if ok {
		delete(r.states, k)
	}
	return s, ok && s.Expires > now.UnixNano()
}

// drop removes the replicas of keys.
func (r *replicaStore) drop(keys []limiter.Key) {
	r.mu.Lock()
	for _, k := range keys {
		delete(r.states, k)
	}
	r.mu.Unlock()
}

// sweep drops expired replicas.
func (r *replicaStore) sweep(now time.Time) {
	r.mu.Lock()
	r.sweepLocked(now.UnixNano())
	r.mu.Unlock()
}

func (r *replicaStore) sweepLocked(ns int64) {
	for k, s := range r.states {
		if s.Expires <= ns {
			delete(r.states, k)
		}
	}
}

// len returns how many replicas are held.
func (r *replicaStore) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.states)
}

// replicate runs until the node stops: every ReplicateEvery it sends the
// changed counters to their successors.
func (n *Node) replicate() {
	defer n.wg.Done()
	n.wg.Add(1)
	go n.heartbeat() // replication calls may block; the heartbeat must not
	tick := time.NewTicker(ReplicateEvery)
	defer tick.Stop()
	sweep := time.NewTicker(10 * time.Second)
	defer sweep.Stop()
	for {
		select {
		case now := <-tick.C:
			n.replicateOnce(now)
		case now := <-sweep.C:
			n.replicas.sweep(now)
		case <-n.stop:
			return
		}
	}
}

// replicateOnce sends the counters changed since the last time to their
// successors, one call per successor.
func (n *Node) replicateOnce(now time.Time) {
	keys := n.dirty.drain()
	if len(keys) == 0 {
		return
	}
	st := n.state.Load()
	states := n.engine.StatesOf(now, keys)
	bySucc := make(map[string][]limiter.State)
	for _, s := range states {
		if owner, _ := st.ring.Owner(s.Key.Route()); owner.Name != n.name {
			continue // no longer ours: the hand-off moves it
		}
		if succ, ok := st.ring.Successor(s.Key.Route()); ok {
			bySucc[succ.Name] = append(bySucc[succ.Name], s)
		}
	}
	for name, list := range bySucc {
		p := n.peers.get(name)
		if p == nil || !p.connected.Load() {
			// Not reachable yet (it is dialing, or restarting): the keys
			// stay noted and go with the next round, so a successor that
			// comes back gets them, not only the keys that change again.
			n.dirty.noteStates(list)
			continue
		}
		parts := splitStates(list, handoffFrameBytes)
		for i, part := range parts {
			e := &encoder{}
			encodeStates(e, part)
			c := newCall(msgReplicate)
			c.body = e.b
			n.stats.replicaBytes.Add(uint64(len(e.b)))
			n.stats.replicaStates.Add(uint64(len(part)))
			if err := p.do(c, time.Now().Add(n.cfg.CallTimeout)); err != nil {
				for _, rest := range parts[i:] {
					n.dirty.noteStates(rest) // sent again next round
				}
				break
			}
		}
	}
}

// promote starts the keys this node owns in ring, whose owner in prev died,
// from their replicas; it runs before the node routes by ring.
func (n *Node) promote(now time.Time, prev, ring *Ring, gone map[string]bool) {
	if len(gone) == 0 {
		return
	}
	var states []limiter.State
	ns := now.UnixNano()
	r := n.replicas
	r.mu.Lock()
	for k, s := range r.states {
		was, _ := prev.Owner(k.Route())
		if !gone[was.Name] {
			continue
		}
		if m, _ := ring.Owner(k.Route()); m.Name == n.name {
			delete(r.states, k)
			if s.Expires > ns {
				states = append(states, s)
			}
		}
	}
	r.mu.Unlock()
	if len(states) > 0 {
		n.engine.Merge(now, states)
		n.dirty.noteStates(states)
		n.stats.fromReplica.Add(uint64(len(states)))
		n.log.Info("started the keys of a node that died from their replicas", "counters", len(states))
		keys := make([]limiter.Key, len(states))
		for i, s := range states {
			keys[i] = s.Key
		}
		n.collectFallback(now, ring, keys)
	}
}

// collectFallback takes from every other member of ring what it counted in
// fallback for keys, which this node now owns, and adds it. Members that
// have not seen the owner die yet would send it only then, admitting more
// meanwhile; instead they hand it over now and route those keys here.
func (n *Node) collectFallback(now time.Time, ring *Ring, keys []limiter.Key) {
	var wg sync.WaitGroup
	for _, m := range ring.Members() {
		if m.Name == n.name {
			continue
		}
		p := n.peers.get(m.Name)
		if p == nil || !p.connected.Load() {
			continue
		}
		wg.Go(func() {
			for rest := keys; len(rest) > 0; {
				chunk := rest[:min(len(rest), maxStates)]
				rest = rest[len(chunk):]
				e := &encoder{}
				e.str(n.name)
				encodeKeys(e, chunk)
				c := newCall(msgFallbackTransfer)
				c.body = e.b
				if err := p.do(c, time.Now().Add(n.cfg.CallTimeout)); err != nil {
					return
				}
				d := &decoder{b: c.reply}
				if states := decodeStates(d); d.err == nil && len(states) > 0 {
					n.engine.Merge(now, states)
					n.dirty.noteStates(states)
					n.stats.reconciled.Add(uint64(len(states)))
				}
			}
		})
	}
	wg.Wait()
}

// resync marks for replication every counter this node owns in ring whose
// successor differs from the one prev named: a new successor (a node that
// joined or restarted, or took the place of one that left) holds no replica
// of keys that have not changed since.
func (n *Node) resync(now time.Time, prev, ring *Ring) {
	if ring.Len() < 2 {
		return
	}
	var keys []limiter.Key
	n.engine.Range(now, func(s limiter.State) bool {
		route := s.Key.Route()
		if owner, _ := ring.Owner(route); owner.Name != n.name {
			return true
		}
		succ, _ := ring.Successor(route)
		if was, ok := prev.Successor(route); !ok || was.Name != succ.Name {
			keys = append(keys, s.Key)
		}
		return true
	})
	n.dirty.noteKeys(keys)
}
