package cluster

import (
	"time"

	"github.com/tollgate/tollgate/limiter"
)

// Settling what a request cost once its response is known: units given
// back (a response a zone does not count, a cost reported lower than was
// taken) or spent once more (a cost reported higher), where the key is
// counted. See core.Core.Settle.

// RefundAt gives back the units of reqs (each request's Cost) that a take
// of this node decided by src counted at the instant at: the decision's
// time, or the instant a booked request was booked for. The units come out
// of the window that counted them, at the key's owner wherever the key is
// counted now (this node, a peer, the node it moved to), or in this node's
// fallback counter if fallback admitted it and still holds it. A refund
// that must travel is numbered and applied once, even if it is sent again,
// and reaches the key's successor with the owner's next replication.
//
// A refund that travels returns once the node that counts the key has
// acknowledged it, or after a peer's patience (two call timeouts) at most:
// the caller's next request, once it has the response this one settled,
// finds it settled (a login that succeeded does not hold a unit the
// user's next login needs). If it does not come in time, it goes on
// being sent in the background.
func (n *Node) RefundAt(now, at time.Time, src Source, reqs []limiter.Request) {
	n.settle(now, at, src, false, reqs)
}

// Charge spends the units of reqs once more, where RefundAt would give
// them back: a cost settled after the request was served. A charge beyond
// what remains leaves the key exhausted (see limiter.Engine.Charge). It
// waits as RefundAt does.
func (n *Node) Charge(now time.Time, src Source, reqs []limiter.Request) {
	n.settle(now, now, src, true, reqs)
}

// settle settles reqs and waits, up to the node's patience, until the
// transfers it took are acknowledged.
func (n *Node) settle(now, at time.Time, src Source, charge bool, reqs []limiter.Request) {
	c := n.core()
	n.coreMu.RLock()
	sent := c.Settle(now, at, src, charge, reqs)
	n.coreMu.RUnlock()
	if len(sent) == 0 {
		return
	}
	timer := time.NewTimer(n.patience())
	defer timer.Stop()
	for {
		acked := n.settled.channel() // before looking: a wake-up after it is not missed
		pending := false
		for _, seq := range sent {
			if c.SettlementPending(seq) {
				pending = true
				break
			}
		}
		if !pending {
			return
		}
		select {
		case <-acked:
		case <-timer.C:
			return
		case <-n.stop:
			return
		}
	}
}
