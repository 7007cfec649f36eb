package core

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Standing still. A node that does not run for longer than a call timeout
// (stopped, not scheduled, a long pause of its process) has had its
// callers give up on it: they decided its keys by fallback meanwhile, each
// within its share of what it last told them remained, and hold what they
// admitted until it answers their pings again. When it runs again, the
// requests that waited for it come first; decided from its own count
// alone, they admit the limit again beside what fallback admitted (110 of
// 100 with three real processes). So a node that stood still asks before
// it counts its keys again: it pings every peer at once, and its keys wait
// until each has answered a ping sent after the pause, saying which
// transfers it owes it (Pong.Owed: what it admitted for its keys in
// fallback, refunds, cancels), and until those are applied here; or until
// standstillHold has passed, when it counts with what came (a peer that
// does not answer is down: what it holds arrives later, within the
// bound's F). A peer whose calls to the node failed says so in its answer
// (Pong.Recovering): once its next probe of the node is answered (a call
// timeout at most), it sends what it holds for the node's keys, as after
// any outage, and the node, which asks again each tick meanwhile, waits
// for that too (see handlePing). Taking the ping itself for the answer
// instead, and sending at once, doubled counts under delays in the
// simulator; probing the node at once let a key admit one over its bound
// under loss.
//
// The pause is told by the core's ticks: the driver ticks every few
// milliseconds, so a gap of a call timeout between two ticks is a pause.
// A request that comes after such a gap, before the first tick after it,
// waits for that tick.

// standstillHold bounds how long a node that stood still waits for its
// peers' answers before it counts its keys: twice a call timeout, a ping's
// round trip and a refused transfer sent again.
func (c *Core) standstillHold() int64 { return 2 * int64(c.cfg.CallTimeout) }

// standstill is what a core knows of its own pauses. It is safe for
// concurrent use; holds is read on every owned check, without a lock.
type standstill struct {
	lastTick atomic.Int64 // mono of the last tick, or of the core's start before the first
	resumed  atomic.Int64 // mono of the first tick after the last pause; 0: none yet
	until    atomic.Int64 // mono: its keys wait until then at most; 0: not waiting
	after    int64        // mono: a pause longer than this between ticks is one

	mu       sync.Mutex
	since    int64          // mono: the pause ended (its first tick after it)
	awaiting map[Peer]*owed // the peers whose answer it waits for
}

// owed is what one peer's answer left to wait for.
type owed struct {
	answered bool
	seqs     []uint64 // transfers it owes, not applied here yet
}

// holds reports whether this node's keys wait at m: it stood still and
// has not heard from its peers yet, or m comes after a pause no tick has
// seen yet.
func (s *standstill) holds(m int64) bool {
	if s.until.Load() > m {
		return true
	}
	return m-s.lastTick.Load() > s.after
}

// waitUntil returns until when a request waits at m: the end of the wait
// after a pause, or, for a pause no tick has seen yet, a pause's length
// (the first tick after it starts the wait, and wakes the request).
func (s *standstill) waitUntil(m int64) int64 {
	if u := s.until.Load(); u > m {
		return u
	}
	return m + s.after
}

// tick records a tick at m and reports whether it ends a pause (see
// start). A wait whose time ran out ends.
func (s *standstill) tick(m int64) (paused bool) {
	if last := s.lastTick.Swap(m); m-last > s.after {
		s.resumed.Store(m)
		return true
	}
	if u := s.until.Load(); u != 0 && m >= u {
		s.end()
	}
	return false
}

// start waits, after a pause that ended at m, for the peers given, until
// m+hold at most.
func (s *standstill) start(m, hold int64, peers []Peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since = m
	s.awaiting = make(map[Peer]*owed, len(peers))
	for _, p := range peers {
		s.awaiting[p] = &owed{}
	}
	if len(s.awaiting) == 0 {
		s.until.Store(0)
		return
	}
	s.until.Store(m + hold)
}

// end stops waiting.
func (s *standstill) end() {
	s.mu.Lock()
	s.awaiting = nil
	s.until.Store(0)
	s.mu.Unlock()
}

// answered records peer p's answer to a ping sent at sent: the transfers
// it owes (applied tells those applied here already), or that it holds
// more it will send (it is asked again). It reports whether the wait
// ended.
func (s *standstill) answered(p Peer, sent int64, pong Pong, applied func(uint64) bool) bool {
	if s.until.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.awaiting[p]
	if o == nil || sent < s.since {
		return false // not waited for, or a ping sent before the pause ended
	}
	o.answered = !pong.Recovering
	o.seqs = slices.DeleteFunc(slices.Clone(pong.Owed), applied)
	return s.settledLocked()
}

