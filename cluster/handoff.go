package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// msgPull is msgTransfer from a named node: the keys' new owner, which the
// giver routes them to from then on (until its own ring changes), rather
// than counting them afresh before it has heard of the change. The reply
// ends with a byte: 1 if it holds all the giver had of the keys, 0 if a
// push of some was still under way (the puller must not count them yet).
const msgPull byte = 11

// pullRetry is how long a new owner waits before it asks again for a key
// it could not pull (it decides the key by fallback meanwhile).
func (n *Node) pullRetry() time.Duration { return max(4*n.cfg.CallTimeout, 200*time.Millisecond) }

// lend records that the node named to pulled keys this node owned: until
// this node's ring changes, it sends them there.
func (n *Node) lend(to string, keys []limiter.Key) {
	if to == "" || to == n.name {
		return
	}
	st := n.state.Load()
	for _, k := range keys {
		if owner, _ := st.ring.Owner(k.Route()); owner.Name == n.name {
			st.redirect.Store(k, to)
		}
	}
}

// lentTo returns where key goes instead of owner, this node, if another
// node pulled it away.
func (n *Node) lentTo(st *ringState, owner Member, k limiter.Key) (Member, bool) {
	if owner.Name != n.name {
		return owner, false
	}
	if to, ok := st.redirect.Load(k); ok {
		return Member{Name: to.(string)}, true
	}
	return owner, false
}

// handOff sends the counters this node holds but no longer owns to their
// owners under the current ring. Extracted counters wait in transit until
// they are sent; a new owner that pulls a key meanwhile gets it from there,
// and the push then skips it, so a counter is delivered once; a pull that
// comes while the key is on its way waits for the push to land. A counter
// that cannot be delivered is merged back and sent again a moment later
// (and with every later hand-off): a count is never dropped.
func (n *Node) handOff() {
	n.handoffMu.Lock()
	defer n.handoffMu.Unlock()
	st := n.state.Load()
	leaving := n.leaving.Load()
	now := time.Now()
	moving := n.engine.Extract(now, func(k limiter.Key) bool {
		owner, ok := st.ring.Owner(k.Route())
		return ok && (owner.Name != n.name || leaving)
	}, 0)
	if len(moving) == 0 {
		return
	}
	n.transit.put(moving)
	byOwner := make(map[string][]limiter.Key)
	for _, s := range moving {
		owner, _ := st.ring.Owner(s.Key.Route())
		byOwner[owner.Name] = append(byOwner[owner.Name], s.Key)
	}
	sent, failed := 0, false
	for owner, keys := range byOwner {
		k, err := n.sendStates(owner, keys)
		sent += k
		if err != nil {
			failed = true
			back := n.transit.take(keys)
			n.log.Warn("handing off counters failed; keeping them", "to", owner, "counters", len(back), "error", err.Error())
			n.engine.Merge(time.Now(), back)
		}
	}
	if sent > 0 {
		n.log.Info("handed off counters to their new owners", "counters", sent)
	}
	if failed && !leaving {
		n.retryHandOff()
	}
}

// retryHandOff hands off again, a while later, what a failed hand-off
// kept: the owner's connection may be coming up. One retry at a time.
func (n *Node) retryHandOff() {
	if !n.handoffRetry.CompareAndSwap(false, true) {
		return
	}
	go func() { // not in n.wg: it may start while the node stops; it ends with n.stop
		defer n.handoffRetry.Store(false)
		t := time.NewTimer(max(2*n.cfg.CallTimeout, 200*time.Millisecond))
		defer t.Stop()
		select {
		case <-t.C:
		case <-n.stop:
			return
		}
		n.handoffRetry.Store(false)
		n.handOff()
	}()
}

// sendStates delivers the counters of keys still in transit to a peer, in
// frames of at most maxStates states and handoffFrameBytes bytes, and
// reports how many it delivered.
func (n *Node) sendStates(owner string, keys []limiter.Key) (int, error) {
	p := n.peers.get(owner)
	if p == nil {
		return 0, fmt.Errorf("no connection to %s", owner)
	}
	// The connection may still be coming up right after a join.
	deadline := time.Now().Add(max(20*n.cfg.CallTimeout, 2*time.Second))
	for !p.connected.Load() {
		if time.Now().After(deadline) {
			return 0, errUnavailable
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := 0
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxStates)]
		keys = keys[len(chunk):]
		// Out of transit, on their way: a pull meanwhile waits for the
		// push to land rather than finding the keys nowhere.
		done := n.sending.start(chunk)
		parts := splitStates(n.transit.take(chunk), handoffFrameBytes)
		for i, states := range parts {
			e := &encoder{}
			encodeStates(e, states)
			c := newCall(msgHandoff)
			c.body = e.b
			if err := p.do(c, deadline); err != nil {
				for _, back := range parts[i:] {
					n.engine.Merge(time.Now(), back)
				}
				done()
				return sent, err
			}
			sent += len(states)
		}
		done()
	}
	return sent, nil
}

