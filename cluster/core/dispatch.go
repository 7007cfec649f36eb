package core

import (
	"time"
)

// Handle answers a message from another core: a Transfer (with an Ack), a
// Pull (with a PullReply), a SealQuery, a Ping or a ScoreQuery. An Ack of a
// transfer given in a pull's reply gets no answer (nil). Take items go to
// Serve.
func (c *Core) Handle(now time.Time, from Peer, msg Message) Message {
	c.noteHeard(from, now)
	defer c.notifyOutbox()
	switch m := msg.(type) {
	case Transfer:
		ack := c.handleTransfer(now, from, m, false)
		if !ack.Refused && c.stood.applied(from, ack.Seq) {
			c.notifySettled()
		}
		return ack
	case Pull:
		return c.handlePull(now, from, m)
	case SealQuery:
		return c.handleSeal(now, from, m)
	case Ping:
		return c.handlePing(now, from, m)
	case ScoreQuery:
		return ScoreReply{Score: c.engine.Reputation(now, m.Client)}
	case Ack:
		c.ackedGiven(now, from, m)
	}
	return nil
}

// handlePing answers a ping: whether this node took over the pinger's keys
// (the pinger must stop counting them), what it has sent the pinger and
// not seen acknowledged, and whether it still holds counts for the
// pinger's keys that it will send (its calls do not reach the pinger yet:
// once its next probe of the pinger is answered, they go); and notes the
// pinger's join epoch. A node that stood still waits for those before it
// counts its keys (see standstill).
func (c *Core) handlePing(now time.Time, from Peer, p Ping) Pong {
	run := c.self.Inc
	ps := c.peers.get(from.Name)
	if ps == nil || ps.peer.Inc != from.Inc {
		return Pong{Dead: c.gate.saysDead(from, p.Epoch, p.Counting), Run: run}
	}
	ps.epoch.Store(p.Epoch)
	if c.gate.saysDead(from, p.Epoch, p.Counting) {
		return Pong{Dead: true, Run: run}
	}
	pong := Pong{Owed: c.out.owedTo(from, purposeReconcile, purposeForward, purposeCancel, purposeRefund), Run: run}
	pong.Recovering = ps.reachState() != reachable
	// The pinger holds a lease from this node once the answer reaches it:
	// transfers it refused for want of one go again now
	// (TestATransferRefusedForWantOfALeaseGoesAgainOnceTheReceiverPinged).
	m := c.mono(now)
	ps.pinged.Store(m)
	if c.out.refusedDue(from, m) {
		c.notifyOutbox()
	}
	return pong
}

// ackedGiven records the acknowledgement, by the run from, of a transfer
// given in a pull's reply.
func (c *Core) ackedGiven(now time.Time, from Peer, a Ack) {
	c.acked(now, &pendingRequest{to: from, seq: a.Seq}, a)
}

// Answered takes the answer to the message with ID id.
func (c *Core) Answered(now time.Time, id uint64, reply Message) {
	r := c.out.answered(id)
	if r == nil {
		return
	}
	if pong, ok := reply.(Pong); ok && pong.Run != r.to.Inc {
		// Another run of the node answered at its address: the run pinged
		// is gone. Taken for its answer, it would be called again, and
		// sent what it can no longer apply (refused by the run there).
		c.failed(now, r)
		return
	}
	c.noteHeard(r.to, now)
	defer c.notifyOutbox()
	switch r.msg.(type) {
	case Transfer:
		if a, ok := reply.(Ack); ok {
			c.acked(now, r, a)
		}
	case Pull:
		if pr, ok := reply.(PullReply); ok {
			c.pulled(now, r, pr)
		}
	case SealQuery:
		if sr, ok := reply.(SealReply); ok {
			c.sealReplied(now, r, sr)
		}
	case Ping:
		if pong, ok := reply.(Pong); ok {
			if p := c.peers.get(r.to.Name); p != nil && p.peer.Inc == r.to.Inc {
				c.pinged(now, p, r.sent, pong)
			}
		}
	}
}

// Failed reports that the message with ID id got no answer.
func (c *Core) Failed(now time.Time, id uint64) {
	r := c.out.answered(id)
	if r == nil {
		return
	}
	c.failed(now, r)
}

// failed handles the failure of r, a request that got no answer from its
// run.
func (c *Core) failed(now time.Time, r *pendingRequest) {
	p := c.peers.get(r.to.Name)
	if p != nil && p.peer.Inc != r.to.Inc {
		p = nil
	}
	defer c.notifyOutbox()
	switch msg := r.msg.(type) {
	case Transfer:
		if msg.Mode == ModeReplica {
			c.replicaFailed(r.seq)
		} else {
			c.debugTransfer("transfer got no answer: sent again later", r.to, msg, 0)
			c.out.failed(r.seq, c.mono(now)+int64(c.cfg.CallTimeout), false)
		}
		if p != nil {
			c.peerFailed(p)
		}
	case Pull:
		c.pullFailed(now, msg.Keys)
		if p != nil {
			c.peerFailed(p)
		}
	case SealQuery:
		c.sealFailed(now, r)
	case Ping:
		if p != nil {
			c.pingFailed(now, p)
		}
	}
}