// applied records that transfer seq from p was applied here, and reports
// whether the wait ended.
func (s *standstill) applied(p Peer, seq uint64) bool {
	if s.until.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.awaiting[p]
	if o == nil {
		return false
	}
	o.seqs = slices.DeleteFunc(o.seqs, func(x uint64) bool { return x == seq })
	return s.settledLocked()
}

// unreached records that p did not answer: it is not waited for. It
// reports whether the wait ended.
func (s *standstill) unreached(p Peer) bool {
	if s.until.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.awaiting[p]; !ok {
		return false
	}
	delete(s.awaiting, p)
	return s.settledLocked()
}

// settledLocked ends the wait if every peer waited for answered and
// nothing it owes is missing. s.mu is held.
func (s *standstill) settledLocked() bool {
	for _, o := range s.awaiting {
		if !o.answered || len(o.seqs) > 0 {
			return false
		}
	}
	s.awaiting = nil
	s.until.Store(0)
	return true
}

// unanswered returns the peers waited for whose last answer said they
// hold more to send, or that have not answered.
func (s *standstill) unanswered() []Peer {
	if s.until.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Peer
	for p, o := range s.awaiting {
		if !o.answered {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, cmpPeer) // pinged in this order
	return out
}

// tickStandstill records the tick at m; after a pause, it pings every
// peer that calls reach, and this node's keys wait for their answers. A
// peer that answered it holds more to send is asked again.
func (c *Core) tickStandstill(now time.Time, m int64) {
	for _, run := range c.stood.unanswered() {
		if p := c.peers.get(run.Name); p != nil && p.peer == run {
			c.pingNow(p, m)
		}
	}
	paused := c.stood.tick(m)
	regained := c.majorityRegained(c.view.Load())
	if !paused && !regained {
		return
	}
	var peers []*peerState
	var runs []Peer
	for _, p := range c.peers.all() {
		// A majority back, the peers whose calls failed are asked too:
		// the larger side, they may have taken its keys over (see
		// majorityRegained).
		if p.reachState() != down || regained {
			peers = append(peers, p)
			runs = append(runs, p.peer)
		}
	}
	c.stood.start(m, c.standstillHold(), runs)
	if paused {
		c.log.Info("this node stood still: its keys wait for what the others admitted meanwhile", "node", c.self.Name, "peers", len(runs))
	} else {
		c.log.Info("a majority answers again: this node's keys wait until its peers tell whether they took them over", "node", c.self.Name, "peers", len(runs))
	}
	c.notifySettled() // requests that came before this tick wait for the answers now, or count
	for _, p := range peers {
		p.mu.Lock()
		p.pinging = true
		p.nextPing = m + int64(c.cfg.ProbeInterval)
		p.mu.Unlock()
		c.out.request(p.peer, c.ping(), m, nil)
	}
}

// majorityRegained notes whether this member lacks a majority by v, and
// reports whether it has one again after a tick found it without one.
// Without a majority, the larger side may have declared it dead and taken
// its keys over from their replicas; a majority answering again (its own
// side, and nodes it hears of for the first time, which no failed call
// marks as down) is no word that none did. So the node asks its peers, as
// after standing still: its keys, and the units given back for them, wait
// for their answers (a peer that took its keys over says so, and the node
// stops counting them). It asks every peer, those whose calls failed too:
// they are the larger side, which may have taken the keys over, and the
// majority may be back without them (a member heard of anew, that joined
// meanwhile, counts for it), before its probes of them are due again. One
// whose ping fails is not waited for, as after standing still. Given back
// from its own counter before that, a unit is lost where the counter
// meets the replica the others started from: the two are copies of one
// counter, and the larger stands.
func (c *Core) majorityRegained(v *view) bool {
	if v == nil || v.self < 0 {
		c.lacked.Store(false)
		return false
	}
	if !c.majority(v) {
		// A run that has had none yet counted nothing as an owner: no
		// word of its peers is missing; its keys come by its hand-off.
		c.lacked.Store(c.lacked.Load() || c.hadMajority.Load())
		return false
	}
	return c.lacked.Swap(false)
}

// owedTo returns the numbers of the transfers to the run to, of the
// purposes given, not acknowledged yet, in order.
func (o *outbox) owedTo(to Peer, purposes ...purpose) []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var seqs []uint64
	for seq, pt := range o.transfers {
		if pt.to == to && slices.Contains(purposes, pt.purpose) {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs
}