// sendingKeys are keys whose counters are being pushed to a new owner.
type sendingKeys struct {
	mu   sync.Mutex
	keys map[limiter.Key]chan struct{}
}

// start marks keys as being sent; the function returned ends it.
func (s *sendingKeys) start(keys []limiter.Key) func() {
	ch := make(chan struct{})
	s.mu.Lock()
	if s.keys == nil {
		s.keys = make(map[limiter.Key]chan struct{})
	}
	for _, k := range keys {
		s.keys[k] = ch
	}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		for _, k := range keys {
			if s.keys[k] == ch {
				delete(s.keys, k)
			}
		}
		s.mu.Unlock()
		close(ch)
	}
}

// wait waits, until deadline, for the pushes of any of keys to end, and
// reports whether they all did.
func (s *sendingKeys) wait(keys []limiter.Key, deadline time.Time) bool {
	for _, k := range keys {
		s.mu.Lock()
		ch := s.keys[k]
		s.mu.Unlock()
		if ch == nil {
			continue
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			return false
		}
	}
	return true
}

// handoffFrameBytes bounds the encoded states of one hand-off frame, well
// under the frame limit: lease lists make a state's size vary.
const handoffFrameBytes = maxFrame / 4

// splitStates cuts states into runs whose encoding takes at most budget
// bytes each (a state larger than budget goes alone).
func splitStates(states []limiter.State, budget int) [][]limiter.State {
	var out [][]limiter.State
	var scratch []byte
	start, size := 0, 4
	for i := range states {
		scratch = limiter.AppendStates(scratch[:0], states[i:i+1])
		one := len(scratch) - 4
		if i > start && size+one > budget {
			out = append(out, states[start:i])
			start, size = i, 4
		}
		size += one
	}
	if start < len(states) {
		out = append(out, states[start:])
	}
	return out
}

// Leave leaves the cluster gracefully: it announces that it is leaving
// (others stop routing to it and ask it for the counters they now own),
// hands every counter to its new owner, then leaves the gossip and stops.
// Counts are exact through it; see the package documentation.
func (n *Node) Leave(timeout time.Duration) error {
	if !n.running.Load() {
		n.Close()
		return nil
	}
	var err error
	n.closeOnce.Do(func() {
		if timeout <= 0 {
			timeout = DefaultLeaveTimeout
		}
		n.leaving.Store(true)
		n.gate.announceMu.Lock()
		e := n.ml.UpdateNode(timeout / 4)
		n.gate.announceMu.Unlock()
		if e != nil {
			n.log.Warn("announcing departure", "error", e.Error())
		}
		n.rebuildRing() // routes by the ring without this node from now on
		n.handOff()
		// Requests already on their way here are answered with the new
		// owner's name; give peers a moment to see the announcement, then
		// hand off whatever was counted meanwhile.
		time.Sleep(min(timeout/4, 4*n.cfg.Gossip.GossipInterval+100*time.Millisecond))
		n.handOff()
		if e := n.ml.Leave(timeout / 4); e != nil {
			err = fmt.Errorf("leaving the gossip: %w", e)
		}
		n.shutdown()
		n.log.Info("left the cluster", "node", n.name)
	})
	return err
}

// Close stops the node at once, without handing off its counters: what
// a crash would do, for tests and for failed starts.
func (n *Node) Close() {
	n.closeOnce.Do(n.shutdown)
}

func (n *Node) shutdown() {
	close(n.stop)
	if !n.running.Load() {
		return // never started, or failed to: nothing bound, nothing running
	}
	n.ml.Shutdown()
	n.listener.Close()
	for _, p := range n.peers.takeAll() {
		p.close()
	}
	n.wg.Wait()
	n.blocked.close()
}
